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

* ``layers`` (``--learned``): the learned layer beside the rules, and both as ``RewardEngine``
  combines them (``rules+learned``, the mean of their values). Process reward models are
  trained by ``knowlyr-trainer prm`` on the suite's train split (the expert and its corrupted
  versions, plus any ``--policy-runs``), every step labelled by a Monte-Carlo continuation
  (``trajectoryhub.prm_data``): by default the run's own (its outcome: the value for the policy
  that made it), with ``--prm-labels expert`` the expert playing on from the step. Per layer: ``loto_auc``, the mean over test templates of the
  trajectory AUC on template T's test runs scored by a PRM trained without any run of T
  (``loto_auc_pooled``: all held-out scores ranked together); ``step_brier`` against the test
  runs' Monte-Carlo step labels; ``tau_airline_auc`` and ``whowhen_step_acc`` with a PRM
  trained on every template; and, with ``--samples FILE`` (n sampled runs per test task),
  ``best_of_n``: pass@1 against the run the layer ranks first, with a paired test.

    python bench/reward_quality.py [--tau-bench FILE --tasks A-B] [--suite retail --n 60]
    python bench/reward_quality.py --learned [--policy-runs RUNS.jsonl] [--samples SAMPLED.jsonl]
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
from agentreward.best_of_n import best_of_n
from agentreward.quality import evaluate, hide_labels, roc_auc
from agentsandbox.suites import get_suite
from knowlyrcore import read_trajectories
from knowlyrcore.datasets import PRMRecord
from knowlyrcore.jsonl import write_jsonl
from trajectoryhub import collect_batched
from trajectoryhub.corrupted import KINDS, CorruptedExpert
from trajectoryhub.prm_data import group_of, outcome_values, prm_records, step_values

