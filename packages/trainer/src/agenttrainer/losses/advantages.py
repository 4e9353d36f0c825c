"""Former home of online RL's advantages: each algorithm's live in its module of
``agenttrainer.algorithms`` now (the old names keep working with a ``DeprecationWarning``).

``group_baseline_advantages`` stays: the group baseline of ``grpo``, ``dr_grpo`` or ``rloo`` by name.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowlyrcore.deprecation import moved_names


def _names() -> tuple[str, ...]:
    from agenttrainer.algorithms import algorithm_names

    return algorithm_names()


def _normalizations() -> dict[str, str]:
    from agenttrainer.algorithms import algorithm_names, get_algorithm

    return {n: get_algorithm(n).normalization for n in algorithm_names()}


# Names the policy-gradient algorithms took with them; values that no module holds any more (REPLACED:
# agenttrainer.losses gives its old DEFAULT_NORMALIZATION through it too).
_MOVED = {
    "gae": "agenttrainer.algorithms.ppo",
    "value_loss": "agenttrainer.algorithms.ppo",
    "rejection_advantages": "agenttrainer.algorithms.rft",
    "spread_over_steps": "agenttrainer.algorithms.steps",
    "STEP_WEIGHT_FLOOR": "agenttrainer.algorithms.steps",
}
REPLACED = {
    "ALGORITHMS": ("agenttrainer.algorithms.algorithm_names()", _names),
    "DEFAULT_NORMALIZATION": ("agenttrainer.algorithms.get_algorithm(name).normalization", _normalizations),
}
__getattr__ = moved_names(__name__, _MOVED, REPLACED)


def group_baseline_advantages(
    rewards: Sequence[float], valid: Sequence[bool] | None = None, *, algorithm: str = "grpo", eps: float = 1e-4
) -> list[float]:
    """Advantages of one group of rollouts of the same task, by the group baseline of ``algorithm``.

    Rewards ``[1, 0, 0, 1]`` (all valid): mean 0.5, unbiased std ``sqrt(4 * 0.25 / 3) = 0.57735``.
    ``grpo`` gives ``+-0.5 / 0.57745 = +-0.86588``; ``dr_grpo`` ``+-0.5``; ``rloo``
    ``1 - 1/3 = 0.66667`` and ``0 - 2/3 = -0.66667``.
    """
    from agenttrainer.algorithms.dr_grpo import dr_grpo_advantages
    from agenttrainer.algorithms.grpo import grpo_advantages
    from agenttrainer.algorithms.rloo import rloo_advantages

    if algorithm == "grpo":
        return grpo_advantages(rewards, None, valid, eps=eps)
    if algorithm == "dr_grpo":
        return dr_grpo_advantages(rewards, None, valid)
    if algorithm == "rloo":
        return rloo_advantages(rewards, None, valid)
    raise ValueError(f"group baselines are for grpo, dr_grpo and rloo, got {algorithm!r}")
