"""Seed 003's reward names (``sage.tools.agent_training``) over the rule engine's seed-003 preset.

==================================  =============================================================
seed 003                            knowlyr-reward
==================================  =============================================================
``AgentRewardConfig.weights``       :func:`agentreward.presets.seed003_weights` (five dimensions;
                                    ``timing_quality`` = ``timing``, ``format_compliance`` =
                                    ``format``)
``AgentRewardConfig.penalties``     ``RewardEngine(penalties=...)`` (``DEFAULT_PENALTIES``: the
                                    seed's four, same names and values)
``compute_reward(trajectory)``      :class:`Seed003Engine` ``.score_record``: ``{total, breakdown,
                                    feedback}``
``AgentRewardModel.compute_reward`` the same from ``query``, ``response``, ``ground_truth`` and
(query, response, ...)              ``execution_trace`` (a trajectory is built from them)
==================================  =============================================================

Every number comes from the rule layer (:mod:`agentreward.rules`) and the preset's dimensions
(:func:`agentreward.presets.seed003_dimensions`); this module only chooses the weights.

Example:
    >>> config = AgentRewardConfig(weights={"task_completion": 1.0})
    >>> traj = {"task": {"description": "status of #W1?"}, "outcome": {"success": True},
    ...         "steps": [{"tool_call": {"name": "get_order", "parameters": {"order_id": "#W1"}},
    ...                    "observation": {"output": "delivered"}}]}
    >>> config.compute_reward(traj)["total"]
    1.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentreward.engine import RewardEngine
from agentreward.presets import SEED_003_ALIASES, SEED_003_WEIGHTS
from agentreward.rubrics import DEFAULT_PENALTIES
from agentreward.rules import analyse, penalty_counts

#: Seed 003's five weight names, with their defaults.
SEED_WEIGHT_NAMES: dict[str, str] = {
    "task_completion": "task_completion",
    "tool_accuracy": "tool_accuracy",
    "efficiency": "efficiency",
    "timing_quality": "timing",
    "format_compliance": "format",
}

_LOW = {
    "task_completion": "the task was not completed",
    "tool_accuracy": "the tools used differ from the target tools",
    "efficiency": "more steps than the reference needs",
    "timing_quality": "steps timed out or exceeded the time budget",
    "format_compliance": "calls that did not parse or named unknown tools",
}


class Seed003Engine(RewardEngine):
    """``RewardEngine(preset="seed-003", dimension_weights=...)`` under the name seed 003's pipeline uses."""

    def __init__(self, domain: str | None = None, *, dimension_weights: dict[str, float] | None = None, **kwargs: Any):
        kwargs.setdefault("preset", "seed-003")
        if kwargs["preset"] != "seed-003":
            raise ValueError(f"Seed003Engine scores with the seed-003 preset, got preset={kwargs['preset']!r}")
        super().__init__(domain, dimension_weights=dimension_weights, **kwargs)


@dataclass
class AgentRewardConfig:
    """Seed 003's reward configuration: five dimension weights and four penalties."""

    weights: dict[str, float] = field(
        default_factory=lambda: {seed: SEED_003_WEIGHTS[ours] for seed, ours in SEED_WEIGHT_NAMES.items()}
    )
    penalties: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PENALTIES))
    #: Domain of the rubric weights of the step rewards (None: each trajectory's task.domain).
    domain: str | None = None

    def __post_init__(self) -> None:
        # raises on unknown dimension names and bad values (seed003_weights)
        self.engine = Seed003Engine(self.domain, dimension_weights=self.weights, penalties=self.penalties)

    def compute_reward(self, trajectory: dict[str, Any]) -> dict[str, Any]:
        """``{"total", "breakdown", "feedback"}`` of a trajectory (the knowlyr trajectory format).

        ``breakdown`` holds the five dimensions under seed 003's names, plus the penalties that
        applied (``penalty/<name>``: the amount subtracted from the total)."""
        scored = self.engine.score_record(trajectory)
        dimensions = (scored.get("metadata") or {}).get("reward_dimensions")
        if dimensions is None:  # a trajectory without steps
            return {"total": scored["reward"], "breakdown": {}, "feedback": "no steps to score"}
        breakdown = {seed: dimensions[ours] for seed, ours in SEED_WEIGHT_NAMES.items()}
        n = len(scored["steps"])
        for name, count in sorted(penalty_counts(analyse(trajectory)).items()):
            amount = self.penalties.get(name, 0.0) * count / n
            if count and amount:
                breakdown[f"penalty/{name}"] = round(amount, 6)
        return {"total": scored["reward"], "breakdown": breakdown, "feedback": feedback(breakdown)}


