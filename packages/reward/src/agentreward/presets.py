"""Trajectory-level reward presets: how the total of a scored trajectory is composed.

``default`` is the step-mean formula of :mod:`agentreward.engine`. ``seed-003`` is the reward
model of the project's seed 003, a weighted sum of five trajectory dimensions:

=================  ======  ==========================================================
dimension          weight  measured as
=================  ======  ==========================================================
task_completion    0.40    ``outcome.success`` (or ``outcome.score``) when known, else
                           the mean ``goal_progress`` of the steps
tool_accuracy      0.25    F1 of the tools used against the task's target tools when the
                           task names them, else the mean ``tool_selection`` of the steps
efficiency         0.15    ``min(1, reference / steps)``: the reference is the expert's step
                           count (the target tools' count), else half ``task.max_steps``,
                           else the number of steps that were neither repeats nor failures
timing             0.10    with ``task.metadata.time_budget_s`` and step ``duration_s``:
                           ``min(1, budget / total duration)``; else the share of steps
                           that did not time out
format             0.10    the share of steps the environment could parse and whose tool
                           exists
=================  ======  ==========================================================

The weights above are the defaults: :func:`seed003_weights` validates other ones (seed 003's
own names ``timing_quality`` / ``format_compliance`` are accepted for ``timing`` / ``format``) and
:func:`seed003_total` combines the dimensions with them; ``agentreward.seed003.Seed003Engine``
scores with changed weights. The seed-003 penalties (``DEFAULT_PENALTIES``) apply to both, per offending step and divided by
the number of steps. Target tools are read from ``task.metadata.target_tools`` (names), the
suites' ``task.metadata.solution`` (``{"tool": ...}``) or tau-bench's
``task.metadata.expected_actions`` (``{"name": ...}``).

Examples:
    >>> tool_f1(["search", "book", "respond"], ["search", "book"])["f1"]
    0.8
    >>> seed003_weights({"task_completion": 1.0, "timing_quality": 1.0})
    {'task_completion': 1.0, 'tool_accuracy': 0.0, 'efficiency': 0.0, 'timing': 1.0, 'format': 0.0}
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from agentreward.errors import RewardError
from agentreward.rules import StepSignals

SEED_003_WEIGHTS: dict[str, float] = {
    "task_completion": 0.40,
    "tool_accuracy": 0.25,
    "efficiency": 0.15,
    "timing": 0.10,
    "format": 0.10,
}
#: Seed 003's names of the dimensions whose names here are shorter.
SEED_003_ALIASES: dict[str, str] = {"timing_quality": "timing", "format_compliance": "format"}
PRESETS = ("default", "seed-003")
_REPLY = "respond"


def check_preset(name: str) -> str:
    if name not in PRESETS:
        raise RewardError(f"unknown reward preset {name!r}; choose one of {', '.join(PRESETS)}")
    return name


def seed003_weights(weights: dict[str, float] | None = None) -> dict[str, float]:
    """The seed-003 dimension weights, ``weights`` replacing the defaults.

    Keys are dimension names or their seed-003 aliases; dimensions ``weights`` leaves out weigh
    0. Weights must be finite and >= 0 with a positive sum (they are used as given, not
    normalised, as in seed 003's weighted sum)."""
    if weights is None:
        return dict(SEED_003_WEIGHTS)
    out = dict.fromkeys(SEED_003_WEIGHTS, 0.0)
    for name, value in weights.items():
        key = SEED_003_ALIASES.get(name, name)
        if key not in out:
            known = ", ".join([*SEED_003_WEIGHTS, *SEED_003_ALIASES])
            raise RewardError(f"unknown seed-003 reward dimension {name!r}; choose from {known}")
        if not _number(value) or not math.isfinite(value) or value < 0:
            raise RewardError(f"seed-003 weight {name} must be a finite number >= 0, got {value!r}")
        out[key] = float(value)
    if sum(out.values()) <= 0:
        raise RewardError("seed-003 weights must have a positive sum")
    return out


def seed003_total(
    dimensions: dict[str, float],
    weights: dict[str, float],
    penalty_counts: dict[str, int],
    penalties: dict[str, float],
    n_steps: int,
) -> float:
    """``clip(sum(w * dimension) + sum(penalty * count) / n_steps, 0, 1)``, as the engine computes it."""
    value = sum(w * dimensions[k] for k, w in weights.items())
    value += sum(penalties.get(k, 0.0) * n for k, n in penalty_counts.items()) / max(n_steps, 1)
    return min(1.0, max(0.0, value))


def target_tools(task: dict[str, Any]) -> list[str] | None:
    """The tools the task names as its solution, in order, or None when it names none."""
    meta = task.get("metadata") if isinstance(task.get("metadata"), dict) else {}
    named = task.get("target_tools", meta.get("target_tools"))
    if isinstance(named, list) and all(isinstance(n, str) for n in named):
        return list(named)
    for key, field in (("solution", "tool"), ("expected_actions", "name")):
        actions = meta.get(key)
        if isinstance(actions, list) and actions and all(isinstance(a, dict) for a in actions):
            tools = [str(a[field]) for a in actions if isinstance(a.get(field), str)]
            if tools:
                return tools
    return None


def tool_f1(used: Sequence[str], target: Sequence[str]) -> dict[str, float]:
    """Precision, recall and F1 of two tool multisets (all 1.0 when both are empty)."""
    if not used and not target:
        return {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    matched = sum((Counter(used) & Counter(target)).values())
    precision = matched / len(used) if used else 0.0
    recall = matched / len(target) if target else 0.0
    f1 = 2 * precision * recall / (precision + recall) if matched else 0.0
    return {"precision": round(precision, 6), "recall": round(recall, 6), "f1": round(f1, 6)}


def seed003_dimensions(
    trajectory: dict[str, Any], rubric_scores: list[dict[str, float]], signals: list[StepSignals]
) -> dict[str, Any]:
    """The five seed-003 dimensions of a scored trajectory, each in [0, 1], and the tool F1."""
    steps = trajectory["steps"]
    n = len(steps)
    task = trajectory.get("task") or {}
    meta = task.get("metadata") if isinstance(task.get("metadata"), dict) else {}
    outcome = trajectory.get("outcome") or {}

    if isinstance(outcome.get("success"), bool):
        completion = 1.0 if outcome["success"] else 0.0
    elif _number(outcome.get("score")) and 0 <= outcome["score"] <= 1:
        completion = float(outcome["score"])
    else:
        completion = sum(r["goal_progress"] for r in rubric_scores) / n

    target = target_tools(task)
    used = [s["tool_call"]["name"] for s in steps]
    if target is not None and _REPLY not in target:  # the target lists actions only: replies are not tools
        used = [name for name in used if name != _REPLY]
    f1 = tool_f1(used, target) if target is not None else None
    tool_accuracy = f1["f1"] if f1 is not None else sum(r["tool_selection"] for r in rubric_scores) / n

    if target:
        reference = float(len(target))
    elif _number(task.get("max_steps")) and task["max_steps"] > 0:
        reference = task["max_steps"] / 2
    else:
        reference = float(sum(not (s.redundant or s.failed or s.repeated_action) for s in signals))
    efficiency = min(1.0, reference / n)

    durations = [s.get("duration_s") for s in steps]
    budget = meta.get("time_budget_s")
    if _number(budget) and budget > 0 and all(_number(d) for d in durations):
        total = sum(durations)
        timing = 1.0 if total <= 0 else min(1.0, budget / total)
    else:
        timing = 1 - sum(s.timeout for s in signals) / n

    format_ok = 1 - sum(s.format_error or s.wrong_tool for s in signals) / n
    dimensions = {
        "task_completion": completion,
        "tool_accuracy": tool_accuracy,
        "efficiency": efficiency,
        "timing": timing,
        "format": format_ok,
    }
    result: dict[str, Any] = {k: round(v, 6) for k, v in dimensions.items()}
    if f1 is not None:
        result["tool_precision"], result["tool_recall"], result["tool_f1"] = f1["precision"], f1["recall"], f1["f1"]
    return result


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
