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
    """Base class of every error knowlyr-reward raises on purpose."""


class TrajectoryFormatError(RewardError, ValueError):
    """A trajectory record is malformed: ``path:line: field: problem``."""

    def __init__(self, path: str, line: int | None, message: str, field: str | None = None):
        self.path, self.line, self.field, self.problem = str(path), line, field, message
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


class JudgeError(RewardError):
    """The LLM judge could not produce scores (endpoint down, unusable reply)."""


class CalibrationError(RewardError, ValueError):
    """Human labels are missing, malformed or too few to calibrate on."""
