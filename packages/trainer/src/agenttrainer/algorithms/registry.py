"""The registry of policy-gradient algorithms: name -> ``Algorithm`` (advantages + loss).

An ``Algorithm`` says how a group of episodes of one task becomes one advantage per episode
(``advantages``; None for PPO, whose per-token advantages come from a value head) and which loss
scores the sampled tokens (``loss``), with the way token losses add up by default
(``normalization``). Drivers look algorithms up by name (``get_algorithm``); ``algorithm_names()`` gives the
choices of ``--algorithm``.

Every ``advantages`` function takes ``(rewards, successes, valid)``, one entry per episode of the
group (``valid=False``: masked out of the update, advantage 0). Every ``loss`` takes
``(logps, old_logps, ref_logps, advantages, mask, *, clip_eps, clip_eps_high, kl_coef, num_items,
normalization, max_tokens)`` and returns ``(loss, metrics)`` (``agenttrainer.algorithms.grpo.grpo_loss``
documents the arguments); ``loss_options`` gives the keywords a run's config sets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from agenttrainer.config.grpo import PolicyGradientFields

AdvantageFn = Callable[[Sequence[float], Sequence[bool | None], Sequence[bool]], list[float]]
LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
NORMALIZATIONS = ("sequence", "token", "constant")


@dataclass(frozen=True)
class Algorithm:
    """One policy-gradient algorithm, as the drivers (offline GRPO, online RL) run it."""

    name: str
    summary: str  # one line for --help
    loss: LossFn
    advantages: AdvantageFn | None  # None: per-token advantages from a value head (value_head=True)
    normalization: str = "sequence"  # how token losses add up unless the config says otherwise
    # The advantages compare the episodes of a group by their rewards: groups need >= 2 episodes,
    # dynamic sampling may refill groups without a signal, and recorded groups can train offline.
    group_baseline: bool = True
    value_head: bool = False  # a value head on the policy, trained alongside (PPO)

    def __post_init__(self) -> None:
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {self.normalization!r}")
        if (self.advantages is None) != self.value_head:
            raise ValueError(f"{self.name}: an algorithm without advantages needs a value head, and only then")


_ALGORITHMS: dict[str, Algorithm] = {}


def register_algorithm(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` under its name (an algorithm module calls this at import)."""
    known = _ALGORITHMS.get(algorithm.name)
    if known is not None and known is not algorithm:
        raise ValueError(f"an algorithm named {algorithm.name!r} is already registered")
    _ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def algorithm_names(*, offline: bool = False) -> tuple[str, ...]:
    """Registered algorithm names, sorted (``offline``: those that train on recorded groups)."""
    return tuple(sorted(n for n, a in _ALGORITHMS.items() if a.group_baseline or not offline))


def get_algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name``; a ``ValueError`` names the choices."""
    try:
        return _ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algorithm must be one of {algorithm_names()}, got {name!r}") from None


def summaries() -> dict[str, str]:
    """Each algorithm's one-line summary, by name (sorted): the ``--algorithm`` help."""
    return {n: _ALGORITHMS[n].summary for n in algorithm_names()}


def baseline_advantages(
    rewards: Sequence[float], valid: Sequence[bool] | None, scale: Callable[[list[float], float], float]
) -> list[float]:
    """``(r_i - mean(r)) * scale(members, mean)`` for each valid member of a group, 0 for the others.

    Only valid members enter the mean; a group with fewer than two of them has no baseline and
    gives 0 to all. The group algorithms differ only in ``scale``.
    """
    valid = [True] * len(rewards) if valid is None else list(valid)
    if len(valid) != len(rewards):
        raise ValueError(f"{len(rewards)} rewards but {len(valid)} valid flags")
    members = [float(r) for r, ok in zip(rewards, valid) if ok]
    if len(members) < 2:
        return [0.0] * len(rewards)
    mean = sum(members) / len(members)
    factor = scale(members, mean)
    return [(float(r) - mean) * factor if ok else 0.0 for r, ok in zip(rewards, valid)]


def loss_options(config: PolicyGradientFields, algorithm: Algorithm, *, max_tokens: int) -> dict[str, Any]:
    """The keywords of ``algorithm.loss`` that a run's ``config`` sets (offline and online alike):
    its clip range, KL weight and ``normalization`` (``loss_normalization``, else the algorithm's
    own), with ``max_tokens``, the token budget of the ``constant`` normalization. The step's
    ``num_items`` is the caller's."""
    return {
        "clip_eps": config.clip_eps,
        "clip_eps_high": config.clip_eps_high,
        "kl_coef": config.kl_coef,
        "normalization": config.loss_normalization or algorithm.normalization,
        "max_tokens": max_tokens,
    }
