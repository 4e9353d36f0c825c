"""Losses as pure functions: tensors in, ``(loss, metrics)`` out.

Every loss is normalised by an explicit item count (``num_items``) so that a trainer can pass
the count of the whole optimizer step (all accumulation micro-batches, all processes) and get
gradients that do not depend on how the step was split.
"""

from agenttrainer.losses.advantages import (
    DEFAULT_NORMALIZATION,
    gae,
    group_baseline_advantages,
    rejection_advantages,
    spread_over_steps,
    value_loss,
)
from agenttrainer.losses.dpo import dpo_loss
from agenttrainer.losses.grpo import group_advantages, grpo_loss, step_level_advantages
from agenttrainer.losses.sft import chunked_token_logps, sft_loss, step_weights

__all__ = [
    "DEFAULT_NORMALIZATION",
    "chunked_token_logps",
    "dpo_loss",
    "gae",
    "group_advantages",
    "group_baseline_advantages",
    "grpo_loss",
    "rejection_advantages",
    "sft_loss",
    "spread_over_steps",
    "step_level_advantages",
    "step_weights",
    "value_loss",
]
