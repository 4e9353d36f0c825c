"""Errors of knowlyr-recorder, all one line and all naming where the problem is.

``ConversionError`` is a core ``DataFormatError``: its message reads
``file[:line]: field: problem``, where ``field`` is a JSON path such as
``$.trajectory[2].action`` so a user can find the bad value in a log they did not write.

Every class derives from core's ``KnowlyrError``; the input errors (``ConversionError`` and its
subclasses: a bad log, an unknown format, an unknown trajectory id) have ``exit_code = 2``, what
a ``knowlyr-recorder`` command exits with when one ends it.
"""

from __future__ import annotations

from knowlyrcore.errors import DataFormatError, KnowlyrError


class RecorderError(KnowlyrError):
    """Base class of every error knowlyr-recorder raises on purpose."""


class ConversionError(RecorderError, DataFormatError):
    """A log could not be read or mapped onto the trajectory schema (bad input: exit code 2)."""

    exit_code = 2


class UnknownFormatError(ConversionError):
    """No adapter recognised a log; ``reasons`` maps each format tried to why it did not match."""

    def __init__(self, path: str, line: int | None, reasons: dict[str, str]):
        self.reasons = dict(reasons)
        tried = "; ".join(f"{name}: {why}" for name, why in reasons.items())
        super().__init__(path, line, f"unknown log format (tried {tried})")


class FieldError(ValueError):
    """Raised inside adapters for a bad value at a JSON path; the converter adds file and line."""

    def __init__(self, where: str, message: str):
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}")
