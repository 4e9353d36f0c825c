"""The fields every training run shares (``RunConfig``), and those of a run over a data file (``TrainConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from agenttrainer.config.base import Config
from agenttrainer.config.files import ConfigError

SCHEDULERS = ("cosine", "linear", "constant")
REPORT_TO = ("wandb", "tensorboard")


@dataclass
class LoRA:
    """LoRA adapters trained instead of all weights (``config.lora``)."""

    use_lora: bool = field(
        default=False, metadata={"help": "Train LoRA adapters instead of all weights (needs the peft extra)."}
    )
    lora_preset: str = field(
        default="recommended", metadata={"help": "LoRA target preset: minimal, recommended or full."}
    )
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling alpha (usually 2 * r)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA input."})
    lora_target_modules: list[str] | None = field(
        default=None, metadata={"help": "Explicit LoRA target modules (overrides the preset)."}
    )

    def __post_init__(self) -> None:
        if self.lora_r <= 0:
            raise ConfigError(f"lora_r must be positive, got {self.lora_r}")


@dataclass
class RunConfig(Config):
    """Fields of every training run: the model, where it writes, the optimizer, precision, LoRA,
    checkpoints and metric sinks."""

    recipe: ClassVar[str] = "train"  # the run directory records it; the default output_dir is ./output/<recipe>
    #: Shared fields this recipe has no use for: the command line has no flag for them, and a
    #: value other than the default is refused rather than silently ignored.
    unused_fields: ClassVar[tuple[str, ...]] = ()

    model_name_or_path: str = field(
        default="smollm2-135m", metadata={"help": "Model path, Hugging Face id or alias (smollm2-135m)."}
    )
    output_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where checkpoints, the final model and logs go (default: ./output/<recipe>, e.g. ./output/dpo). "
            "It may not hold the input model."
        },
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Write into output_dir even when it holds a run of another recipe."}
    )
    seed: int = field(default=42, metadata={"help": "Seed for data order, sampling, initialisation and dropout."})
    max_optimizer_steps: int = field(
        default=-1, metadata={"help": "Stop after this many optimizer steps (-1: run every epoch or iteration)."}
    )
    batch_size: int = field(
        default=4,
        metadata={
            "help": "Micro-batch per process: SFT examples, DPO pairs, GRPO groups (tasks), online RL episodes or "
            "PRM records (a task's records together, so their pairs meet)."
        },
    )
    learning_rate: float = field(default=2e-5, metadata={"help": "Peak learning rate of AdamW."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    warmup_ratio: float = field(default=0.1, metadata={"help": "Fraction of optimizer steps with linear LR warmup."})
    lr_scheduler: str = field(default="cosine", metadata={"help": "LR decay after warmup: cosine, linear or constant."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm (0 disables)."})
    bf16: bool = field(
        default=True, metadata={"help": "bf16 autocast where the device supports it (weights stay fp32)."}
    )
    fp16: bool = field(
        default=False,
        metadata={
            "help": "fp16 autocast with loss scaling (CUDA only; weights stay fp32). Turns bf16 off; on a CPU use "
            "bf16 or fp32."
        },
    )
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Recompute activations in backward to save memory."}
    )
    loss_chunk_size: int = field(
        default=1024, metadata={"help": "Label positions per LM-head chunk (bounds logits memory)."}
    )
    share_prefix: bool = field(
        default=True,
        metadata={
            "help": "Rows of a micro-batch that open with the same tokens (a GRPO group's prompt, a DPO pair's, SFT "
            "rows' system turn and tools; at least 16 tokens) compute them once, with the same loss and gradients; "
            "--no-share-prefix computes every row in full."
        },
    )
    lora: LoRA = field(default_factory=LoRA, metadata={"group": LoRA})
    save_steps: int = field(
        default=0,
        metadata={
            "help": "Write a resumable checkpoint every N optimizer steps (online RL: iterations; 0: only the final "
            "model)."
        },
    )
    save_total_limit: int = field(
        default=2, metadata={"help": "Keep at most this many checkpoints, oldest deleted first (0: keep all)."}
    )
    resume_from_checkpoint: str | None = field(
        default=None, metadata={"help": "Checkpoint directory to resume from, or 'latest' in output_dir."}
    )
    report_to: list[str] = field(
        default_factory=list, metadata={"help": "Extra metric sinks: wandb (offline) and/or tensorboard."}
    )
    run_name: str | None = field(
        default=None, metadata={"help": "Run name for wandb / TensorBoard (default: output_dir's name)."}
    )
    progress_bar: bool = field(default=True, metadata={"help": "Show a tqdm progress bar."})

    def __post_init__(self) -> None:
        keys = self.flat_keys()
        for name in self.unused_fields:
            if self.value(name) != keys[name].default:
                raise ConfigError(f"{name}: the {self.recipe} recipe does not use it; leave it out")
        if self.output_dir is None:
            self.output_dir = f"./output/{self.recipe}"
        if self.fp16:
            self.bf16 = False  # one autocast dtype; fp16 asked for explicitly wins over the bf16 default
        for name in ("batch_size", "loss_chunk_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.lr_scheduler not in SCHEDULERS:
            raise ConfigError(f"lr_scheduler must be one of {SCHEDULERS}, got {self.lr_scheduler!r}")
        if isinstance(self.report_to, str):
            self.report_to = [s for s in self.report_to.split(",") if s and s != "none"]
        bad = [s for s in self.report_to if s not in REPORT_TO]
        if bad:
            raise ConfigError(f"report_to accepts {REPORT_TO}, got {bad}")
        for name in ("save_steps", "save_total_limit"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass
class TrainConfig(RunConfig):
    """A run over a data file (SFT, DPO, offline GRPO, PRM): epochs, sequence length, evaluation."""

    train_file: str | None = field(default=None, metadata={"help": "Training JSONL (knowlyr-hub export)."})
    eval_file: str | None = field(
        default=None, metadata={"help": "Evaluation JSONL in the same format; enables eval and early stopping."}
    )
    num_epochs: int = field(default=3, metadata={"help": "Passes over the training data."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Micro-batches per optimizer step."})
    max_length: int = field(
        default=2048, metadata={"help": "Longest sequence in tokens; longer ones are truncated (or chunked)."}
    )
    packing: bool = field(
        default=True,
        metadata={"help": "Padding-free batches: sequences packed into one row with a block-diagonal mask."},
    )
    eval_steps: int = field(
        default=0, metadata={"help": "Evaluate every N optimizer steps (0: at the end of each epoch)."}
    )
    early_stopping_patience: int = field(
        default=0, metadata={"help": "Stop after N evaluations without improvement (0 disables)."}
    )
    logging_steps: int = field(default=1, metadata={"help": "Log metrics every N optimizer steps."})

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("num_epochs", "gradient_accumulation_steps", "max_length", "logging_steps"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("eval_steps", "early_stopping_patience"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.early_stopping_patience and not self.eval_file:
            raise ConfigError("early_stopping_patience needs an eval_file")