# the published real agent logs: $KNOWLYR_REAL_DATA, else shared/data/real beside the clone (as the
# root conftest.py sets it for knowlyrcore.testing.real_data; a script does not import pytest)
SHARED = Path(os.environ.get("KNOWLYR_REAL_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data" / "real")
WHO_AND_WHEN_BEST_STEP_ACCURACY = 0.142  # the best step-level accuracy published with Who&When


def task_range(text: str) -> set[str]:
    first, _, last = text.partition("-")
    return {str(i) for i in range(int(first), int(last or first) + 1)}


def tau_runs(path: Path, tasks: set[str] | None) -> list[dict[str, Any]]:
    runs = [t.model_dump(mode="json") for t in iter_convert(path, "openai-chat")]
    return runs if tasks is None else [t for t in runs if t["task"]["id"] in tasks]


def tau_bench(engine: RewardEngine, path: Path, tasks: set[str] | None) -> dict[str, Any]:
    return {
        "file": path.name,
        "tasks": f"{len(tasks)} task ids" if tasks else "all",
        **evaluate(engine, tau_runs(path, tasks)),
    }


def who_and_when_runs(folder: Path) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json") for path in sorted(folder.glob("*.json")) for t in iter_convert(path)]


def who_and_when(engine: RewardEngine, folder: Path) -> dict[str, Any]:
    runs = who_and_when_runs(folder)
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


def suite_runs(name: str, n: int, seed: int, split: str = "test") -> list[dict[str, Any]]:
    """The suite's expert and its four corrupted versions on ``n`` tasks of ``split``; a failed
    run's first step off the solution is marked as its mistake."""
    suite = get_suite(name)
    tasks = suite.generate(split, n, seed)
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


def calibration_held_out(engine: RewardEngine, runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Fit on the step labels of even-numbered tasks, measure on the odd ones; then fit on all of
    them and score the real data (tau-bench airline, Who&When) with the calibrated rules."""
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
    on_all = Calibrator.fit(fit_rubrics + test_rubrics, fit_human + test_human, baseline=fit_baseline + test_baseline)
    layer = RewardEngine(preset=args.preset, layers=("rules", "calibration"), calibrator=on_all)
    return {"fit_steps": len(fit_human), "held_out_steps": len(test_human),
            "held_out_spearman_before": round(before["spearman"], 4),
            "held_out_spearman_after": round(after["spearman"], 4),
            "tau_airline_auc": evaluate(layer, tau_runs(args.tau_bench, args.tasks))["auc"],
            "whowhen_step_acc": evaluate(layer, who_and_when_runs(args.who_and_when))["step_accuracy"]}  # fmt: skip


# --- the learned layer ----------------------------------------------------------------------------


def label_steps(suite: Any, runs: list[dict[str, Any]], labels: str) -> list[PRMRecord]:
    """Monte-Carlo step labels of ``runs``: each run's own outcome (``outcome``: its policy's one
    continuation) or the expert resuming from every step (``expert``)."""
    if labels == "outcome":
        return list(prm_records(outcome_values(runs)))
    labelled = step_values(runs, env=suite.env_id, env_kwargs=suite.env_kwargs, max_steps=suite.max_steps + 10)
    return list(prm_records(labelled))


def train_prm(records: list[PRMRecord], out: Path, args: argparse.Namespace) -> Path:
    """A PRM trained by knowlyr-trainer's ``prm`` recipe on ``records``; returns its checkpoint.

    The same run as ``knowlyr-trainer prm --train-file OUT/prm.jsonl --output-dir OUT/run --model
    M --num-epochs E --batch-size B --learning-rate LR --max-length L --seed S --no-train-encoder``,
    in this process. By default the text model stays frozen and the head is trained on its pooled
    states, computed once for all runs (``--prm-train-encoder`` fine-tunes it: hours on a CPU)."""
    from agenttrainer import PRMConfig, PRMTrainer  # torch: only for --learned

    out.mkdir(parents=True, exist_ok=True)
    data = out / "prm.jsonl"
    write_jsonl(data, (r.model_dump(mode="json") for r in records))
    config = PRMConfig(
        model_name_or_path=args.prm_model, train_file=str(data), output_dir=str(out / "run"), overwrite=True,
        num_epochs=args.prm_epochs, batch_size=args.prm_batch, learning_rate=args.prm_lr,
        max_length=args.prm_max_length, seed=args.seed, save_steps=0, train_encoder=args.prm_train_encoder,
        signals=not args.prm_no_signals, progress_bar=False,
    )  # fmt: skip
    PRMTrainer(config).train()
    return out / "run" / "final"


#: what the bench reports side by side: each layer alone, and both as RewardEngine combines them
LAYER_SETS = {"rules": ("rules",), "learned": ("learned",), "rules+learned": ("rules", "learned")}


def layer_engines(prm: Path) -> dict[str, RewardEngine]:
    return {name: RewardEngine(layers=layers, prm=prm if "learned" in layers else None)
            for name, layers in LAYER_SETS.items()}  # fmt: skip


def auc_of(pairs: list[tuple[float, bool]]) -> float | None:
    auc = roc_auc([score for score, _ in pairs], [success for _, success in pairs])
    return None if auc is None else round(auc, 4)


def brier(values: list[float], labels: list[float]) -> float | None:
    return round(sum((v - y) ** 2 for v, y in zip(values, labels)) / len(values), 4) if values else None


def leave_one_template_out(suite: Any, train_records: list[PRMRecord], test_runs: list[dict[str, Any]],
                           workdir: Path, args: argparse.Namespace) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Trajectory AUC per held-out template, for the rule layer and for a PRM trained without it.

    Template ``T``'s test runs are scored by a PRM whose training data hold no run of ``T``;
    the rule layer is scored on the same runs. Step calibration (Brier) compares each step's
    value with its Monte-Carlo label."""
    test_labels = {(r.trajectory_id, r.step): r.label for r in label_steps(suite, test_runs, args.prm_labels)}
    figures: dict[str, dict[str, Any]] = {name: {"by_template": {}} for name in LAYER_SETS}
    pooled: dict[str, list[tuple[float, bool]]] = {name: [] for name in LAYER_SETS}
    steps: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in LAYER_SETS}
    for template in sorted({group_of(r) for r in test_runs}):
        held_out = [r for r in test_runs if group_of(r) == template]
        kept = [r for r in train_records if r.group != template]
        prm = train_prm(kept, workdir / f"without-{template}", args)
        engines = layer_engines(prm)
        for name, engine in engines.items():
            pairs = []
            for run in held_out:
                scored = engine.score_record(hide_labels(run))
                values = [step["reward"] for step in scored["steps"]]
                pairs.append((scored["reward"], bool(run["outcome"]["success"])))
                run_id = run.get("id") or f"{run['task']['id']}/{run.get('agent', '')}"
                for i, value in enumerate(values):
                    if (run_id, i) in test_labels:
                        steps[name][0].append(value)
                        steps[name][1].append(test_labels[(run_id, i)])
            figures[name]["by_template"][template] = {"runs": len(pairs), "auc": auc_of(pairs)}
            pooled[name].extend(pairs)
    for name, figure in figures.items():
        aucs = [t["auc"] for t in figure["by_template"].values() if t["auc"] is not None]
        figure["loto_auc"] = round(sum(aucs) / len(aucs), 4) if aucs else None
        figure["loto_auc_pooled"] = auc_of(pooled[name])
        figure["step_brier"] = brier(*steps[name])
    return figures


