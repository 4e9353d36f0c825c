"""``PRMConfig``: a learned process reward model (``knowlyr-trainer prm``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from agenttrainer.config.files import ConfigError
from agenttrainer.config.run import TrainConfig


@dataclass
class PRMConfig(TrainConfig):
    """A learned process reward model: a text model with a scalar head, trained on labelled
    trajectory prefixes (``knowlyrcore.datasets.PRMRecord``) with BCE plus a pairwise loss."""

    recipe: ClassVar[str] = "prm"
    # a text model with a linear head: no LM head to chunk, no packed rows, no LoRA
    unused_fields: ClassVar[tuple[str, ...]] = (
        "packing",
        "loss_chunk_size",
        "share_prefix",
        "gradient_checkpointing",
        "use_lora",
        "lora_preset",
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "lora_target_modules",
    )

    # What the shared fields mean for a text model with a scalar head:
    model_name_or_path: str = field(
        default="all-minilm-l6-v2",
        metadata={
            "help": "Text model to put the reward head on: all-minilm-l6-v2 (packaged, the prm extra), smollm2-135m, "
            "a model directory, or a prm checkpoint to train further."
        },
    )
    train_file: str | None = field(
        default=None, metadata={"help": "PRM JSONL: one {text, label, task_id, ...} record per trajectory prefix."}
    )
    eval_file: str | None = field(
        default=None,
        metadata={"help": "Held-out PRM JSONL: eval loss and ROC AUC (label >= 0.5 as success); early stopping."},
    )
    max_length: int = field(
        default=512, metadata={"help": "Tokens of a prefix the model reads; longer ones keep their end (newest steps)."}
    )
    learning_rate: float = 5e-5
    batch_size: int = 16

    train_encoder: bool = field(
        default=True,
        metadata={
            "help": "Train the text model with the head; --no-train-encoder trains the head alone on the frozen "
            "model's pooled states, computed once per text and kept in the knowlyr cache (minutes instead of hours "
            "on a CPU; use a larger learning rate and more epochs, e.g. 1e-2 and 30)."
        },
    )
    signals: bool = field(
        default=True,
        metadata={
            "help": "The head also reads each prefix's process signals (are the call arguments grounded in the request "
            "and earlier results, did calls fail, repeats; agentreward.signals) beside the text state; --no-signals: "
            "the text state alone. A prm checkpoint trained further keeps the head it has."
        },
    )
    pairwise_weight: float = field(
        default=1.0, metadata={"help": "Weight of the pairwise (Bradley-Terry) term beside the BCE (0: BCE only)."}
    )
    margin: float = field(
        default=0.5, metadata={"help": "Smallest label difference between two records of a task that makes a pair."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pairwise_weight < 0:
            raise ConfigError(f"pairwise_weight must be >= 0, got {self.pairwise_weight}")
        if not 0 < self.margin <= 1:
            raise ConfigError(f"margin must be in (0, 1] (labels are probabilities), got {self.margin}")
        if self.max_length < 8:
            raise ConfigError(f"max_length must be at least 8 tokens, got {self.max_length}")
