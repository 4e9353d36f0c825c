"""The step guard every recipe runs before ``optimizer.step()``: no update from a non-finite loss."""

from __future__ import annotations

import math

import torch

from agenttrainer.errors import TrainerError


class NonFiniteLossError(TrainerError, FloatingPointError):
    """A NaN/Infinity loss or gradient norm, raised before the optimizer step that would apply it."""


def check_finite(step: int, loss: float, grad_norm: float | torch.Tensor | None = None) -> None:
    """Refuse optimizer step ``step`` when ``loss`` (reduced over processes) or the gradient norm is
    not finite: one such step turns every weight into NaN, and the run would then save them.

    >>> check_finite(3, float("nan"))
    Traceback (most recent call last):
    ...
    agenttrainer.trainers.guards.NonFiniteLossError: step 3: loss is nan; stopped before the optimizer step (nothing from this step on is saved)
    """
    if not math.isfinite(loss):
        raise NonFiniteLossError(
            f"step {step}: loss is {loss}; stopped before the optimizer step (nothing from this step on is saved)"
        )
    if grad_norm is not None and not math.isfinite(float(grad_norm)):
        raise NonFiniteLossError(
            f"step {step}: gradient norm is {float(grad_norm)}; stopped before the optimizer step "
            "(nothing from this step on is saved)"
        )
