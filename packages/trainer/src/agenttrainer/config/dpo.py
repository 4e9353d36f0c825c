"""``DPOConfig``: direct preference optimisation (``knowlyr-trainer dpo``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from agenttrainer.config.files import ConfigError
from agenttrainer.config.run import TrainConfig


@dataclass
class DPOConfig(TrainConfig):
    """Direct preference optimisation on prompt / chosen / rejected pairs."""

    recipe: ClassVar[str] = "dpo"

    learning_rate: float = 5e-6
    beta: float = field(
        default=0.1, metadata={"help": "Strength of the implicit KL to the reference (DPO temperature)."}
    )
    loss_type: str = field(default="sigmoid", metadata={"help": "sigmoid (DPO), hinge (SLiC) or ipo."})
    label_smoothing: float = field(
        default=0.0, metadata={"help": "Probability that a preference label is flipped (cDPO; sigmoid only)."}
    )
    reference_free: bool = field(default=False, metadata={"help": "Use a uniform reference (no reference model)."})
    ref_model_name_or_path: str | None = field(
        default=None, metadata={"help": "Reference model (default: the initial policy)."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        from agenttrainer.algorithms.dpo import LOSS_TYPES

        if self.beta <= 0:
            raise ConfigError(f"beta must be positive, got {self.beta}")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"loss_type must be one of {LOSS_TYPES}, got {self.loss_type!r}")
        if not 0 <= self.label_smoothing < 0.5:
            raise ConfigError(f"label_smoothing must be in [0, 0.5), got {self.label_smoothing}")
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise ConfigError("label_smoothing applies to loss_type 'sigmoid' only")
