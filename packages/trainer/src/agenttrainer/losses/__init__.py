"""Losses as pure functions: tensors in, ``(loss, metrics)`` out.

Every loss is normalised by an explicit item count (``num_items``) so that a trainer can pass
the count of the whole optimizer step (all accumulation micro-batches, all processes) and get
gradients that do not depend on how the step was split.

Here: SFT's cross-entropy and the token log-probs every recipe scores with, and the process
reward model's BCE + pairwise loss (``prm_loss``). The policy-gradient
algorithms (GRPO, Dr. GRPO, RLOO, PPO, RFT, GSPO) and the DPO losses live in
``agenttrainer.algorithms``, one module each; their old names here keep working with a
``DeprecationWarning``.
"""

from agenttrainer.losses.advantages import REPLACED, group_baseline_advantages
from agenttrainer.losses.prm import prm_loss
from agenttrainer.losses.sft import chunked_token_logps, sft_loss, step_weights
from knowlyrcore.deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "dpo_loss": "agenttrainer.algorithms.dpo",
        "gae": "agenttrainer.algorithms.ppo",
        "group_advantages": "agenttrainer.algorithms.grpo",
        "grpo_loss": "agenttrainer.algorithms.grpo",
        "rejection_advantages": "agenttrainer.algorithms.rft",
        "spread_over_steps": "agenttrainer.algorithms.steps",
        "step_level_advantages": "agenttrainer.algorithms.steps",
        "value_loss": "agenttrainer.algorithms.ppo",
    },
    {"DEFAULT_NORMALIZATION": REPLACED["DEFAULT_NORMALIZATION"]},
)

__all__ = [
    "chunked_token_logps",
    "group_baseline_advantages",
    "prm_loss",
    "sft_loss",
    "step_weights",
]
