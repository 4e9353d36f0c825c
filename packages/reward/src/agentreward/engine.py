"""``RewardEngine``: score trajectories with the three layers and write scored trajectories.

Per step: the rule layer scores all five rubrics; the judge layer (when given) replaces the
model rubrics with its scores; the step reward is the weighted sum with the domain's rubric
weights; the calibration layer (when given) maps that reward onto the human scale. Per
trajectory: the mean step reward, blended with the known outcome and reduced by the
seed-003 penalties, each scaled by the number of steps so long and short episodes compare:

    total = clip((1 - a) * mean(step_rewards) + a * success + sum(penalty * count) / n_steps, 0, 1)

with ``a = outcome_weight`` when the outcome is known and 0 otherwise.

Examples:
    >>> engine = RewardEngine(domain="coding")
    >>> traj = {"task": {"description": "read a.py"}, "steps": [
    ...     {"tool_call": {"name": "read_file", "parameters": {"path": "a.py"}}, "observation": {"output": "x = 1"}},
    ...     {"tool_call": {"name": "read_file", "parameters": {"path": "a.py"}}, "observation": {"output": "x = 1"}}]}
    >>> scored = engine.score(traj)
    >>> scored["steps"][1]["rubric_scores"]["non_redundancy"]
    0.0
    >>> scored["steps"][0]["reward"] > scored["steps"][1]["reward"]
    True
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from agentreward.errors import RewardError
from agentreward.rubrics import DEFAULT_PENALTIES, MODEL_RUBRICS, domain_weights, normalise
from agentreward.rules import analyse, penalty_counts, rule_scores
from agentreward.trajectories import check_trajectory, read_trajectories, write_jsonl

if TYPE_CHECKING:
    from agentreward.calibration import Calibrator
    from agentreward.judge import Judge


class RewardEngine:
    """Scores trajectories step by step. Layers 2 and 3 are optional."""

    def __init__(
        self,
        domain: str | None = None,
        *,
        weights: dict[str, float] | None = None,
        judge: Judge | None = None,
        calibrator: Calibrator | None = None,
        penalties: dict[str, float] | None = None,
        outcome_weight: float = 0.4,
    ):
        if not 0 <= outcome_weight <= 1:
            raise ValueError(f"outcome_weight must be in [0, 1], got {outcome_weight}")
        self.domain = domain
        self.weights = normalise(weights) if weights is not None else None
        self.judge = judge
        self.calibrator = calibrator
        self.penalties = dict(DEFAULT_PENALTIES if penalties is None else penalties)
        self.outcome_weight = outcome_weight
        # a non-finite weight, penalty or calibration number would make every score NaN
        numbers = {**{f"weight {k}": v for k, v in (self.weights or {}).items()},
                   **{f"penalty {k}": v for k, v in self.penalties.items()}}  # fmt: skip
        if calibrator is not None:
            numbers.update({f"calibration weight {k}": v for k, v in calibrator.weights.items()})
            numbers.update({"calibration slope": calibrator.slope, "calibration intercept": calibrator.intercept})
        bad = [name for name, value in numbers.items() if not _finite(value)]
        if bad:
            raise RewardError(f"{', '.join(bad)}: must be a finite number (a score must be finite)")

    def _weights_for(self, trajectory: dict[str, Any]) -> dict[str, float]:
        if self.weights is not None:
            return self.weights
        domain = self.domain or (trajectory.get("task") or {}).get("domain") or "generic"
        return domain_weights(domain)

    def score(self, trajectory: dict[str, Any]) -> dict[str, Any]:
        """Return a copy of ``trajectory`` with per-step ``reward``/``rubric_scores`` and a total ``reward``."""
        check_trajectory(trajectory)
        scored = copy.deepcopy(trajectory)
        signals = analyse(scored)
        per_step = rule_scores(scored, signals)
        if self.judge is not None:
            for i, judged in enumerate(self.judge.score_steps(scored)):
                if judged is not None:
                    per_step[i].update({k: judged[k] for k in MODEL_RUBRICS if k in judged})
        weights = self._weights_for(scored)
        rewards: list[float] = []
        for i, (step, rubric, sig) in enumerate(zip(scored["steps"], per_step, signals)):
            reward = sum(weights.get(k, 0.0) * v for k, v in rubric.items())
            if self.calibrator is not None:
                reward = self.calibrator.transform_one(reward, rubric)
            if not math.isfinite(reward):  # never write NaN/Infinity as a score
                raise RewardError(f"steps[{i}]: reward is {reward} (rubric scores {rubric}); scores must be finite")
            step["reward"] = round(reward, 6)
            step["rubric_scores"] = {k: round(v, 6) for k, v in rubric.items()}
            if sig.flags:
                step.setdefault("metadata", {})["reward_flags"] = list(sig.flags)
            rewards.append(reward)
        scored["reward"] = round(self.total(scored, rewards, penalty_counts(signals)), 6)
        return scored

    def total(self, trajectory: dict[str, Any], rewards: list[float], counts: dict[str, int]) -> float:
        if not rewards:
            return 0.0
        mean = sum(rewards) / len(rewards)
        success = (trajectory.get("outcome") or {}).get("success")
        a = self.outcome_weight if success is not None else 0.0
        value = (1 - a) * mean + a * (1.0 if success else 0.0)
        value += sum(self.penalties.get(k, 0.0) * n for k, n in counts.items()) / len(rewards)
        return min(1.0, max(0.0, value))

    def score_many(self, trajectories: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for trajectory in trajectories:
            yield self.score(trajectory)

    def score_file(self, path: str | os.PathLike, output: str | os.PathLike) -> int:
        """Score every trajectory of ``path`` into ``output`` (JSONL, written atomically)."""
        return write_jsonl(output, self.score_many(read_trajectories(path)))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
