"""The dataset record models (SFT, DPO, GRPO) and the one DPO pairing rule."""

import json

import pytest

from knowlyrcore import read_jsonl, write_jsonl
from knowlyrcore.datasets import (
    DPORecord,
    GRPORecord,
    PreferenceRecord,
    SFTRecord,
    pair_preferences,
)
from knowlyrcore.errors import DataFormatError

CHAT = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "list the files"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
        "token_ids": [7, 8],
        "logprobs": [-0.5, -0.25],
        "reasoning_content": "look first",  # not declared: kept as it is
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.py", "token_ids": [9]},
    {"role": "assistant", "content": "a.py", "reward": 0.5},
]
STEPPED = {"steps": [{"index": 0, "tool_call": {"name": "ls"}}]}
# one record of each shape, as knowlyr-hub export writes them (and as older exports did)
RECORDS = [
    (
        SFTRecord,
        {
            "schema_version": "1.0",
            "task_id": "t1",
            "reward": None,
            "messages": CHAT,
            "tools": [],
            "metadata": {"trajectory_id": "a", "success": True, "loss": 2.5},
        },
    ),
    (
        SFTRecord,
        {
            "schema_version": "1.0",
            "task_id": "t1",
            "reward": 0.9,
            "instruction": "fix it",
            "input": "",
            "steps": [
                {
                    "thought": "look",
                    "action": {"name": "ls", "parameters": {}},
                    "observation": "a.py",
                    "reward": None,
                    "token_ids": [1, 2],
                    "logprobs": [-0.1, -0.2],
                }
            ],
        },
    ),
    (SFTRecord, {"instruction": "say hi", "response": "hi", "id": 17}),
    (
        DPORecord,
        {
            "schema_version": "1.0",
            "task_id": "t1",
            "prompt": "list the files",
            "chosen": CHAT[2:],
            "rejected": "no",
            "margin": 0.8,
            "metadata": {"chosen_id": "a", "rejected_id": "b"},
        },
    ),
    (
        GRPORecord,
        {
            "schema_version": "1.0",
            "task_id": "t1",
            "prompt": [CHAT[1]],
            "trajectories": [
                {"messages": CHAT[2:], "reward": 1.0, "step_rewards": [0.5, 1.5], "prompt_token_ids": [1, 2, 3]},
                {"response": "Step 1:\nThought: a\nAction: b", "reward": 0.0},
            ],
        },
    ),
]


@pytest.mark.parametrize(("model", "record"), RECORDS)
def test_records_round_trip_through_a_file_unchanged(tmp_path, model, record):
    """A file read into the model and written again is the same file: no field added (no
    ``null`` for the shapes a record does not use), none lost (undeclared keys are kept)."""
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (read,) = read_jsonl(path, model)
    write_jsonl(tmp_path / "again.jsonl", [read])
    (again,) = read_jsonl(tmp_path / "again.jsonl")
    assert again == {"schema_version": "1.0", **record}
    assert model.model_validate_json(read.model_dump_json()) == read


def test_models_written_from_python_hold_only_what_was_given():
    record = SFTRecord(task_id="t", reward=None, instruction="do", steps=[{"action": "ls"}])
    assert record.model_dump() == {
        "schema_version": "1.0",
        "task_id": "t",
        "reward": None,
        "instruction": "do",
        "steps": [{"action": "ls"}],
    }
    assert record.shape == "steps" and SFTRecord(messages=CHAT).shape == "messages"


def test_integer_task_ids_of_older_files_read_as_text():
    assert SFTRecord.model_validate({"task_id": 3, "instruction": "x", "response": "y"}).task_id == "3"


