"""``RewardEngine``: score trajectories with the three layers and write scored trajectories.

Per step: the rule layer scores all five rubrics; the judge layer (when given) replaces the
model rubrics with its scores; the step reward is the weighted sum with the domain's rubric
weights; the calibration layer (when given) maps that reward onto the human scale. Per
trajectory: the mean step reward, blended with the known outcome and reduced by the
seed-003 penalties, each scaled by the number of steps so long and short episodes compare:

    total = clip((1 - a) * mean(step_rewards) + a * success + sum(penalty * count) / n_steps, 0, 1)

with ``a = outcome_weight`` when the outcome is known and 0 otherwise. With
``preset="seed-003"`` the first two terms are replaced by seed 003's weighted trajectory
dimensions (:mod:`agentreward.presets`), which are kept in ``metadata.reward_dimensions``. A
judge in ``trajectory`` or ``both`` mode gives a probability of task success that is averaged
with that total (kept in ``metadata.judge_task_success``).

``score`` takes a ``knowlyrcore.Trajectory`` and returns a scored copy: each step's ``reward``
and ``rubric_scores``, the total ``reward`` (the model's fields for them) and the metadata
above. ``score_record`` does the same for a record of the JSONL format (a dict, as the CLI reads
it), passing every field it does not score through.

Examples:
    >>> from knowlyrcore import Observation, Step, TaskInfo, ToolCall, Trajectory
    >>> read = dict(tool_call=ToolCall(name="read_file", parameters={"path": "a.py"}),
    ...             observation=Observation(output="x = 1"))
    >>> traj = Trajectory(task=TaskInfo(description="read a.py"), steps=[Step(index=0, **read), Step(index=1, **read)])
    >>> scored = RewardEngine(domain="coding").score(traj)
    >>> scored.steps[1].rubric_scores["non_redundancy"]
    0.0
    >>> scored.steps[0].reward > scored.steps[1].reward
    True
"""

from __future__ import annotations

import copy
import math
import os
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from agentreward.errors import RewardError
from agentreward.presets import check_preset, seed003_dimensions, seed003_total, seed003_weights
from agentreward.rubrics import CONVERSATION_PENALTIES, DEFAULT_PENALTIES, MODEL_RUBRICS, domain_weights, normalise
from agentreward.rules import analyse, penalty_counts, rule_scores
from agentreward.trajectories import check_trajectory, read_trajectory_dicts
from knowlyrcore.jsonl import write_jsonl
from knowlyrcore.trajectory import Trajectory

if TYPE_CHECKING:
    from agentreward.calibration import Calibrator
    from agentreward.judge import Judge

TrajectoryT = TypeVar("TrajectoryT", bound=Trajectory)

_warned_about_dicts = False  # score(dict) warns once per process, not once per trajectory


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
        preset: str = "default",
        conversation_rules: bool = False,
        dimension_weights: dict[str, float] | None = None,
    ):
        if not 0 <= outcome_weight <= 1:
            raise ValueError(f"outcome_weight must be in [0, 1], got {outcome_weight}")
        self.domain = domain
        self.weights = normalise(weights) if weights is not None else None
        self.judge = judge
        self.calibrator = calibrator
        self.penalties = dict(DEFAULT_PENALTIES if penalties is None else penalties)
        self.conversation_rules = conversation_rules
        if conversation_rules:  # the rules' flags also lower step scores and the total
            self.penalties = {**CONVERSATION_PENALTIES, **self.penalties}
        self.outcome_weight = outcome_weight
        self.preset = check_preset(preset)
        if dimension_weights is not None and self.preset != "seed-003":
            raise ValueError(f"dimension_weights weigh the seed-003 preset's five dimensions; got preset={preset!r}")
        # the seed-003 total's weights (its defaults unless given; names or their seed-003 aliases)
        self.dimension_weights = seed003_weights(dimension_weights)
        # a non-finite weight, penalty or calibration number would make every score NaN
        numbers = {
            **{f"weight {k}": v for k, v in (self.weights or {}).items()},
            **{f"penalty {k}": v for k, v in self.penalties.items()},
        }
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

    def score(self, trajectory: TrajectoryT) -> TrajectoryT:
        """A scored copy of ``trajectory``, of its type: per-step ``reward`` / ``rubric_scores``
        and the total ``reward`` filled in.

        A dict still works, scored as ``score_record`` does, with a ``DeprecationWarning``."""
        if isinstance(trajectory, dict):
            _warn_dict_input()
            return self.score_record(trajectory)  # type: ignore[return-value]
        if not callable(getattr(trajectory, "model_dump", None)):  # a Trajectory, or a model of its format
            raise TypeError(f"score takes a knowlyrcore.Trajectory, got {type(trajectory).__name__}")
        # the layers read the JSONL format, so the scoring itself runs on the record
        return type(trajectory).model_validate(self.score_record(trajectory.model_dump(mode="json")))

    def score_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """``score`` for a trajectory record (a dict in the JSONL format): a scored copy, every
        field it does not score passed through untouched."""
        check_trajectory(record)
        scored = copy.deepcopy(record)
        signals = analyse(scored)
        per_step = rule_scores(scored, signals, conversation=self.conversation_rules)
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
        counts = penalty_counts(signals)
        verdict = self.judge.score_trajectory(scored) if self.judge is not None and rewards else None
        if self.preset == "seed-003" and rewards:
            dimensions = seed003_dimensions(scored, per_step, signals)
            if not isinstance(scored.get("metadata"), dict):
                scored["metadata"] = {}
            scored["metadata"]["reward_dimensions"] = dimensions
            total = seed003_total(dimensions, self.dimension_weights, counts, self.penalties, len(rewards))
            scored["reward"] = round(total, 6)
        else:
            scored["reward"] = round(self.total(scored, rewards, counts), 6)
        if verdict is not None:  # the judge's trajectory verdict weighs as much as the rule total
            scored.setdefault("metadata", {})["judge_task_success"] = round(verdict, 6)
            scored["reward"] = round((scored["reward"] + verdict) / 2, 6)
        return scored

    def total(self, trajectory: dict[str, Any], rewards: list[float], counts: dict[str, int]) -> float:
        """The default preset: step mean blended with the outcome, plus penalties, in [0, 1]."""
        if not rewards:
            return 0.0
        mean = sum(rewards) / len(rewards)
        success = (trajectory.get("outcome") or {}).get("success")
        a = self.outcome_weight if success is not None else 0.0
        return self._with_penalties((1 - a) * mean + a * (1.0 if success else 0.0), counts, len(rewards))

    def _with_penalties(self, value: float, counts: dict[str, int], n_steps: int) -> float:
        value += sum(self.penalties.get(k, 0.0) * n for k, n in counts.items()) / n_steps
        return min(1.0, max(0.0, value))

    def score_many(self, trajectories: Iterable[TrajectoryT]) -> Iterator[TrajectoryT]:
        for trajectory in trajectories:
            yield self.score(trajectory)

    def score_file(self, path: str | os.PathLike, output: str | os.PathLike) -> int:
        """Score every trajectory of ``path`` into ``output`` (JSONL, written atomically)."""
        return write_jsonl(output, map(self.score_record, read_trajectory_dicts(path)))


def _warn_dict_input() -> None:
    global _warned_about_dicts
    if not _warned_about_dicts:
        _warned_about_dicts = True
        warnings.warn(
            "RewardEngine.score(dict) is deprecated: pass a knowlyrcore.Trajectory, "
            "or call RewardEngine.score_record for a JSONL record",
            DeprecationWarning,
            stacklevel=3,
        )


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
