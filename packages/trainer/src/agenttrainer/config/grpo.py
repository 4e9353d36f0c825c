"""``GRPOConfig``: offline policy optimisation over recorded groups (``knowlyr-trainer grpo``), and
the policy-gradient fields it shares with online RL (``PolicyGradientFields``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from agenttrainer.config.files import ConfigError
from agenttrainer.config.run import TrainConfig


def algorithm_choices() -> dict[str, str]:
    """The registered policy-gradient algorithms and their summaries (the ``--algorithm`` choices)."""
    from agenttrainer.algorithms import summaries

    return summaries()


@dataclass
class PolicyGradientFields:
    """The policy-gradient update's fields, shared by offline GRPO and online RL (mixed into both)."""

    algorithm: str = field(
        default="grpo",
        metadata={
            "help": "Policy-gradient algorithm (agenttrainer.algorithms); offline, one that compares the "
            "trajectories of a group.",
            "choices": algorithm_choices,
        },
    )
    loss_normalization: str | None = field(
        default=None,
        metadata={
            "help": "How token losses add up: sequence (mean per sequence, then over sequences), token (mean over "
            "every token of the step) or constant (sum per sequence / a fixed token budget: max_steps x "
            "max_new_tokens online, max_length offline). Default: the algorithm's own."
        },
    )
    clip_eps: float = field(default=0.2, metadata={"help": "PPO clip range of the probability ratio."})
    clip_eps_high: float | None = field(
        default=None,
        metadata={
            "help": "Upper clip range (clip-higher, e.g. 0.28 with clip_eps 0.2): rare good tokens may gain more "
            "per update; default clip_eps."
        },
    )
    kl_coef: float = field(
        default=0.04, metadata={"help": "Weight of the k3 KL to the reference model (0: no reference)."}
    )
    step_level_advantage: bool = field(
        default=True, metadata={"help": "A_ij = A_i * r_step_j / mean(r_steps) when step rewards exist."}
    )
    grpo_iterations: int = field(
        default=1,
        metadata={
            "help": "Optimizer updates per batch of groups (online: per iteration); ratios differ from 1 after the "
            "first."
        },
    )

    def check_policy_gradient(self) -> Any:
        """Refuse out-of-range values; the registered algorithm named by ``algorithm``."""
        from agenttrainer.algorithms import get_algorithm
        from agenttrainer.algorithms.registry import NORMALIZATIONS

        if not 0 < self.clip_eps < 1:
            raise ConfigError(f"clip_eps must be in (0, 1), got {self.clip_eps}")
        if self.clip_eps_high is not None and not self.clip_eps <= self.clip_eps_high < 1:
            raise ConfigError(f"clip_eps_high must be in [clip_eps, 1), got {self.clip_eps_high}")
        if self.kl_coef < 0:
            raise ConfigError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.grpo_iterations <= 0:
            raise ConfigError(f"grpo_iterations must be positive, got {self.grpo_iterations}")
        if self.loss_normalization not in (None, *NORMALIZATIONS):
            raise ConfigError(
                f"loss_normalization must be sequence, token or constant, got {self.loss_normalization!r}"
            )
        try:
            return get_algorithm(self.algorithm)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


@dataclass
class GRPOConfig(PolicyGradientFields, TrainConfig):
    """Offline group relative policy optimisation over groups of scored trajectories."""

    recipe: ClassVar[str] = "grpo"  # online RL (``grpo --online``) too
    unused_fields: ClassVar[tuple[str, ...]] = ("eval_file", "eval_steps", "early_stopping_patience")

    batch_size: int = 2
    learning_rate: float = 1e-5
    group_size: int | None = field(
        default=None, metadata={"help": "Trajectories per group; records with another count raise (None: any)."}
    )
    ref_model_name_or_path: str | None = field(
        default=None, metadata={"help": "Reference model for the KL (default: the initial policy)."}
    )

    def __post_init__(self) -> None:
        if self.eval_file or self.eval_steps:
            raise ConfigError("GRPO does not evaluate during training; run `knowlyr-trainer eval` on the saved model")
        super().__post_init__()
        if self.group_size is not None and self.group_size < 2:
            raise ConfigError(f"group_size must be >= 2, got {self.group_size}")
        algorithm = self.check_policy_gradient()
        if not algorithm.group_baseline:
            raise ConfigError(
                f"algorithm {self.algorithm} learns from episodes played during training, not from recorded groups: "
                "run it with --online (online: true)"
            )