def feedback(breakdown: dict[str, float]) -> str:
    """One line per dimension below 1 and per penalty, weakest first."""
    lines = [
        f"{name} {value:.2f}: {_LOW[name]}"
        for name, value in sorted(breakdown.items(), key=lambda kv: kv[1])
        if name in _LOW and value < 1
    ]
    lines += [f"{name} {value:+.2f}" for name, value in breakdown.items() if name.startswith("penalty/")]
    return "\n".join(lines) or "every dimension at 1.00, no penalties"


class AgentRewardModel:
    """Seed 003's ``AgentRewardModel(config).compute_reward(query, response, ground_truth, execution_trace)``.

    The arguments become a trajectory: ``query`` the task, each ``execution_trace`` entry a step
    (a trajectory step, or ``{"tool"|"name", "params"|"arguments"|"parameters", "output"|"result"}``),
    and ``response`` a final ``respond`` step with that message. ``ground_truth`` may give
    ``target_tools`` (scored by F1), ``optimal_steps`` (the efficiency reference when no target
    tools are given), ``success`` (bool), or ``answer`` / ``answer_contains`` (strings the
    response must contain for success)."""

    def __init__(self, config: AgentRewardConfig | None = None):
        self.config = config or AgentRewardConfig()

    def compute_reward(
        self,
        query: str,
        response: str,
        ground_truth: dict[str, Any] | None = None,
        execution_trace: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        return self.config.compute_reward(to_trajectory(query, response, ground_truth or {}, execution_trace or []))


def _step(entry: dict[str, Any]) -> dict[str, Any]:
    if "tool_call" in entry:
        return entry
    name = entry.get("tool") or entry.get("name") or entry.get("tool_id")
    params = entry.get("params", entry.get("arguments", entry.get("parameters", {})))
    output = entry.get("output", entry.get("result", ""))
    return {
        "tool_call": {"name": str(name), "parameters": params if isinstance(params, dict) else {"input": params}},
        "observation": {"output": output if isinstance(output, str) else str(output)},
    }


def to_trajectory(
    query: str, response: str, ground_truth: dict[str, Any], execution_trace: list[dict[str, Any]]
) -> dict[str, Any]:
    """The trajectory :meth:`AgentRewardModel.compute_reward` scores (see its docstring)."""
    task: dict[str, Any] = {"description": query, "metadata": {}}
    if ground_truth.get("target_tools") is not None:
        task["metadata"]["target_tools"] = list(ground_truth["target_tools"])
    if ground_truth.get("optimal_steps"):
        task["max_steps"] = 2 * int(ground_truth["optimal_steps"])  # the preset's reference is max_steps / 2
    steps = [_step(e) for e in execution_trace]
    steps.append({"tool_call": {"name": "respond", "parameters": {"message": response}}, "observation": {"output": ""}})
    trajectory: dict[str, Any] = {"task": task, "steps": steps}
    expected = ground_truth.get("answer_contains") or (
        [ground_truth["answer"]] if isinstance(ground_truth.get("answer"), str) else None
    )
    if isinstance(ground_truth.get("success"), bool):
        trajectory["outcome"] = {"success": ground_truth["success"]}
    elif expected:
        trajectory["outcome"] = {"success": all(s.lower() in response.lower() for s in expected)}
    return trajectory


__all__ = [
    "SEED_003_ALIASES",
    "AgentRewardConfig",
    "AgentRewardModel",
    "Seed003Engine",
    "feedback",
    "to_trajectory",
]
