"""Errors of knowlyr-reward, each naming the file, line and field when input is at fault.

``RewardError`` derives from knowlyr-core's ``KnowlyrError``, so one ``except KnowlyrError``
catches the whole family and ``knowlyrcore.clikit.run`` prints each as one line with its exit code.
"""

from __future__ import annotations

from knowlyrcore.errors import DataFormatError, KnowlyrError


class RewardError(KnowlyrError):
    """Base class of every error knowlyr-reward raises on purpose.

    ``exit_code``: what ``knowlyr-reward`` exits with (docs/cli.md); most of its errors are about
    the input (a trajectory, weights, labels or calibration file), so 2 unless a subclass says 1.
    """

    exit_code = 2


class TrajectoryFormatError(RewardError, DataFormatError):
    """A trajectory record is malformed: ``path:line: field: problem`` (core's ``DataFormatError``)."""


class JudgeError(RewardError):
    """The LLM judge could not produce scores (endpoint down, unusable reply)."""

    exit_code = 1  # a failure while running, not the input's fault


class JudgeSetupError(RewardError):
    """The judge endpoint cannot do what the judge was set up to ask (e.g. it returns no logprobs):
    unlike a ``JudgeError`` this stops the scoring, since every step would abstain."""

    exit_code = 1


class UnscoredError(RewardError, ValueError):
    """A step that needs a score (pairs, calibration) has none: run ``score`` first."""


class CalibrationError(RewardError, ValueError):
    """Human labels are missing, malformed or too few to calibrate on."""
