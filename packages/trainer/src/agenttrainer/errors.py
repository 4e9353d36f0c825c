"""The base of every error knowlyr-trainer raises on purpose.

``TrainerError`` derives from knowlyr-core's ``KnowlyrError``; each concrete error also keeps the
built-in type callers already catch (``ConfigError`` is a ``ValueError``, ``ModelLoadError`` a
``RuntimeError``), so ``except KnowlyrError``, ``except TrainerError`` and the old handlers all work.
A missing extra is knowlyr-core's ``MissingExtraError`` (one type in all six packages), importable here too.
"""

from __future__ import annotations

from knowlyrcore.errors import KnowlyrError
from knowlyrcore.errors import MissingExtraError as MissingExtraError  # the one type, from knowlyr-core


class TrainerError(KnowlyrError):
    """Base class of every error knowlyr-trainer raises on purpose."""


class CheckpointError(TrainerError, ValueError):
    """A checkpoint file that cannot be resumed from: it holds more than tensors and plain values
    (loading it could run code), it is corrupt, or it does not fit this run; the message names it."""

    exit_code = 2  # wrong input: the command exits 2 (knowlyrcore.clikit)
