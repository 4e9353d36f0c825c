"""Monte-Carlo step labels (trajectoryhub.prm_data) on the real retail environment."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys

import pytest

from knowlyrcore.datasets import PRMRecord
from knowlyrcore.jsonl import read_jsonl
from knowlyrcore.prefix_text import step_prefixes
from trajectoryhub import collect_batched
from trajectoryhub.corrupted import CorruptedExpert
from trajectoryhub.prm_data import LabelStats, ResumeExpert, outcome_values, prm_records, step_values

# a sibling package: absent when knowlyr-hub is installed alone (make test-isolated), as in the other hub tests
suites = pytest.importorskip("agentsandbox.suites", reason="the retail suite comes with knowlyr-sandbox")


@pytest.fixture(scope="module")
def retail():
    suite = suites.get_suite("retail")
    return suite, suite.generate("train", 12, 3)


def play(retail, factory, name):
    suite, tasks = retail
    runs = collect_batched(
        suite.env_id,
        factory,
        tasks,
        max_steps=suite.max_steps,
        env_kwargs=suite.env_kwargs,
        progress=False,
        agent_name=name,
    )
    return [run.model_dump(mode="json") for run in runs]


def label(retail, runs, **options):
    suite, _ = retail
    return step_values(runs, env=suite.env_id, env_kwargs=suite.env_kwargs, max_steps=suite.max_steps + 10, **options)


def test_every_step_of_an_expert_run_can_still_succeed(retail):
    suite, _ = retail
    runs = play(retail, suite.expert, "expert")
    labelled = label(retail, runs)
    assert all(run.values == [1.0] * len(run.trajectory["steps"]) for run in labelled)
    stats = LabelStats()
    records = list(prm_records(labelled, stats))
    assert stats.steps == sum(len(r["steps"]) for r in runs) == len(records) and stats.unreplayable == 0
    first = runs[0]
    assert [r.text for r in records[: len(first["steps"])]] == step_prefixes(first)
    assert records[0].group == first["task"]["metadata"]["template"]
    assert records[-1].continuations == 0 and records[0].continuations == 1  # the last step's label is its outcome
    assert all("solution" not in r.text and "answer_contains" not in r.text for r in records)


def test_an_answer_claiming_a_change_never_made_is_the_step_that_loses(retail):
    runs = [
        r
        for r in play(retail, lambda: CorruptedExpert("skip_write", random.Random(0)), "skip")
        if not r["outcome"]["success"]
    ]
    assert runs, "the retail train split has write tasks"
    for run in label(retail, runs):
        # before the answer, the expert could still have made the write; the answer ends it wrong
        assert run.values == [1.0] * (len(run.trajectory["steps"]) - 1) + [0.0]


def test_a_write_on_the_wrong_order_is_where_the_value_drops(retail):
    suite, tasks = retail
    cancel = next(t for t in tasks if t["metadata"]["template"] == "cancel_order")
    solution = cancel["metadata"]["solution"]
    at = next(i for i, a in enumerate(solution) if a["tool"] == "cancel_order")
    target = solution[at]["params"]["order_id"]
    pending = [o["order_id"] for o in cancel["metadata"]["world"]["orders"] if o["status"] == "pending"]
    other = next(o for o in pending if o != target)  # the shop has another pending order to cancel by mistake
    wrong = [*solution[:at], {"tool": "cancel_order", "params": {**solution[at]["params"], "order_id": other}}]
    runs = play((suite, [cancel]), lambda: _Script([*wrong, solution[-1]]), "wrong-write")
    (run,) = label(retail, runs)
    # up to the wrong cancellation the task could still succeed; from it on, nothing undoes it
    assert run.values == [1.0] * at + [0.0, 0.0]


class _Script:
    def __init__(self, actions):
        self.actions = [dict(a) for a in actions]

    def __call__(self, observation):
        return self.actions.pop(0) if len(self.actions) > 1 else self.actions[0]


def test_a_run_whose_replay_differs_keeps_only_its_outcome(retail):
    suite, _ = retail
    runs = play(retail, suite.expert, "expert")[:2]
    tampered = copy.deepcopy(runs[0])
    tampered["steps"][0]["observation"]["output"] = "something the environment never said"
    labelled = label(retail, [tampered, runs[1]])
    assert labelled[0].values is None and labelled[1].values is not None
    stats = LabelStats()
    records = list(prm_records(labelled, stats))
    assert stats.unreplayable == 1
    assert [r.step for r in records if r.trajectory_id == records[0].trajectory_id] == [len(tampered["steps"]) - 1]


def test_k_continuations_are_averaged(retail):
    suite, _ = retail
    runs = play(retail, suite.expert, "expert")[:1]
    played = []

    def alternating(prefix):  # succeeds on every other continuation: the value of a step is 1/2
        played.append(len(prefix))
        return ResumeExpert(prefix) if len(played) % 2 else CorruptedExpert("give_up")

    (run,) = label(retail, runs, continuation=alternating, k=2)
    n = len(runs[0]["steps"])
    assert run.values == [0.5] * (n - 1) + [1.0] and len(played) == 2 * (n - 1)


def test_cli_writes_prm_records_and_refuses_a_run_without_a_solution(retail, tmp_path):
    suite, _ = retail
    runs = play(retail, suite.expert, "expert")[:3]
    given = tmp_path / "runs.jsonl"
    given.write_text("".join(json.dumps(r) + "\n" for r in runs))
    out = tmp_path / "prm.jsonl"
    cli = [sys.executable, "-m", "trajectoryhub.cli", "prm-data"]
    done = subprocess.run([*cli, "-t", str(given), "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = list(read_jsonl(out, PRMRecord))
    assert len(records) == sum(len(r["steps"]) for r in runs) and {r.label for r in records} == {1.0}
    broken = copy.deepcopy(runs[1])
    del broken["task"]["metadata"]["solution"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(runs[0]) + "\n" + json.dumps(broken) + "\n")
    refused = subprocess.run(
        [*cli, "-t", str(bad), "-o", str(tmp_path / "none.jsonl")], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and not (tmp_path / "none.jsonl").exists()
    assert refused.stderr.strip().splitlines()[-1].startswith(f"error: {bad}:2: task.metadata.solution: missing")


def test_own_outcome_labels_give_every_step_its_runs_outcome(retail):
    """A run that skipped its write fails: all its steps 0, though the expert could still repair
    the early ones; a solved run's steps all 1. No environment is touched."""
    suite, _ = retail
    failed = [
        r
        for r in play(retail, lambda: CorruptedExpert("skip_write", random.Random(0)), "skip")
        if not r["outcome"]["success"] and len(r["steps"]) > 1
    ][:2]
    solved = play(retail, suite.expert, "expert")[:2]
    labelled = outcome_values(failed + solved + [{"task": {"id": "empty"}, "steps": [], "outcome": {}}])
    assert [run.values for run in labelled[:2]] == [[0.0] * len(r["steps"]) for r in failed]
    assert [run.values for run in labelled[2:4]] == [[1.0] * len(r["steps"]) for r in solved]
    records = list(prm_records(labelled))
    assert len(records) == sum(len(r["steps"]) for r in failed + solved)  # the empty run gives none
    last = {r.trajectory_id: r.step for r in records}  # records come in step order
    assert {r.continuations for r in records if r.step < last[r.trajectory_id]} == {1}  # the run's own rest
    assert len(failed) == 2 and label(retail, failed)[0].values[0] == 1.0  # the expert's value of that step


def test_cli_outcome_labels_need_no_solution(retail, tmp_path):
    suite, _ = retail
    runs = play(retail, suite.expert, "expert")[:2]
    del runs[1]["task"]["metadata"]["solution"]
    runs[1]["outcome"]["success"] = False
    given = tmp_path / "runs.jsonl"
    given.write_text("".join(json.dumps(r) + "\n" for r in runs))
    out = tmp_path / "prm.jsonl"
    cli = [
        sys.executable,
        "-m",
        "trajectoryhub.cli",
        "prm-data",
        "--labels",
        "outcome",
        "-t",
        str(given),
        "-o",
        str(out),
    ]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    labels = [(r.trajectory_id, r.label) for r in read_jsonl(out, PRMRecord)]
    assert labels == [(runs[0]["id"], 1.0)] * len(runs[0]["steps"]) + [(runs[1]["id"], 0.0)] * len(runs[1]["steps"])
