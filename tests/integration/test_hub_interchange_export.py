"""knowlyr-hub exports ATIF / ADP through knowlyr-recorder's writers, and knowlyr-recorder reads
the export back to the same trajectories (token ids and log-probs of an online rollout included)."""

from __future__ import annotations

import json

import pytest

from agentrecorder import convert_record, get_adapter
from agentrecorder.atif_validation import validate_atif
from knowlyrcore import write_trajectories
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Observation, Outcome, Step, ToolCall, Trajectory
from trajectoryhub.cli import main
from trajectoryhub.export import DatasetExporter

pytestmark = pytest.mark.integration


def rollout(task: str, success: bool, reward: float) -> Trajectory:
    step = Step(
        index=0,
        thought="list the files",
        tool_call=ToolCall(name="bash", parameters={"command": "ls"}, id="call_1"),
        observation=Observation(output="a.py", exit_code=0),
        token_ids=[101, 102, 103],
        logprobs=[-0.5, -0.25, -1.0],
    )
    return Trajectory(
        task=TaskInfo(id=task, description=f"fix {task}", domain="coding"),
        agent="policy",
        steps=[step],
        outcome=Outcome(success=success, score=reward),
        reward=reward,
    )


def comparable(t: Trajectory) -> dict:
    data = t.model_dump(mode="json", exclude={"source"})  # the reader names the file it read
    for key in ("format", "atif"):  # the readers' own bookkeeping
        data["metadata"].pop(key, None)
    for step in data["steps"]:
        step["metadata"].pop("atif", None)
    return data


@pytest.mark.parametrize("to", ["atif", "adp"])
def test_the_cli_export_reads_back_as_the_kept_trajectories(to, tmp_path, capsys):
    runs = [rollout("t1", True, 1.0), rollout("t2", False, 0.0), rollout("t3", True, 0.8)]
    source, out = tmp_path / "runs.jsonl", tmp_path / f"{to}.jsonl"
    write_trajectories(source, runs)
    assert main(["export", "--format", to, "-t", str(source), "-o", str(out), "--min-reward", "0.5"]) == 0
    assert f"{to}: wrote 2 records" in capsys.readouterr().err
    documents = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(documents) == 2
    back = [t for doc in documents for t in convert_record(get_adapter(to), doc, path=str(out))]
    assert [comparable(t) for t in back] == [comparable(runs[0]), comparable(runs[2])]
    assert back[0].steps[0].token_ids == [101, 102, 103] and back[0].steps[0].logprobs == [-0.5, -0.25, -1.0]
    if to == "atif":
        assert all(validate_atif(doc) == [] for doc in documents)


def test_unknown_targets_are_refused():
    exporter = DatasetExporter(trajectories=[rollout("t1", True, 1.0), rollout("t2", False, 0.0)])
    with pytest.raises(ValueError, match="to must be one of"):
        exporter.export_interchange("unused.jsonl", to="sharegpt")


def test_success_only_keeps_the_successes(tmp_path):
    exporter = DatasetExporter(trajectories=[rollout("t1", True, 1.0), rollout("t2", False, 0.0)])
    report = exporter.export_interchange(tmp_path / "a.jsonl", to="atif", success_only=True)
    assert (report.written, report.skipped) == (1, {"not_successful": 1})
