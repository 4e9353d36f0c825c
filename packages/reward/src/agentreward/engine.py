"""``RewardEngine``: score trajectories with the layers asked for and write scored trajectories.

The layers (``layers=``, any of ``LAYERS``):

- ``rules``: per step, the rule layer scores all five rubrics and the step reward is their
  weighted sum with the domain's rubric weights;
- ``judge`` (``judge=``): the LLM judge replaces the model rubrics with its scores;
- ``calibration`` (``calibrator=``): maps the rubric reward onto the human scale;
- ``learned`` (``prm=``, the ``learned`` extra): a trained process reward model
  (:mod:`agentreward.learned`) gives each step its predicted probability that the task succeeds
  from there, kept in the step's ``metadata.learned_value``.

The judge and the calibration refine the rules' rubric scores, so naming either brings in the
rules; ``judge=`` and ``calibrator=`` switch their layer on by themselves, as they always have.

The rubric layers' trajectory total is the mean step reward, blended with the known outcome and
reduced by the seed-003 penalties, each scaled by the number of steps so long and short
episodes compare:

    total = clip((1 - a) * mean(step_rewards) + a * success + sum(penalty * count) / n_steps, 0, 1)

with ``a = outcome_weight`` when the outcome is known and 0 otherwise. With
``preset="seed-003"`` the first two terms are replaced by seed 003's weighted trajectory
dimensions (:mod:`agentreward.presets`), which are kept in ``metadata.reward_dimensions``. A
judge in ``trajectory`` or ``both`` mode gives a probability of task success that is averaged
with that total (kept in ``metadata.judge_task_success``).

The learned layer alone: each step's reward is its learned value, and the total is the value
after the last step (the model's probability that the whole run succeeded), blended with the
known outcome the same way, ``(1 - a) * value + a * success``; no rule penalties. With the
rubric layers and the learned layer both, each step reward and the total are the mean of the
two: ``(rubric + learned) / 2``.

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
from collections.abc import Iterable, Iterator, Sequence
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
    from agentreward.learned import LearnedScorer

TrajectoryT = TypeVar("TrajectoryT", bound=Trajectory)

#: the layers a ``RewardEngine`` scores with, in the order they apply
LAYERS = ("rules", "judge", "calibration", "learned")


class RewardEngine:
    """Scores trajectories step by step with the layers in ``layers`` (the rules by default);
    ``prm`` is the learned layer's checkpoint directory or a loaded ``LearnedScorer``."""

    def __init__(
        self,
        domain: str | None = None,
        *,
        layers: Sequence[str] = ("rules",),
        weights: dict[str, float] | None = None,
        judge: Judge | None = None,
        calibrator: Calibrator | None = None,
        prm: str | os.PathLike | LearnedScorer | None = None,
        penalties: dict[str, float] | None = None,
        outcome_weight: float = 0.4,
        preset: str = "default",
        conversation_rules: bool = False,
        dimension_weights: dict[str, float] | None = None,
    ):
        if not 0 <= outcome_weight <= 1:
            raise ValueError(f"outcome_weight must be in [0, 1], got {outcome_weight}")
        self.layers = _check_layers(layers, judge=judge, calibrator=calibrator, prm=prm)
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
        if self.preset == "seed-003" and "rules" not in self.layers:
            raise RewardError("preset='seed-003' composes the rule layer's total: add 'rules' to layers")
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
        # loaded last, after every check that costs nothing
        self.prm: LearnedScorer | None = _learned_scorer(prm) if prm is not None else None

    def _weights_for(self, trajectory: dict[str, Any]) -> dict[str, float]:
        if self.weights is not None:
            return self.weights
        domain = self.domain or (trajectory.get("task") or {}).get("domain") or "generic"
        return domain_weights(domain)

    def score(self, trajectory: TrajectoryT) -> TrajectoryT:
        """A scored copy of ``trajectory``, of its type: per-step ``reward`` / ``rubric_scores``
        and the total ``reward`` filled in. A JSONL record (a dict) is ``score_record``'s."""
        if not callable(getattr(trajectory, "model_dump", None)):  # a Trajectory, or a model of its format
            raise TypeError(f"score takes a knowlyrcore.Trajectory, got {type(trajectory).__name__}")
        # the layers read the JSONL format, so the scoring itself runs on the record
        return type(trajectory).model_validate(self.score_record(trajectory.model_dump(mode="json")))

    def score_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """``score`` for a trajectory record (a dict in the JSONL format): a scored copy, every
        field it does not score passed through untouched."""
        check_trajectory(record)
        scored = copy.deepcopy(record)
        # each layer family: (one reward per step, the trajectory total)
        scores = []
        if "rules" in self.layers:
            scores.append(self._score_rubrics(scored))
        if self.prm is not None:
            scores.append(self._score_learned(scored))
        for i, step in enumerate(scored["steps"]):
            step["reward"] = round(sum(rewards[i] for rewards, _ in scores) / len(scores), 6)
        scored["reward"] = round(sum(total for _, total in scores) / len(scores), 6)
        return scored

    def _score_rubrics(self, scored: dict[str, Any]) -> tuple[list[float], float]:
        """The rules, judge and calibration layers: writes each step's ``rubric_scores`` and flags
        and the trajectory's metadata; returns the step rewards and the (rounded) total."""
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
            step["rubric_scores"] = {k: round(v, 6) for k, v in rubric.items()}
            if sig.flags:
                _metadata(step)["reward_flags"] = list(sig.flags)
            rewards.append(reward)
        counts = penalty_counts(signals)
        verdict = self.judge.score_trajectory(scored) if self.judge is not None and rewards else None
        if self.preset == "seed-003" and rewards:
            dimensions = seed003_dimensions(scored, per_step, signals)
            _metadata(scored)["reward_dimensions"] = dimensions
            total = round(seed003_total(dimensions, self.dimension_weights, counts, self.penalties, len(rewards)), 6)
        else:
            total = round(self.total(scored, rewards, counts), 6)
        if verdict is not None:  # the judge's trajectory verdict weighs as much as the rule total
            _metadata(scored)["judge_task_success"] = round(verdict, 6)
            total = round((total + verdict) / 2, 6)
        return rewards, total

    def _score_learned(self, scored: dict[str, Any]) -> tuple[list[float], float]:
        """The learned layer: each step's predicted probability of success (kept in the step's
        ``metadata.learned_value``); the total is the last one, blended with a known outcome."""
        assert self.prm is not None
        values = [float(v) for v in self.prm.step_values(scored)]
        if len(values) != len(scored["steps"]):
            raise RewardError(f"the learned layer gave {len(values)} values for {len(scored['steps'])} steps")
        for i, (step, value) in enumerate(zip(scored["steps"], values)):
            if not 0 <= value <= 1:  # also refuses NaN
                raise RewardError(f"steps[{i}]: the learned layer's value is {value}; it must be a probability")
            _metadata(step)["learned_value"] = round(value, 6)
        return values, (self._with_outcome(scored, values[-1]) if values else 0.0)

    def total(self, trajectory: dict[str, Any], rewards: list[float], counts: dict[str, int]) -> float:
        """The default preset: step mean blended with the outcome, plus penalties, in [0, 1]."""
        if not rewards:
            return 0.0
        mean = sum(rewards) / len(rewards)
        return self._with_penalties(self._with_outcome(trajectory, mean), counts, len(rewards))

    def _with_outcome(self, trajectory: dict[str, Any], value: float) -> float:
        """``value`` blended with the known outcome: ``(1 - a) * value + a * success``."""
        success = (trajectory.get("outcome") or {}).get("success")
        a = self.outcome_weight if success is not None else 0.0
        return (1 - a) * value + a * (1.0 if success else 0.0)

    def _with_penalties(self, value: float, counts: dict[str, int], n_steps: int) -> float:
        value += sum(self.penalties.get(k, 0.0) * n for k, n in counts.items()) / n_steps
        return min(1.0, max(0.0, value))

    def score_many(self, trajectories: Iterable[TrajectoryT]) -> Iterator[TrajectoryT]:
        for trajectory in trajectories:
            yield self.score(trajectory)

    def score_file(self, path: str | os.PathLike, output: str | os.PathLike) -> int:
        """Score every trajectory of ``path`` into ``output`` (JSONL, written atomically)."""
        return write_jsonl(output, map(self.score_record, read_trajectory_dicts(path)))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_layers(
    layers: Sequence[str], *, judge: Judge | None, calibrator: Calibrator | None, prm: Any
) -> tuple[str, ...]:
    """The layers that score, in ``LAYERS`` order; a one-line ``RewardError`` for a set the
    engine cannot run."""
    names = (layers,) if isinstance(layers, str) else tuple(layers)
    unknown = [name for name in names if name not in LAYERS]
    if unknown:
        raise RewardError(f"layers: {unknown[0]!r} is not a layer; the layers are {', '.join(LAYERS)}")
    if not names:
        raise RewardError(f"layers: name at least one of {', '.join(LAYERS)}")
    if "judge" in names and judge is None:
        raise RewardError("layers: 'judge' needs judge=Judge(...), the model that scores")
    if "calibration" in names and calibrator is None:
        raise RewardError("layers: 'calibration' needs calibrator=Calibrator(...) (knowlyr-reward calibrate)")
    if "learned" in names and prm is None:
        raise RewardError(
            "layers: 'learned' needs prm=, a checkpoint directory of knowlyr-trainer prm or a LearnedScorer"
        )
    if prm is not None and "learned" not in names:
        raise RewardError("prm= is the learned layer's model: add 'learned' to layers")
    wanted = set(names)
    wanted |= {"judge"} if judge is not None else set()  # judge= and calibrator= switch their layer on
    wanted |= {"calibration"} if calibrator is not None else set()
    if wanted & {"judge", "calibration"}:  # both refine the rules' rubric scores
        wanted.add("rules")
    return tuple(name for name in LAYERS if name in wanted)


def _learned_scorer(prm: Any) -> Any:
    """``prm`` as a scorer: a checkpoint path is loaded (importing torch only now)."""
    if isinstance(prm, (str, os.PathLike)):
        from agentreward.learned import LearnedScorer

        return LearnedScorer(prm)
    if not callable(getattr(prm, "step_values", None)):
        raise TypeError(f"prm must be a checkpoint path or a LearnedScorer, got {type(prm).__name__}")
    return prm


def _metadata(holder: dict[str, Any]) -> dict[str, Any]:
    """``holder["metadata"]``, made an empty object when it is absent or null."""
    if not isinstance(holder.get("metadata"), dict):
        holder["metadata"] = {}
    return holder["metadata"]
