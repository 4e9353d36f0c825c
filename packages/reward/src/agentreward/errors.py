"""Errors of knowlyr-reward, each naming the file, line and field when input is at fault."""

from __future__ import annotations


class RewardError(Exception):
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
