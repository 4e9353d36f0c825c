import json

import pytest

from knowlyrcore import read_jsonl, write_trajectories
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
    assert record["steps"][1] == {"thought": "t1", "action": {"name": "bash", "parameters": {"command": "echo 1"}},
                                  "observation": "1", "reward": 0.5}  # fmt: skip
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
    assert exporter.export_sft(tmp_path / "s.jsonl", success_only=True).skipped == report.skipped  # old calls
    assert exporter.export_sft(tmp_path / "s.jsonl", include_failures=True).written == 3
    assert list(read_jsonl(tmp_path / "s.jsonl"))[1]["metadata"]["success"] is False
    with pytest.raises(ValueError, match="contradict"):
        exporter.export_sft(tmp_path / "s.jsonl", include_failures=True, success_only=True)
    assert ExportReport().left_out() == "left out none"


def test_dpo_pairs_best_against_worst(traj, tmp_path):
    items = [traj("a", "x", reward=0.9), traj("b", "x", reward=0.1), traj("c", "x", reward=0.5),
             traj("d", "y", reward=0.5), traj("e", "y", reward=0.45), traj("f", "z", reward=1.0), traj("g", "", reward=1)]  # fmt: skip
    report = DatasetExporter(trajectories=items).export_dpo(tmp_path / "dpo.jsonl")
    (pair,) = read_jsonl(tmp_path / "dpo.jsonl")
    assert (pair["metadata"]["chosen_id"], pair["metadata"]["rejected_id"]) == ("a", "b")
    assert pair["margin"] == pytest.approx(0.8) and pair["prompt"] == "solve x"
    assert pair["chosen"][0]["role"] == "assistant"
    assert report.skipped == {"margin_too_small": 1, "single_attempt": 1, "no_task_id": 1}


def test_dpo_keeps_failures_as_rejected_never_as_chosen(traj, tmp_path):
    items = [traj("a", "x", reward=0.9, success=True), traj("b", "x", reward=0.1, success=False),
             traj("c", "y", reward=0.6, success=False), traj("d", "y", reward=0.1, success=False)]  # fmt: skip
    report = DatasetExporter(trajectories=items).export_dpo(tmp_path / "dpo.jsonl")
    (pair,) = read_jsonl(tmp_path / "dpo.jsonl")
    assert (pair["metadata"]["chosen_id"], pair["metadata"]["rejected_id"]) == ("a", "b")
    assert report.skipped == {"chosen_failed": 1}
    assert report.left_out() == "left out 1: 1 tasks whose best attempt failed"


def test_dpo_from_preferences_file(traj, tmp_path):
    prefs = tmp_path / "prefs.jsonl"
    chosen, rejected = traj("a", "x", reward=0.9), traj("b", "x", reward=0.1)
    prefs.write_text(json.dumps({"task_id": "x", "chosen": chosen.model_dump(mode="json"),
                                 "rejected": rejected.model_dump(mode="json"), "margin": 0.8}) + "\n")  # fmt: skip
    report = DatasetExporter(trajectories=[]).export_dpo(tmp_path / "d.jsonl", preferences=prefs)
    assert report.written == 1


def test_grpo_groups(traj, tmp_path):
    items = [traj("a", "x", reward=0.9, steps=2), traj("b", "x", reward=0.1), traj("c", "y", reward=0.5),
             traj("d", "z", reward=0.5), traj("e", "z", reward=0.5)]  # fmt: skip
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
