"""Readers: every hub format, and errors that name file, line and field."""

import pytest

from agenttrainer.data import DataError, dpo_pair, grpo_group, parse_step_text, read_located_records, sft_conversation


def _conv(record, **kw):
    return sft_conversation(record, "f.jsonl:1", **kw)


def test_steps_become_turns_with_observations_masked_and_step_weights():
    conv = _conv(
        {
            "instruction": "Fix the bug",
            "input": '{"repo": "o/r"}',
            "steps": [
                {"thought": "Read", "action": "read_file /a.py", "observation": "def f", "reward": 0.7},
                {
                    "thought": "Fix",
                    "action": {"name": "edit", "parameters": {"p": 1}},
                    "observation": "ok",
                    "reward": 0.9,
                },
            ],
        }
    )
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert conv.messages[0]["content"] == 'Fix the bug\n\n{"repo": "o/r"}'
    assert conv.messages[1]["content"] == "Thought: Read\nAction: read_file /a.py"
    assert conv.messages[3]["content"] == 'Thought: Fix\nAction: {"name": "edit", "parameters": {"p": 1}}'
    assert conv.messages[2]["content"] == "Observation: def f"
    assert conv.trainable == [False, True, False, True, False]
    # 0.7 / 0.8 and 0.9 / 0.8; an observation carries its step's weight (unused while masked)
    assert conv.weights == pytest.approx([1.0, 0.875, 0.875, 1.125, 1.125])


def test_mask_observations_false_trains_observations():
    conv = _conv(
        {"instruction": "t", "steps": [{"thought": "a", "action": "b", "observation": "c"}]}, mask_observations=False
    )
    assert conv.trainable == [False, True, True]


def test_response_with_step_text_is_parsed_into_turns():
    text = "Step 1:\nThought: look\nAction: ls\nObservation: a.py\nb.py\nStep 2:\nThought: done\nAction: submit"
    conv = _conv({"instruction": "t", "response": text})
    assert [m["content"] for m in conv.messages[1:]] == [
        "Thought: look\nAction: ls",
        "Observation: a.py\nb.py",
        "Thought: done\nAction: submit",
    ]
    plain = _conv({"instruction": "t", "response": text}, agent_format=False)
    assert plain.messages[1]["content"] == text and plain.trainable == [False, True]


def test_parse_step_text_rejects_other_text():
    assert parse_step_text("just an answer") == []
    assert parse_step_text("Step 1:\nsomething else") == []


def test_messages_format_with_tools_and_tool_role():
    conv = _conv(
        {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": "call"},
                {"role": "tool", "content": "result"},
                {"role": "assistant", "content": "answer"},
            ],
            "tools": [{"type": "function", "function": {"name": "ls", "parameters": {}}}],
            "metadata": {"task_type": "tool_selection", "loss": 2.5},
        }
    )
    assert conv.trainable == [False, False, True, False, True]
    assert conv.tools[0]["function"]["name"] == "ls"
    assert conv.task_type == "tool_selection" and conv.loss_hint == 2.5


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"instruction": "x"}, "f.jsonl:1: <record>: an SFT record needs 'messages', 'steps' or 'response'"),
        ({"response": "x"}, "f.jsonl:1: instruction: Field required"),
        ({"instruction": 3, "response": "x"}, "f.jsonl:1: instruction: Input should be a valid string"),
        ({"instruction": "x", "steps": []}, "f.jsonl:1: steps: must not be empty"),
        ({"instruction": "x", "steps": [{"observation": "o"}]}, "f.jsonl:1: steps[0]: needs 'thought' or 'action'"),
        (
            {"instruction": "x", "steps": [{"action": "a", "reward": "hi"}]},
            "f.jsonl:1: steps[0].reward: must be a number, got str",
        ),
        (
            {"instruction": "x", "steps": [{"action": "a", "reward": 1}, {"action": "b"}]},
            "f.jsonl:1: steps: either every step has a 'reward' or none does",
        ),
        ({"messages": [{"role": "user", "content": "u"}]}, "f.jsonl:1: messages: has no assistant message"),
        ({"messages": [{"role": "bot", "content": "u"}]}, "f.jsonl:1: messages[0].role: Input should be 'system'"),
        ({"messages": [{"role": "assistant"}], "tools": {}}, "f.jsonl:1: tools: Input should be a valid list"),
    ],
)
def test_bad_sft_records_name_file_line_and_field(record, message):
    with pytest.raises(
        DataError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")
    ):
        _conv(record)


