import json

import pytest

from knowlyrcore import read_jsonl, write_trajectories
from knowlyrcore.datasets import DPORecord, GRPORecord, SFTRecord
from trajectoryhub import DatasetExporter, ExportReport, trajectory_reward


def test_reward_precedence(traj):
    assert trajectory_reward(traj("a", "t", reward=0.7, score=0.2, success=False)) == 0.7
    assert trajectory_reward(traj("a", "t", score=0.2, success=True)) == 0.2
    assert trajectory_reward(traj("a", "t", success=True)) == 1.0
    assert trajectory_reward(traj("a", "t")) is None


def test_sft_steps_format(traj, tmp_path):
    report = DatasetExporter(trajectories=[traj("a", "t1", reward=0.9, success=True, steps=2)]).export_sft(
        tmp_path / "sft.jsonl"
    )
    (record,) = read_jsonl(tmp_path / "sft.jsonl")
    assert report.written == 1
    assert record["instruction"] == "solve t1" and record["task_id"] == "t1" and record["reward"] == 0.9
    assert json.loads(record["input"]) == {"domain": "coding"}
    assert record["steps"][1] == {
        "thought": "t1",
        "action": {"name": "bash", "parameters": {"command": "echo 1"}},
        "observation": "1",
        "reward": 0.5,
    }
    assert record["schema_version"] == "1.0" and record["metadata"]["trajectory_id"] == "a"


def test_sft_messages_format_with_domain_tool_specs(traj, tmp_path):
    DatasetExporter(trajectories=[traj("a", "t1", success=True, steps=1)]).export_sft(
        tmp_path / "m.jsonl", format="messages"
    )
    (record,) = read_jsonl(tmp_path / "m.jsonl")
    assert [m["role"] for m in record["messages"]] == ["user", "assistant", "tool"]
    call = record["messages"][1]["tool_calls"][0]
    assert call["function"] == {"name": "bash", "arguments": '{"command": "echo 0"}'}
    assert record["messages"][2]["tool_call_id"] == call["id"]
    assert record["tools"][0]["function"]["parameters"]["required"] == ["command"]  # from the coding profile


def test_sft_filters_are_counted(traj, tmp_path):
    items = [
        traj("a", "t", reward=0.9, success=True),
        traj("b", "t", reward=0.2, success=False),
        traj("c", "t", steps=0),
        traj("d", "t", reward=0.7),  # nobody judged it
        traj("e", "t", reward=0.3, success=True),
    ]
    exporter = DatasetExporter(trajectories=items)
    report = exporter.export_sft(tmp_path / "s.jsonl", include_failures=True, min_reward=0.5)
    assert report.written == 2 and report.skipped == {"below_min_reward": 2, "no_steps": 1}
    assert [r["metadata"]["trajectory_id"] for r in read_jsonl(tmp_path / "s.jsonl")] == ["a", "d"]
    report = exporter.export_sft(tmp_path / "s.jsonl", min_reward=0.5)  # both filters
    assert report.written == 1 and report.skipped == {"no_steps": 1, "not_successful": 2, "below_min_reward": 1}


def test_sft_keeps_only_successes_by_default(traj, tmp_path):
    """SFT imitates every step it is given: a failed run must not reach it unless asked for."""
    items = [traj("a", "t", success=True), traj("b", "t", success=False), traj("c", "u", reward=1.0)]
    exporter = DatasetExporter(trajectories=items)
    report = exporter.export_sft(tmp_path / "s.jsonl")
    assert [r["metadata"]["trajectory_id"] for r in read_jsonl(tmp_path / "s.jsonl")] == ["a"]
    assert report.skipped == {"not_successful": 2}
    assert report.left_out() == "left out 2: 2 not successful (failed or not judged; --include-failures keeps them)"
    assert exporter.export_sft(tmp_path / "s.jsonl", include_failures=True).written == 3
    assert list(read_jsonl(tmp_path / "s.jsonl"))[1]["metadata"]["success"] is False
    assert ExportReport().left_out() == "left out none"


def test_dpo_pairs_best_against_worst(traj, tmp_path):
    items = [
        traj("a", "x", reward=0.9),
        traj("b", "x", reward=0.1),
        traj("c", "x", reward=0.5),
        traj("d", "y", reward=0.5),
        traj("e", "y", reward=0.45),
        traj("f", "z", reward=1.0),
        traj("g", "", reward=1),
    ]
    report = DatasetExporter(trajectories=items).export_dpo(tmp_path / "dpo.jsonl")
    (pair,) = read_jsonl(tmp_path / "dpo.jsonl")
    assert (pair["metadata"]["chosen_id"], pair["metadata"]["rejected_id"]) == ("a", "b")
    assert pair["margin"] == pytest.approx(0.8) and pair["prompt"] == "solve x"
    assert pair["chosen"][0]["role"] == "assistant"
    assert report.skipped == {"margin_too_small": 1, "single_attempt": 1, "no_task_id": 1}


