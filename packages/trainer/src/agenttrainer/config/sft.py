"""``SFTConfig``: supervised fine-tuning on trajectories (``knowlyr-trainer sft``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from agenttrainer.config.files import ConfigError
from agenttrainer.config.run import TrainConfig


@dataclass
class ExampleSelection:
    """Which examples each epoch trains on: easy ones first, a coreset, replays of earlier runs,
    or task-type proportions (``SFTConfig.selection``; ``agenttrainer.data.selection``)."""

    curriculum: bool = field(default=False, metadata={"help": "Train easy (short, high-reward) examples first."})
    curriculum_start_ratio: float = field(
        default=0.3, metadata={"help": "Fraction of easiest examples used in the first epoch."}
    )
    curriculum_warmup_epochs: int = field(default=2, metadata={"help": "Epochs until the whole dataset is used."})
    use_coreset_selection: bool = field(
        default=False, metadata={"help": "Keep only coreset_target_size examples chosen by coreset_strategy."}
    )
    coreset_target_size: int = field(default=1000, metadata={"help": "Examples kept by coreset selection."})
    coreset_strategy: str = field(default="hybrid", metadata={"help": "loss_topk, diversity, hybrid or random."})
    use_online_continual: bool = field(
        default=False, metadata={"help": "Mix replayed examples from earlier runs (rehearsal buffer)."}
    )
    continual_buffer_size: int = field(default=4096, metadata={"help": "Capacity of the rehearsal buffer (examples)."})
    continual_replay_ratio: float = field(
        default=0.3, metadata={"help": "Replayed examples added, as a fraction of the new data."}
    )
    continual_buffer_path: str | None = field(
        default=None, metadata={"help": "Buffer file (default: <output_dir>/replay_buffer.jsonl)."}
    )
    task_weights: dict[str, float] | None = field(
        default=None, metadata={"help": "Resample each epoch to these task_type proportions."}
    )

    def __post_init__(self) -> None:
        from agenttrainer.data.selection import CORESET_STRATEGIES

        if not 0 < self.curriculum_start_ratio <= 1:
            raise ConfigError(f"curriculum_start_ratio must be in (0, 1], got {self.curriculum_start_ratio}")
        if self.curriculum_warmup_epochs < 0:
            raise ConfigError(f"curriculum_warmup_epochs must be >= 0, got {self.curriculum_warmup_epochs}")
        if self.coreset_strategy not in CORESET_STRATEGIES:
            raise ConfigError(f"coreset_strategy must be one of {CORESET_STRATEGIES}, got {self.coreset_strategy!r}")
        if self.coreset_target_size <= 0 or self.continual_buffer_size <= 0:
            raise ConfigError("coreset_target_size and continual_buffer_size must be positive")
        if not 0 <= self.continual_replay_ratio <= 1:
            raise ConfigError(f"continual_replay_ratio must be in [0, 1], got {self.continual_replay_ratio}")
        if self.curriculum and self.task_weights:
            raise ConfigError("curriculum and task_weights both choose each epoch's examples; use one")


@dataclass
class SFTConfig(TrainConfig):
    """Supervised fine-tuning on trajectories, with the agent training enhancements."""

    recipe: ClassVar[str] = "sft"

    agent_format: bool = field(
        default=True, metadata={"help": "Steps become chat turns: assistant = thought + action, user = observation."}
    )
    mask_observations: bool = field(
        default=True, metadata={"help": "Labels -100 on observations: train only on what the model produced."}
    )
    step_weighted_loss: bool = field(
        default=False, metadata={"help": "Weight each step's token CE by step_reward / mean(step_rewards)."}
    )
    chunk_long_trajectories: bool = field(
        default=False, metadata={"help": "Split trajectories longer than max_length at step boundaries."}
    )
    selection: ExampleSelection = field(default_factory=ExampleSelection, metadata={"group": ExampleSelection})
