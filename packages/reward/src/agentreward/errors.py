"""Errors of knowlyr-reward, each naming the file, line and field when input is at fault.

knowlyr-reward does not depend on knowlyr-core; where core is installed (every install with
another knowlyr package, or the ``mcp`` extra) ``RewardError`` derives from its
``KnowlyrError``, so one ``except KnowlyrError`` catches the whole family as core promises.
"""

from __future__ import annotations

try:
    from knowlyrcore.errors import KnowlyrError as _Base
except ImportError:  # reward installed alone
    _Base = Exception


class RewardError(_Base):
    """Base class of every error knowlyr-reward raises on purpose.

    ``exit_code``: what ``knowlyr-reward`` exits with (docs/cli.md); most of its errors are about
    the input (a trajectory, weights, labels or calibration file), so 2 unless a subclass says 1.
    """

    exit_code = 2


class TrajectoryFormatError(RewardError, ValueError):
    """A trajectory record is malformed: ``path:line: field: problem``."""

    def __init__(self, path: str, line: int | None, message: str, field: str | None = None):
        self.path, self.line, self.field, self.problem = str(path), line, field, message
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


class JudgeError(RewardError):
    """The LLM judge could not produce scores (endpoint down, unusable reply)."""

    exit_code = 1  # a failure while running, not the input's fault


class UnscoredError(RewardError, ValueError):
    """A step that needs a score (pairs, calibration) has none: run ``score`` first."""


class CalibrationError(RewardError, ValueError):
    """Human labels are missing, malformed or too few to calibrate on."""
