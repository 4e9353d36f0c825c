"""Layer 3: calibrate the reward against human step labels.

Given steps with rubric scores and a human score in [0, 1] for each, the calibrator fits
non-negative rubric weights by least squares (``scipy.optimize.nnls``) and then a linear map
of the weighted score onto the human scale (``scipy.stats.linregress``), clipped to [0, 1].
``report`` gives the agreement (Spearman, Kendall, Pearson from ``scipy.stats``) before and
after, so a calibration that does not help is visible. Labels come from a JSONL file of
``{"trajectory_id", "step_index", "score"}`` records or from step metadata
(``human_score``, or Who&When's ``mistake`` flag: steps before the labelled mistake are good,
the mistake step is bad, later steps are not labelled).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentreward.errors import CalibrationError
from agentreward.rubrics import RUBRICS
from agentreward.trajectories import read_json_document, read_json_lines, write_atomically
from knowlyrcore.lazy import lazy_import

optimize = lazy_import("scipy.optimize")  # ~1.5 s with scipy.stats: only fitting needs them
stats = lazy_import("scipy.stats")

MIN_LABELS = 4


def labels_from_metadata(trajectory: dict[str, Any]) -> dict[int, float]:
    """Human step labels carried inside a trajectory (``human_score`` or a ``mistake`` flag)."""
    labels: dict[int, float] = {}
    steps = trajectory.get("steps", [])
    mistake_at = next((i for i, s in enumerate(steps) if (s.get("metadata") or {}).get("mistake")), None)
    for i, step in enumerate(steps):
        meta = step.get("metadata") or {}
        if isinstance(meta.get("human_score"), (int, float)):
            labels[i] = float(meta["human_score"])
        elif mistake_at is not None and i <= mistake_at:
            labels[i] = 0.0 if i == mistake_at else 1.0
    return labels


def load_labels(path: str | os.PathLike) -> dict[tuple[str, int], float]:
    """Read ``{"trajectory_id", "step_index", "score"}`` lines; errors name file, line and field."""
    labels: dict[tuple[str, int], float] = {}
    for number, record in read_json_lines(path):  # encodings, long lines, NaN, nesting: one line each
        if not isinstance(record, dict):
            raise CalibrationError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        for name, kind in (("trajectory_id", str), ("step_index", int), ("score", (int, float))):
            if not isinstance(record.get(name), kind) or isinstance(record.get(name), bool):
                raise CalibrationError(f"{path}:{number}: {name}: missing or of the wrong type")
        if not 0 <= record["score"] <= 1:
            raise CalibrationError(f"{path}:{number}: score: must be in [0, 1], got {record['score']}")
        labels[(record["trajectory_id"], record["step_index"])] = float(record["score"])
    if not labels:
        raise CalibrationError(f"{path}: no labels (empty file)")
    return labels


def agreement(predicted: list[float], human: list[float]) -> dict[str, float]:
    """Rank and linear agreement; NaN-free (0.0 when a side is constant)."""
    if len(set(predicted)) < 2 or len(set(human)) < 2:
        return {
            "spearman": 0.0,
            "kendall": 0.0,
            "pearson": 0.0,
            "mae": float(np.mean(np.abs(np.subtract(predicted, human)))),
        }
    return {
        "spearman": float(stats.spearmanr(predicted, human).statistic),
        "kendall": float(stats.kendalltau(predicted, human).statistic),
        "pearson": float(stats.pearsonr(predicted, human).statistic),
        "mae": float(np.mean(np.abs(np.subtract(predicted, human)))),
    }


@dataclass
class Calibrator:
    """Learned rubric weights and a linear map onto the human scale."""

    weights: dict[str, float] = field(default_factory=dict)
    slope: float = 1.0
    intercept: float = 0.0
    report: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def fit(
        cls, rubric_scores: list[dict[str, float]], human: list[float], *, baseline: list[float] | None = None
    ) -> Calibrator:
        """Fit on parallel lists of step rubric scores and human scores in [0, 1]."""
        if len(rubric_scores) != len(human):
            raise CalibrationError(f"{len(rubric_scores)} scored steps but {len(human)} labels")
        if len(human) < MIN_LABELS:
            raise CalibrationError(f"need at least {MIN_LABELS} labelled steps, got {len(human)}")
        names = list(RUBRICS)
        x = np.array([[s.get(n, 0.0) for n in names] for s in rubric_scores])  # (N, R)
        y = np.array(human, dtype=float)  # (N,)
        # a constant column absorbs the base rate, so the rubric weights explain only variation
        solution, _ = optimize.nnls(np.hstack([x, np.ones((len(y), 1))]), y)
        raw = solution[:-1]
        if raw.sum() <= 0:  # no rubric explains the labels: keep them equal and say so in the report
            raw = np.ones(len(names))
        weights = dict(zip(names, (raw / raw.sum()).tolist()))
        weighted = x @ (raw / raw.sum())
        if np.ptp(weighted) > 0:
            fit = stats.linregress(weighted, y)
            slope, intercept = float(fit.slope), float(fit.intercept)
        else:
            slope, intercept = 0.0, float(y.mean())
        calibrated = np.clip(slope * weighted + intercept, 0, 1).tolist()
        report = {"n_labels": len(human), "after": agreement(calibrated, y.tolist())}
        if baseline is not None:
            report["before"] = agreement(list(baseline), y.tolist())
        return cls(weights=weights, slope=slope, intercept=intercept, report=report)

    def transform_one(self, reward: float, rubric: dict[str, float]) -> float:
        weighted = sum(self.weights.get(k, 0.0) * v for k, v in rubric.items()) if self.weights else reward
        return min(1.0, max(0.0, self.slope * weighted + self.intercept))

    def save(self, path: str | os.PathLike) -> None:
        record = {"weights": self.weights, "slope": self.slope, "intercept": self.intercept, "report": self.report}
        try:
            text = json.dumps(record, indent=2, allow_nan=False)
        except ValueError:
            raise CalibrationError(
                f"{path}: the calibration holds a non-finite number (NaN/Infinity); not saved"
            ) from None
        write_atomically(path, lambda out: out.write(text))  # a failed save leaves an earlier file as it was

    @classmethod
    def load(cls, path: str | os.PathLike) -> Calibrator:
        data = read_json_document(path)  # bounded, UTF-8, strict numbers: one-line errors
        try:
            return cls(
                weights=dict(data["weights"]),
                slope=float(data["slope"]),
                intercept=float(data["intercept"]),
                report=data.get("report", {}),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CalibrationError(f"{path}: not a calibration file: {exc}") from None
