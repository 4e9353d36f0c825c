"""Losses as pure functions: tensors in, ``(loss, metrics)`` out.

Every loss is normalised by an explicit item count (``num_items``) so that a trainer can pass
the count of the whole optimizer step (all accumulation micro-batches, all processes) and get
gradients that do not depend on how the step was split.

Here: SFT's cross-entropy and the token log-probs every recipe scores with, and the process
reward model's BCE + pairwise loss (``prm_loss``). The policy-gradient
algorithms (GRPO, Dr. GRPO, RLOO, PPO, RFT, GSPO) and the DPO losses live in
``agenttrainer.algorithms``, one module each.
"""

from agenttrainer.losses.prm import prm_loss
from agenttrainer.losses.sft import chunked_token_logps, sft_loss, step_weights

__all__ = [
    "chunked_token_logps",
    "prm_loss",
    "sft_loss",
    "step_weights",
]
