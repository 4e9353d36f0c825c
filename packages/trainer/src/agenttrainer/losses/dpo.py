"""Former home of the DPO losses: they live in ``agenttrainer.algorithms.dpo`` now; the old names
keep working with a ``DeprecationWarning``."""

from knowlyrcore.deprecation import moved_names

__getattr__ = moved_names(
    __name__, {"dpo_loss": "agenttrainer.algorithms.dpo", "LOSS_TYPES": "agenttrainer.algorithms.dpo"}
)