@pytest.mark.parametrize(
    ("model", "record", "error"),
    [
        (SFTRecord, {"instruction": "x"}, "<record>: an SFT record needs 'messages', 'steps' or 'response'"),
        (SFTRecord, {"steps": [{"action": "a"}]}, "instruction: Field required"),
        (SFTRecord, {"instruction": "x", "steps": [{"observation": "o"}]}, "steps[0]: needs 'thought' or 'action'"),
        (
            SFTRecord,
            {"instruction": "x", "steps": [{"action": "a", "reward": True}]},
            "steps[0].reward: must be a number, got bool",
        ),
        (SFTRecord, {"instruction": "x", "response": "y", "reward": "1"}, "reward: must be a number, got str"),
        (
            SFTRecord,
            {"instruction": "x", "response": "y", "metadata": {"loss": [1]}},
            "metadata.loss: must be a number, got list",
        ),
        (SFTRecord, {"messages": [{"role": "user", "content": "u"}]}, "messages: has no assistant message to train on"),
        (
            SFTRecord,
            {"messages": [{"role": "assistant", "content": 5}]},
            "messages[0].content: must be text or a list of parts, got int",
        ),
        (DPORecord, {"prompt": "p", "chosen": "c"}, "rejected: Field required"),
        (
            DPORecord,
            {"prompt": {"text": "p"}, "chosen": "c", "rejected": "r"},
            "prompt: must be text or a list of messages, got dict",
        ),
        (DPORecord, {"prompt": "p", "chosen": [], "rejected": "r"}, "chosen: must not be empty"),
        (DPORecord, {"prompt": "p", "chosen": "c", "rejected": [{"role": "bot"}]}, "rejected[0].role: Input should be"),
        (
            DPORecord,
            {"prompt": "p", "chosen": "c", "rejected": "r", "prompt_token_ids": [1, True]},
            "prompt_token_ids[1]: Input should be a valid integer",
        ),
        (GRPORecord, {"prompt": "p", "trajectories": [{"response": "x"}]}, "trajectories[0].reward: Field required"),
        (
            GRPORecord,
            {"prompt": "p", "trajectories": [{"reward": 1}]},
            "trajectories[0]: needs 'messages' or 'response'",
        ),
        (
            GRPORecord,
            {"prompt": "p", "trajectories": [{"response": "x", "reward": 1, "prompt_token_ids": [1, -2]}]},
            "trajectories[0].prompt_token_ids[1]: Input should be greater than or equal to 0",
        ),
        (
            GRPORecord,
            {
                "prompt": "p",
                "trajectories": [
                    {"reward": 1, "messages": [{"role": "assistant", "token_ids": [1, 2], "logprobs": [-0.5]}]}
                ],
            },
            "trajectories[0].messages[0].logprobs: 1 log-probs for 2 token_ids",
        ),
        (
            GRPORecord,
            {"prompt": "p", "trajectories": [{"reward": 1, "messages": [{"role": "assistant", "token_ids": [1.0]}]}]},
            "trajectories[0].messages[0].token_ids[0]: Input should be a valid integer",
        ),
        (PreferenceRecord, {"chosen": {"steps": "none"}, "rejected": {}}, "chosen.steps: Input should be a valid list"),
        (PreferenceRecord, {"chosen": STEPPED, "rejected": {}}, "rejected.steps: has no steps to train on"),
    ],
)
def test_a_malformed_record_is_named_by_file_line_and_field(tmp_path, model, record, error):
    path = tmp_path / "d.jsonl"
    path.write_text('{"instruction": "fine", "response": "ok"}\n' if model is SFTRecord else "")
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")
    line = 2 if model is SFTRecord else 1
    with pytest.raises(DataFormatError) as caught:
        list(read_jsonl(path, model))
    assert str(caught.value).startswith(f"{path}:{line}: {error}")
    assert caught.value.line == line


def test_a_foreign_schema_version_is_refused_in_memory_too():
    with pytest.raises(ValueError, match="unsupported version '2.0'"):
        SFTRecord.model_validate({"schema_version": "2.0", "instruction": "x", "response": "y"})