def test_dpo_keeps_failures_as_rejected_never_as_chosen(traj, tmp_path):
    items = [
        traj("a", "x", reward=0.9, success=True),
        traj("b", "x", reward=0.1, success=False),
        traj("c", "y", reward=0.6, success=False),
        traj("d", "y", reward=0.1, success=False),
    ]
    report = DatasetExporter(trajectories=items).export_dpo(tmp_path / "dpo.jsonl")
    (pair,) = read_jsonl(tmp_path / "dpo.jsonl")
    assert (pair["metadata"]["chosen_id"], pair["metadata"]["rejected_id"]) == ("a", "b")
    assert report.skipped == {"chosen_failed": 1}
    assert report.left_out() == "left out 1: 1 tasks where only a failed attempt could be chosen"


def test_dpo_from_preferences_file(traj, tmp_path):
    prefs = tmp_path / "prefs.jsonl"
    chosen, rejected = traj("a", "x", reward=0.9), traj("b", "x", reward=0.1)
    prefs.write_text(
        json.dumps(
            {
                "task_id": "x",
                "chosen": chosen.model_dump(mode="json"),
                "rejected": rejected.model_dump(mode="json"),
                "margin": 0.8,
            }
        )
        + "\n"
    )
    report = DatasetExporter(trajectories=[]).export_dpo(tmp_path / "d.jsonl", preferences=prefs)
    assert report.written == 1


def test_grpo_groups(traj, tmp_path):
    items = [
        traj("a", "x", reward=0.9, steps=2),
        traj("b", "x", reward=0.1),
        traj("c", "y", reward=0.5),
        traj("d", "z", reward=0.5),
        traj("e", "z", reward=0.5),
    ]
    report = DatasetExporter(trajectories=items).export_grpo(tmp_path / "g.jsonl")
    (group,) = read_jsonl(tmp_path / "g.jsonl")
    assert group["task_id"] == "x" and [t["reward"] for t in group["trajectories"]] == [0.9, 0.1]
    assert group["trajectories"][0]["step_rewards"] == [0.5, 0.5]
    assert report.skipped == {"group_too_small": 1, "equal_rewards": 1}
    failed = [traj("a", "x", reward=1.0, success=True), traj("b", "x", reward=0.0, success=False)]
    DatasetExporter(trajectories=failed).export_grpo(tmp_path / "g.jsonl")  # failures are the group's low end
    assert [t["reward"] for t in next(iter(read_jsonl(tmp_path / "g.jsonl")))["trajectories"]] == [1.0, 0.0]


def test_reads_files_and_folders(traj, tmp_path):
    write_trajectories(tmp_path / "a.jsonl", [traj("a", "x", reward=1.0)])
    write_trajectories(tmp_path / "b.jsonl", [traj("b", "x", reward=0.0)])
    assert len(DatasetExporter(tmp_path).trajectories) == 2
    assert len(DatasetExporter([tmp_path / "a.jsonl"]).trajectories) == 1
    with pytest.raises(ValueError, match="needs trajectories_dir"):
        DatasetExporter()


def test_bad_sft_format(traj, tmp_path):
    with pytest.raises(ValueError, match="'steps' or 'messages'"):
        DatasetExporter(trajectories=[]).export_sft(tmp_path / "x.jsonl", format="alpaca")


def _recorded(traj, tid, task, reward, base):
    """A trajectory as an online rollout records it: each step's sampled ids and log-probs, the
    tokens between answers (``observation_token_ids``) and the prompt's (``prompt_token_ids``)."""
    t = traj(tid, task, reward=reward, success=reward > 0.5, steps=2)
    steps = [
        s.model_copy(
            update={
                "token_ids": [base + 10 * s.index + k for k in range(3)],
                "logprobs": [-0.5, -0.25, -0.125],
                "metadata": {"observation_token_ids": [base + 10 * s.index + 5] if s.index == 0 else []},
            }
        )
        for s in t.steps
    ]
    return t.model_copy(update={"steps": steps, "metadata": {"prompt_token_ids": [1, 2, base]}})


