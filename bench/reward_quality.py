"""How good is knowlyr-reward's process reward? Prints one JSON line.

Every figure scores trajectories with their outcome and labels removed first
(``agentreward.quality.hide_labels``), then compares the rewards with the labels:

* ``tau_bench``: ROC AUC of the trajectory reward for task success and Spearman with the
  recorded reward, on real tau-bench airline runs (gpt-4o). The shared data hold tasks 0-4
  (development); ``--tau-bench FILE --tasks 25-49`` measures any other file or task range.
* ``who_and_when``: how often the lowest-rewarded step is the human-labelled mistake step,
  beside picking a step at random and the best published figure (14.2% step accuracy).
* ``suite``: the demo's task suite (``retail`` by default) run by its scripted expert and by
  four corrupted experts (a write skipped, an id argument changed to one nobody showed, a call
  repeated, giving up at once); the environment's verdict is the success label and the first
  step where a run leaves the expert's solution is its mistake step. Free labels at any scale.
* ``calibration``: the human-calibration layer fitted on the suite's step labels of half the
  tasks and measured (Spearman with the labels) on the other half, before and after.

    python bench/reward_quality.py [--tau-bench FILE --tasks A-B] [--suite retail --n 60]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from agentrecorder import iter_convert
from agentreward import Calibrator, RewardEngine, agreement
from agentreward.quality import evaluate, hide_labels
from agentsandbox.suites import get_suite
from trajectoryhub import collect_batched
from trajectoryhub.corrupted import KINDS, CorruptedExpert

# the published real agent logs: $KNOWLYR_REAL_DATA, else shared/data/real beside the clone (as the
# root conftest.py sets it for knowlyrcore.testing.real_data; a script does not import pytest)
SHARED = Path(os.environ.get("KNOWLYR_REAL_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data" / "real")
WHO_AND_WHEN_BEST_STEP_ACCURACY = 0.142  # the best step-level accuracy published with Who&When


def task_range(text: str) -> set[str]:
    first, _, last = text.partition("-")
    return {str(i) for i in range(int(first), int(last or first) + 1)}


def tau_bench(engine: RewardEngine, path: Path, tasks: set[str] | None) -> dict[str, Any]:
    runs = [t.model_dump(mode="json") for t in iter_convert(path, "openai-chat")]
    if tasks is not None:
        runs = [t for t in runs if t["task"]["id"] in tasks]
    return {"file": path.name, "tasks": f"{len(tasks)} task ids" if tasks else "all", **evaluate(engine, runs)}


def who_and_when(engine: RewardEngine, folder: Path) -> dict[str, Any]:
    runs = [t.model_dump(mode="json") for path in sorted(folder.glob("*.json")) for t in iter_convert(path)]
    report = evaluate(engine, runs)
    return {"files": len(runs), "step_accuracy": report["step_accuracy"], "step_chance": report["step_chance"],
            "published_best_step_accuracy": WHO_AND_WHEN_BEST_STEP_ACCURACY}  # fmt: skip


def first_deviation(trajectory: dict[str, Any]) -> int | None:
    """The first step whose call differs from the task's solution (None: it follows it)."""
    solution = trajectory["task"]["metadata"].get("solution") or []
    for i, step in enumerate(trajectory["steps"]):
        call = step["tool_call"]
        expected = solution[i] if i < len(solution) else None
        if expected is None or (call["name"], call.get("parameters") or {}) != (
            expected["tool"],
            expected.get("params") or {},
        ):
            return i
    return None


def suite_runs(name: str, n: int, seed: int) -> list[dict[str, Any]]:
    suite = get_suite(name)
    tasks = suite.generate("test", n, seed)
    rng = random.Random(seed)
    runs: list[dict[str, Any]] = []
    agents: list[tuple[str, Any]] = [("expert", suite.expert)]
    for kind in KINDS:
        agents.append((kind, lambda kind=kind: CorruptedExpert(kind, random.Random(rng.random()))))
    for agent, factory in agents:
        collected = collect_batched(suite.env_id, factory, tasks, max_steps=suite.max_steps, agent_name=agent,
                                    env_kwargs=suite.env_kwargs, progress=False)  # fmt: skip
        for trajectory in collected:
            record = trajectory.model_dump(mode="json")
            mistake = first_deviation(record)
            if mistake is not None and not record["outcome"]["success"]:
                record["steps"][mistake].setdefault("metadata", {})["mistake"] = True
            runs.append(record)
    return runs


def calibration_held_out(engine: RewardEngine, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Fit on the step labels of even-numbered tasks, measure on the odd ones."""
    halves: dict[bool, tuple[list, list, list]] = {True: ([], [], []), False: ([], [], [])}
    task_ids = sorted({record["task"]["id"] for record in runs})
    for record in runs:
        mistake = next((i for i, s in enumerate(record["steps"]) if (s.get("metadata") or {}).get("mistake")), None)
        success = record["outcome"]["success"]
        if mistake is None and not success:
            continue
        scored = engine.score_record(hide_labels(record))
        fit_half = task_ids.index(record["task"]["id"]) % 2 == 0
        rubrics, human, baseline = halves[fit_half]
        for i, step in enumerate(scored["steps"]):
            if mistake is not None and i > mistake:
                break  # after a mistake the steps have no label
            rubrics.append(step["rubric_scores"])
            baseline.append(step["reward"])
            human.append(0.0 if i == mistake else 1.0)
    fit_rubrics, fit_human, fit_baseline = halves[True]
    test_rubrics, test_human, test_baseline = halves[False]
    calibrator = Calibrator.fit(fit_rubrics, fit_human, baseline=fit_baseline)
    calibrated = [calibrator.transform_one(b, r) for b, r in zip(test_baseline, test_rubrics)]
    before, after = agreement(test_baseline, test_human), agreement(calibrated, test_human)
    return {"fit_steps": len(fit_human), "held_out_steps": len(test_human),
            "held_out_spearman_before": round(before["spearman"], 4),
            "held_out_spearman_after": round(after["spearman"], 4)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tau-bench",
        type=Path,
        default=SHARED / "tau-bench_gpt-4o-airline_tasks0-4.json",
        help="tau-bench historical trajectories (a JSON list of {task_id, reward, traj, ...}).",
    )
    parser.add_argument("--tasks", type=task_range, help="Only these task ids, e.g. 25-49 (default: all in the file).")
    parser.add_argument("--who-and-when", type=Path, default=SHARED / "who-and-when")
    parser.add_argument("--suite", default="retail", help="Task suite for expert-vs-corrupted labels.")
    parser.add_argument("--n", type=int, default=60, help="Suite tasks (each run by 5 agents).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="default", choices=("default", "seed-003"))
    args = parser.parse_args(argv)

    engine = RewardEngine(preset=args.preset)
    start = time.perf_counter()
    runs = suite_runs(args.suite, args.n, args.seed)
    suite_report = {"suite": args.suite, "tasks": args.n, **evaluate(engine, runs)}
    result = {
        "bench": "reward_quality",
        "preset": args.preset,
        "layers": "rules",
        "tau_bench": tau_bench(engine, args.tau_bench, args.tasks),
        "who_and_when": who_and_when(engine, args.who_and_when),
        "suite": suite_report,
        "calibration": calibration_held_out(engine, runs),
        "seconds": round(time.perf_counter() - start, 1),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