def best_of_samples(score: Any, path: Path) -> dict[str, Any]:
    """Best-of-n over a file of sampled runs (n per task, e.g. ``knowlyr-hub evaluate --samples 4 -o``)."""
    groups: dict[str, list[tuple[float, bool]]] = {}
    for trajectory in read_trajectories(path):
        record = trajectory.model_dump(mode="json")
        groups.setdefault(str(record["task"]["id"]), []).append(
            (score(hide_labels(record)), bool(record["outcome"]["success"]))
        )
    return {"file": path.name, **best_of_n(groups)}


def learned_section(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """``--learned``: train PRMs on the suite's train split and report the learned layer beside the rules."""
    suite = get_suite(args.suite)
    workdir = Path(args.workdir)
    train_runs = suite_runs(args.suite, args.train_n, args.seed + 1, split="train")
    for path in args.policy_runs:  # the policy's own rollouts on train tasks, labelled the same way
        train_runs += [t.model_dump(mode="json") for t in read_trajectories(path)]
    train_records = label_steps(suite, train_runs, args.prm_labels)
    test_runs = suite_runs(args.suite, args.n, args.seed)
    for path in args.policy_test_runs:  # a policy's own runs on test tasks join the held-out scoring
        test_runs += [t.model_dump(mode="json") for t in read_trajectories(path)]
    layers = leave_one_template_out(suite, train_records, test_runs, workdir, args)
    full = train_prm(train_records, workdir / "all-templates", args)
    engines = layer_engines(full)
    for name, engine in engines.items():
        layers[name]["tau_airline_auc"] = evaluate(engine, tau_runs(args.tau_bench, args.tasks))["auc"]
        layers[name]["whowhen_step_acc"] = evaluate(engine, who_and_when_runs(args.who_and_when))["step_accuracy"]
        if args.samples:
            layers[name]["best_of_n"] = best_of_samples(lambda r, e=engine: e.score_record(r)["reward"], args.samples)
    result["layers"] = layers
    result["learned"] = {"checkpoint": str(full), "train_runs": len(train_runs), "train_steps": len(train_records),
                         "test_runs": len(test_runs), "model": args.prm_model, "epochs": args.prm_epochs,
                         "train_encoder": args.prm_train_encoder, "signals": not args.prm_no_signals,
                         "labels": args.prm_labels,
                         "policy_runs": [str(p) for p in args.policy_runs],
                         "policy_test_runs": [str(p) for p in args.policy_test_runs]}  # fmt: skip


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
    learned = parser.add_argument_group(
        "the learned layer (--learned: trains one PRM per held-out template, minutes each)"
    )
    learned.add_argument("--learned", action="store_true", help="Train and report the learned layer beside the rules.")
    learned.add_argument(
        "--train-n", type=int, default=84, help="Train-split tasks for the PRM data (each run by 5 agents)."
    )
    learned.add_argument(
        "--policy-runs",
        type=Path,
        action="append",
        default=[],
        help="More train-split runs with outcomes (a policy's own, e.g. knowlyr-hub evaluate -o); repeatable.",
    )
    learned.add_argument(
        "--policy-test-runs",
        type=Path,
        action="append",
        default=[],
        help="Test-split runs with outcomes scored with the suite's in leave-one-template-out; repeatable.",
    )
    learned.add_argument("--samples", type=Path, help="Sampled test runs, n per task: best-of-n per layer.")
    learned.add_argument("--workdir", default="runs/reward-quality", help="Where the PRM data and checkpoints go.")
    learned.add_argument("--prm-model", default="all-minilm-l6-v2")
    learned.add_argument("--prm-epochs", type=int, default=30)
    learned.add_argument("--prm-batch", type=int, default=16)
    learned.add_argument("--prm-lr", type=float, default=1e-2, help="(fine-tuning the text model: about 5e-5)")
    learned.add_argument("--prm-max-length", type=int, default=384)
    learned.add_argument(
        "--prm-train-encoder",
        action="store_true",
        help="Fine-tune the text model too (default: frozen, the head trained on its pooled states).",
    )
    learned.add_argument(
        "--prm-labels",
        choices=("outcome", "expert"),
        default="outcome",
        help="Step labels: each run's own outcome (its policy's continuation) or the expert playing on from each step.",
    )
    learned.add_argument(
        "--prm-no-signals",
        action="store_true",
        help="The head reads the text state alone, without the process signals (agentreward.signals).",
    )
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
        "calibration": calibration_held_out(engine, runs, args),
    }
    if args.learned:
        learned_section(args, result)
    result["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
