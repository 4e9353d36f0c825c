"""Errors raised by model loading, so callers can tell 'this model cannot be had here' apart."""

from __future__ import annotations

from agenttrainer.errors import TrainerError


class ModelLoadError(TrainerError, RuntimeError):
    """A model or tokenizer could not be resolved, converted or loaded; the message says why."""

    exit_code = 2  # wrong input: the command exits 2 (knowlyrcore.clikit)