def test_recorded_token_ids_need_the_whole_sequence():
    partial = GRPORecord.model_validate(RECORDS[-1][1]).trajectories[0]
    assert partial.recorded_token_ids() is None  # the last assistant message has no token_ids
    messages = [{**m, "token_ids": m.get("token_ids", [])} for m in CHAT[2:]]
    complete = GRPORecord.model_validate(
        {"prompt": "p", "trajectories": [{"messages": messages, "reward": 1, "prompt_token_ids": [1, 2, 3]}]}
    )
    assert complete.trajectories[0].recorded_token_ids() == [[1, 2, 3], [7, 8], [9], []]
    no_prompt = complete.trajectories[0].model_copy(update={"prompt_token_ids": None})
    assert no_prompt.recorded_token_ids() is None


def test_each_side_of_a_pair_is_recorded_on_its_own():
    """A pair of the policy's sample (ids recorded) against an expert's text: the sample is
    trained on as sampled, the text rendered; without the prompt's ids neither side is."""
    sampled = [{"role": "assistant", "content": "no", "token_ids": [7, 2], "logprobs": [-1.0, -0.5]}]
    pair = DPORecord.model_validate(
        {"prompt": [CHAT[1]], "chosen": "a.py", "rejected": sampled, "prompt_token_ids": [1, 2, 3]}
    )
    assert pair.recorded_token_ids("rejected") == [[1, 2, 3], [7, 2]]
    assert pair.recorded_token_ids("chosen") is None
    partial = DPORecord.model_validate({**pair.model_dump(), "rejected": [*sampled, CHAT[4]]})  # one without ids
    assert partial.recorded_token_ids("rejected") is None
    assert pair.model_copy(update={"prompt_token_ids": None}).recorded_token_ids("rejected") is None


# ------------------------------------------------------------------------ pairing


def _pairs(items, **options):
    skipped = []
    pairs = pair_preferences(
        items,
        task_id=lambda i: i[1],
        reward=lambda i: i[2],
        failed=lambda i: i[3] is False,
        on_skip=skipped.append,
        **options,
    )
    return [(p.chosen[0], p.rejected[0], round(p.margin, 6)) for p in pairs], skipped


ITEMS = [
    ("a", "x", 0.9, True),
    ("b", "x", 0.1, False),
    ("c", "x", 0.5, None),
    ("d", "y", 0.5, True),
    ("e", "y", 0.45, True),
    ("f", "z", 1.0, True),
    ("g", "", 1.0, True),
    ("h", "w", None, True),
    ("i", "v", 0.8, False),
    ("j", "v", 0.2, True),
]


def test_best_vs_worst_is_the_default():
    pairs, skipped = _pairs(ITEMS)
    assert pairs == [("a", "b", 0.8)]
    assert sorted(skipped) == ["chosen_failed", "margin_too_small", "no_task_id", "single_attempt", "unscored"]


def test_all_above_margin_pairs_every_two_largest_margin_first():
    pairs, _ = _pairs(ITEMS, pairing="all_above_margin")
    assert pairs == [("a", "b", 0.8), ("a", "c", 0.4), ("c", "b", 0.4)]
    assert _pairs(ITEMS, pairing="all_above_margin", max_pairs_per_task=2)[0] == pairs[:2]
    assert _pairs(ITEMS, pairing="all_above_margin", min_margin=0.5)[0] == pairs[:1]
    assert _pairs(ITEMS, min_margin=0.04)[0] == [("a", "b", 0.8), ("d", "e", 0.05)]


def test_ties_keep_the_input_order_and_equal_rewards_never_pair():
    items = [("a", "x", 1.0, None), ("b", "x", 1.0, None), ("c", "x", 0.0, None), ("d", "x", 0.0, None)]
    assert _pairs(items)[0] == [("a", "d", 1.0)]
    assert _pairs([("a", "x", 0.5, None), ("b", "x", 0.5, None)], min_margin=0) == ([], ["margin_too_small"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pairing": "random"}, "pairing must be one of best_vs_worst, all_above_margin"),
        ({"min_margin": -0.1}, "min_margin must be a finite number >= 0"),
        ({"max_pairs_per_task": 0}, "max_pairs_per_task must be >= 1"),
    ],
)
def test_bad_pairing_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        _pairs(ITEMS, **options)
