"""How good is a reward? Score labelled trajectories with their labels hidden and compare.

A process reward model is only worth training on if it ranks good behaviour above bad. Given
trajectories whose outcome is known (``outcome.success``, ``outcome.score``) or whose mistake
step is labelled (step ``metadata.mistake``, as Who&When records carry), :func:`evaluate`
removes every field that carries the label (:func:`hide_labels`), scores what is left, and
reports:

- ``auc``: ROC AUC of the trajectory reward for success (0.5 is chance, 1.0 a perfect ranking);
- ``spearman``: rank correlation of the trajectory reward with the recorded score;
- ``step_accuracy``: how often the lowest-rewarded step is the labelled mistake step (ties go to
  the earliest step, the way a reader scanning the log would stop), beside ``step_chance``, the
  accuracy of picking a step uniformly at random.

Examples:
    >>> roc_auc([0.9, 0.8, 0.3, 0.1], [True, False, True, False])
    0.75
    >>> lowest_step([0.9, 0.2, 0.2, 0.7])
    1
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from agentreward.errors import RewardError
from knowlyrcore.lazy import lazy_import

stats = lazy_import("scipy.stats")  # ~1.5 s to import: only the metrics need it

#: keys of ``task.metadata`` that carry the answer in public data sets (tau-bench's gold actions
#: and the user simulator's hidden instruction, Who&When's ground truth); hidden before scoring
LABEL_TASK_KEYS = ("expected_actions", "outputs", "instruction", "ground_truth", "answer", "solution")
#: keys of a trajectory's ``metadata`` that carry the result (tau-bench's reward breakdown)
LABEL_METADATA_KEYS = ("reward_info", "mistake_agent", "mistake_step", "mistake_reason", "is_correct")
#: keys of a step's ``metadata`` that carry a label, or an earlier scoring's findings
LABEL_STEP_KEYS = ("mistake", "mistake_reason", "human_score", "reward_flags", "learned_value")


class Scorer(Protocol):
    """Scores trajectory records (dicts), as ``RewardEngine.score_record`` does."""

    def score_record(self, record: dict[str, Any]) -> dict[str, Any]: ...


def hide_labels(trajectory: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``trajectory`` without its outcome, recorded rewards or any labelled field."""
    hidden = copy.deepcopy(trajectory)
    for key in ("outcome", "reward"):
        hidden.pop(key, None)
    task = hidden.get("task")
    if isinstance(task, dict) and isinstance(task.get("metadata"), dict):
        for key in LABEL_TASK_KEYS:
            task["metadata"].pop(key, None)
    if isinstance(hidden.get("metadata"), dict):
        for key in LABEL_METADATA_KEYS:
            hidden["metadata"].pop(key, None)
    for step in hidden.get("steps") or []:
        if isinstance(step, dict):
            step.pop("reward", None)
            step.pop("rubric_scores", None)
            if isinstance(step.get("metadata"), dict):
                for key in LABEL_STEP_KEYS:
                    step["metadata"].pop(key, None)
    return hidden


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Probability that a random positive scores above a random negative (ties count half);
    ``None`` when one class is missing. Equals the Mann-Whitney U statistic over ``n+ · n-``."""
    positives = [s for s, y in zip(scores, labels) if y]
    negatives = [s for s, y in zip(scores, labels) if not y]
    if not positives or not negatives:
        return None
    u = stats.mannwhitneyu(positives, negatives, alternative="two-sided").statistic
    return float(u) / (len(positives) * len(negatives))


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation; ``None`` when either side is constant or too short."""
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return float(stats.spearmanr(xs, ys).statistic)


def lowest_step(rewards: Sequence[float]) -> int:
    """Index of the lowest reward, the earliest one on ties."""
    return min(range(len(rewards)), key=lambda i: (rewards[i], i))


def mistake_step(trajectory: dict[str, Any]) -> int | None:
    """The labelled mistake step: the first step whose ``metadata.mistake`` is true."""
    for i, step in enumerate(trajectory.get("steps") or []):
        if (step.get("metadata") or {}).get("mistake"):
            return i
    return None


def evaluate(scorer: Scorer, trajectories: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Score each trajectory with its labels hidden; report how well the rewards match them."""
    rewards: list[float] = []
    successes: list[bool] = []
    outcome_scores: list[tuple[float, float]] = []
    hits = located = 0
    chance = 0.0
    count = 0
    # a scorer written before score_record existed scores records with its score()
    score = getattr(scorer, "score_record", None) or scorer.score
    for trajectory in trajectories:
        count += 1
        scored = score(hide_labels(trajectory))
        reward = float(scored["reward"])
        outcome = trajectory.get("outcome") or {}
        if isinstance(outcome.get("success"), bool):
            rewards.append(reward)
            successes.append(outcome["success"])
        if isinstance(outcome.get("score"), (int, float)) and not isinstance(outcome.get("score"), bool):
            outcome_scores.append((reward, float(outcome["score"])))
        mistake = mistake_step(trajectory)
        if mistake is not None and scored["steps"]:
            located += 1
            hits += lowest_step([float(s["reward"]) for s in scored["steps"]]) == mistake
            chance += 1 / len(scored["steps"])
    if count == 0:
        raise RewardError("no trajectories to evaluate")
    if not successes and not located:
        raise RewardError(
            "no labels: a trajectory needs outcome.success (for AUC) or a step with metadata.mistake "
            "(for step localisation)"
        )
    report: dict[str, Any] = {"trajectories": count, "labelled_success": len(successes), "successes": sum(successes)}
    auc = roc_auc(rewards, successes)
    report["auc"] = None if auc is None else round(auc, 4)
    rho = spearman([r for r, _ in outcome_scores], [s for _, s in outcome_scores])
    report["spearman"] = None if rho is None else round(rho, 4)
    report["labelled_steps"] = located
    report["step_accuracy"] = round(hits / located, 4) if located else None
    report["step_chance"] = round(chance / located, 4) if located else None
    return report