def test_read_jsonl_reports_line_of_bad_json(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n\n{"b": \n')
    it = read_located_records(path)
    assert next(it)[0] == f"{path}:1"
    with pytest.raises(DataError, match=f"{path}:3: invalid JSON"):
        next(it)
    with pytest.raises(DataError, match="no such file"):
        next(read_located_records(tmp_path / "missing.jsonl"))


def test_dpo_pair_text_and_messages():
    chosen, rejected = dpo_pair({"prompt": "p", "chosen": "good", "rejected": "bad"}, "d:1")
    assert chosen.messages == [{"role": "user", "content": "p"}, {"role": "assistant", "content": "good"}]
    assert chosen.trainable == [False, True] and rejected.messages[1]["content"] == "bad"
    chosen, _ = dpo_pair(
        {
            "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "p"}],
            "chosen": [
                {"role": "assistant", "content": "a"},
                {"role": "tool", "content": "r"},
                {"role": "assistant", "content": "b"},
            ],
            "rejected": "bad",
        },
        "d:1",
    )
    assert chosen.trainable == [False, False, True, False, True]
    with pytest.raises(DataError, match="^d:1: rejected: Field required"):
        dpo_pair({"prompt": "p", "chosen": "c"}, "d:1")
    with pytest.raises(DataError, match="^d:1: prompt: must be text or a list of messages, got int"):
        dpo_pair({"prompt": 1, "chosen": "c", "rejected": "r"}, "d:1")
    with pytest.raises(DataError, match="^d:1: chosen: has no assistant message"):
        dpo_pair({"prompt": "p", "chosen": [{"role": "user", "content": "c"}], "rejected": "r"}, "d:1")


def test_grpo_group_rewards_and_step_weights():
    group = grpo_group(
        {
            "task_id": "t",
            "prompt": "p",
            "trajectories": [
                {
                    "response": "Step 1:\nThought: a\nAction: b\nObservation: c\nStep 2:\nThought: d\nAction: e",
                    "reward": 1.0,
                    "step_rewards": [0.5, 1.5],
                },
                {"messages": [{"role": "assistant", "content": "x"}], "reward": 0.0},
            ],
        },
        "g:1",
    )
    assert [c.reward for c in group] == [1.0, 0.0]
    first = group[0]
    assert [m["role"] for m in first.messages] == ["user", "assistant", "user", "assistant"]
    assert first.trainable == [False, True, False, True]
    assert first.weights == pytest.approx([1.0, 0.5, 1.0, 1.5])
    with pytest.raises(DataError, match=r"g:1: trajectories\[0\].step_rewards has 1 values for 2 assistant steps"):
        grpo_group(
            {
                "prompt": "p",
                "trajectories": [
                    {"response": "Step 1:\nThought: a\nAction: b\nStep 2:\nAction: c", "reward": 1, "step_rewards": [1]}
                ],
            },
            "g:1",
        )
    with pytest.raises(DataError, match=r"^g:1: trajectories\[0\].reward: Field required"):
        grpo_group({"prompt": "p", "trajectories": [{"response": "x"}]}, "g:1")


RECORDED = {
    "task_id": "t",
    "prompt": "list the files",
    "trajectories": [
        {
            "messages": [
                {"role": "assistant", "content": "", "token_ids": [10, 11, 12], "logprobs": [-0.5, -0.25, -0.125]},
                {"role": "tool", "content": "a.py", "token_ids": [20, 21]},
                {"role": "assistant", "content": "done", "token_ids": [30, 31], "logprobs": [-1.0, -2.0]},
                {"role": "tool", "content": "ok", "token_ids": []},
            ],
            "reward": 1.0,
            "step_rewards": [0.5, 1.5],
            "prompt_token_ids": [1, 2, 3],
        },
        {"messages": [{"role": "assistant", "content": "no", "token_ids": [40]}], "reward": 0.0},
    ],
}


def test_grpo_group_keeps_the_recorded_token_ids():
    recorded, partial = grpo_group(RECORDED, "g:1")
    assert recorded.token_ids == [[1, 2, 3], [10, 11, 12], [20, 21], [30, 31], []]  # the prompt's on its message
    assert recorded.logprobs == [None, [-0.5, -0.25, -0.125], None, [-1.0, -2.0], None]
    assert recorded.trainable == [False, True, False, True, False]
    assert [m.get("token_ids") for m in recorded.messages] == [None] * 5  # not passed to a chat template
    assert partial.token_ids is None  # no prompt_token_ids: the chat template renders it


def test_readers_take_the_core_models_too():
    from knowlyrcore.datasets import DPORecord, GRPORecord, SFTRecord

    assert _conv(SFTRecord(instruction="t", response="r")).messages[1] == {"role": "assistant", "content": "r"}
    chosen, _ = dpo_pair(DPORecord(prompt="p", chosen="c", rejected="r"), "d:1")
    assert chosen.messages[1]["content"] == "c"
    assert grpo_group(GRPORecord.model_validate(RECORDED), "g:1")[0].token_ids[0] == [1, 2, 3]
