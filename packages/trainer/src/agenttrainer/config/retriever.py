"""``RetrieverConfig``: contrastive fine-tuning of the tool-retrieval encoder (``knowlyr-trainer retriever``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agenttrainer.config.base import Config
from agenttrainer.config.files import ConfigError


@dataclass
class RetrieverConfig(Config):
    """A sentence-embedding encoder trained on (request -> tool used) pairs (``agenttrainer.retrieval``)."""

    model_name_or_path: str = field(
        default="all-minilm-l6-v2",
        metadata={"help": "Encoder to start from: the packaged all-minilm-l6-v2 or a model directory."},
    )
    library: str = field(
        default="generated",
        metadata={"help": "Tools JSONL/JSON (OpenAI tools, MCP tools/list), or 'generated' (toolgen)."},
    )
    train_file: str = field(
        default="generated",
        metadata={"help": "{query, tool} JSONL, trajectory JSONL to mine pairs from, or 'generated'."},
    )
    generated_pairs: int = field(default=2000, metadata={"help": "Pairs drawn from toolgen's train split."})
    eval_split: str | None = field(default="test", metadata={"help": "toolgen split to report recall@5 on."})
    eval_pairs: int = field(default=400, metadata={"help": "Pairs of the eval split."})
    output_dir: str = field(default="runs/retriever", metadata={"help": "Where the fine-tuned encoder goes."})
    num_epochs: int = field(default=1, metadata={"help": "Passes over the pairs."})
    max_optimizer_steps: int = field(
        default=-1, metadata={"help": "Stop after this many optimizer steps (-1: run every epoch)."}
    )
    batch_size: int = field(default=32, metadata={"help": "Pairs per step; the others' tools are in-batch negatives."})
    learning_rate: float = field(default=3e-5, metadata={"help": "Learning rate of AdamW."})
    temperature: float = field(default=0.05, metadata={"help": "Softmax temperature of the InfoNCE loss."})
    hard_negatives: int = field(default=2, metadata={"help": "BM25-mined confusable tools per query."})
    max_length: int = field(default=64, metadata={"help": "Tokens of a query or tool description the encoder reads."})
    seed: int = field(default=0, metadata={"help": "Seed for pair order and sampling."})

    def __post_init__(self) -> None:
        for name in ("num_epochs", "batch_size", "max_length", "generated_pairs", "eval_pairs"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.hard_negatives < 0:
            raise ConfigError(f"hard_negatives must be >= 0, got {self.hard_negatives}")
        for name in ("learning_rate", "temperature"):
            if not isinstance(getattr(self, name), (int, float)) or not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be a positive number, got {getattr(self, name)!r}")
