"""Former home of GRPO's advantages and loss: they live in ``agenttrainer.algorithms.grpo`` (and
``agenttrainer.algorithms.steps``) now; the old names keep working with a ``DeprecationWarning``."""

from knowlyrcore.deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "group_advantages": "agenttrainer.algorithms.grpo",
        "grpo_loss": "agenttrainer.algorithms.grpo",
        "step_level_advantages": "agenttrainer.algorithms.steps",
    },
)