def test_exports_are_the_core_dataset_models(traj, tmp_path):
    """What the hub writes validates as the knowlyr-core models the trainer reads with."""
    items = [traj("a", "x", reward=0.9, success=True, steps=2), traj("b", "x", reward=0.1, success=False)]
    exporter = DatasetExporter(trajectories=items)
    exporter.export_sft(tmp_path / "steps.jsonl")
    exporter.export_sft(tmp_path / "chat.jsonl", format="messages", system_prompt="be brief")
    exporter.export_dpo(tmp_path / "dpo.jsonl")
    exporter.export_grpo(tmp_path / "grpo.jsonl")
    (steps,) = read_jsonl(tmp_path / "steps.jsonl", SFTRecord)
    (chat,) = read_jsonl(tmp_path / "chat.jsonl", SFTRecord)
    (pair,) = read_jsonl(tmp_path / "dpo.jsonl", DPORecord)
    (group,) = read_jsonl(tmp_path / "grpo.jsonl", GRPORecord)
    assert (steps.shape, chat.shape, chat.messages[0].role) == ("steps", "messages", "system")
    assert pair.metadata == {"chosen_id": "a", "rejected_id": "b"} and pair.margin == pytest.approx(0.8)
    assert [t.reward for t in group.trajectories] == [0.9, 0.1]
    assert "token_ids" not in json.dumps(next(iter(read_jsonl(tmp_path / "grpo.jsonl"))))  # none recorded


def test_token_ids_survive_export(traj, tmp_path):
    """Before: export dropped Step.token_ids / logprobs, so offline GRPO re-tokenised the text."""
    high, low = _recorded(traj, "a", "x", 0.9, 100), _recorded(traj, "b", "x", 0.1, 200)
    exporter = DatasetExporter(trajectories=[high, low])
    exporter.export_grpo(tmp_path / "g.jsonl")
    (group,) = read_jsonl(tmp_path / "g.jsonl", GRPORecord)
    for attempt, t in zip(group.trajectories, [high, low]):
        expected = t.metadata["prompt_token_ids"] + [
            i for s in t.steps for i in s.token_ids + s.metadata["observation_token_ids"]
        ]
        assert [i for span in attempt.recorded_token_ids() for i in span] == expected
        assistant = [m for m in attempt.messages if m.role == "assistant"]
        assert [m.logprobs for m in assistant] == [s.logprobs for s in t.steps]
    exporter.export_sft(tmp_path / "s.jsonl")
    (sft,) = read_jsonl(tmp_path / "s.jsonl", SFTRecord)
    assert [s.token_ids for s in sft.steps] == [s.token_ids for s in high.steps]
    exporter.export_sft(tmp_path / "m.jsonl", format="messages")
    (chat,) = read_jsonl(tmp_path / "m.jsonl", SFTRecord)
    assert [m.token_ids for m in chat.messages] == [None, [100, 101, 102], [105], [110, 111, 112], []]
    exporter.export_dpo(tmp_path / "d.jsonl")
    (pair,) = read_jsonl(tmp_path / "d.jsonl", DPORecord)
    assert pair.chosen[0].token_ids == [100, 101, 102] and pair.rejected[0].token_ids == [200, 201, 202]


def test_dpo_pairing_options(traj, tmp_path):
    items = [traj("a", "x", reward=0.9), traj("b", "x", reward=0.1), traj("c", "x", reward=0.5)]
    exporter = DatasetExporter(trajectories=items)

    def pairs(**options):
        exporter.export_dpo(tmp_path / "d.jsonl", **options)
        return [(p["metadata"]["chosen_id"], p["metadata"]["rejected_id"]) for p in read_jsonl(tmp_path / "d.jsonl")]

    assert pairs() == [("a", "b")]
    assert pairs(pairing="all_above_margin") == [("a", "b"), ("a", "c"), ("c", "b")]
    assert pairs(pairing="all_above_margin", max_pairs_per_task=1) == [("a", "b")]
    assert pairs(pairing="all_above_margin", min_margin=0.5) == [("a", "b")]
    with pytest.raises(ValueError, match="pairing must be one of"):
        exporter.export_dpo(tmp_path / "d.jsonl", pairing="best")


def test_records_the_trainer_would_refuse_are_left_out_and_counted(traj, tmp_path):
    """A trajectory without steps has no assistant turn to train on (DPO, GRPO), and a steps record
    with only some steps scored cannot be weighed (SFT): before, both were written and the
    trainer refused the whole file."""
    items = [traj("a", "x", reward=0.9, success=True), traj("b", "x", reward=0.1, steps=0)]
    exporter = DatasetExporter(trajectories=[*items, traj("c", "x", reward=0.5)])
    assert exporter.export_dpo(tmp_path / "d.jsonl").skipped == {"no_steps": 1}
    assert exporter.export_grpo(tmp_path / "g.jsonl").skipped == {"no_steps": 1}
    partly = traj("d", "y", reward=0.9, success=True, steps=2)
    partly = partly.model_copy(update={"steps": [partly.steps[0], partly.steps[1].model_copy(update={"reward": None})]})
    report = DatasetExporter(trajectories=[items[0], partly]).export_sft(tmp_path / "s.jsonl")
    assert report.written == 1 and report.skipped == {"partly_scored": 1}
    assert "1 with only some steps scored" in report.left_out()
