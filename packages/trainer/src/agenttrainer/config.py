"""Training configuration: one dataclass per method, every field documented.

Load from YAML with ``SFTConfig.from_yaml(path, **overrides)``; the CLI passes its flags as
overrides so ``--config`` sets defaults and flags win. Unknown keys and out-of-range values raise
:class:`ConfigError` with a one-line message naming the file and line; it never echoes the file's
text (a config path may come from an MCP client), only field names and short plain values.

Example:
    >>> SFTConfig(train_file="sft.jsonl", batch_size=2).effective_batch_size
    2
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml

from agenttrainer.errors import TrainerError
from knowlyrcore.deprecation import rename_keys, renamed_fields
from knowlyrcore.errors import describe_parse_error, no_such_file

C = TypeVar("C", bound="TrainConfig")

SCHEDULERS = ("cosine", "linear", "constant")
REPORT_TO = ("wandb", "tensorboard")


class ConfigError(TrainerError, ValueError):
    """An invalid configuration value or file."""

    exit_code = 2  # wrong input: the command exits 2 (knowlyrcore.clikit)


# A config file may be any file the caller names (an MCP client, a typo): its errors name the file,
# the line and what is wrong, and echo only what looks like a field name or a short plain value,
# never the file's text.
MAX_CONFIG_BYTES = 1 << 20
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.+-]{1,32}")


def _shown(value: Any) -> str:
    """``value`` for an error message: short plain values as they are, anything else described."""
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if isinstance(value, str) and _PLAIN_VALUE.fullmatch(value):
        return repr(value)
    size = f" of {len(value)} characters" if isinstance(value, str) else ""
    return f"a {type(value).__name__}{size}"


def read_config_file(path: str | Path) -> tuple[dict[str, Any], dict[str, int]]:
    """The mapping in the YAML file ``path`` and the line of each top-level key.

    Errors name the file and line, never the file's content."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: cannot read config (larger than {MAX_CONFIG_BYTES} bytes)")
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(no_such_file(path)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: cannot read config (not UTF-8 text)") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        loaded = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        line, problem = describe_parse_error(exc)
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(f"{where}: not valid YAML ({problem})") from None
    except (yaml.YAMLError, RecursionError):
        raise ConfigError(f"{path}: not valid YAML") from None
    finally:
        loader.dispose()
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of config fields")
    lines = {}
    if isinstance(node, yaml.MappingNode):
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines.setdefault(key.value, key.start_mark.line + 1)
    return dict(loaded or {}), lines


def _coerce(name: str, type_name: str, value: Any, source: str) -> Any:
    """Numbers written as strings (YAML 1.1 reads ``2e-5`` as text) become numbers."""
    for prefix, convert in (("float", float), ("int", int)):
        if type_name.startswith(prefix) and isinstance(value, str):
            try:
                return convert(value)
            except ValueError:
                raise ConfigError(f"{source}: {name} must be a number, got {_shown(value)}") from None
    if type_name.startswith("float") and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


# ``max_steps`` counts an episode's steps everywhere in knowlyr (``collect(max_steps=...)``,
# ``MaxStepsWrapper``, online RL's ``max_steps``); the optimizer steps of a run are
# ``max_optimizer_steps``. The old field still works (keyword, attribute, config key), warning once.
OPTIMIZER_STEPS_RENAMED = {"max_steps": "max_optimizer_steps"}


@renamed_fields(**OPTIMIZER_STEPS_RENAMED)
@dataclass
class TrainConfig:
    """Fields shared by SFT, DPO and GRPO."""

    recipe: ClassVar[str] = "train"  # the run directory records it; the default output_dir is ./output/<recipe>
    #: Old field name -> new one (``knowlyrcore.deprecation.renamed_fields``; each class sets its own).
    renamed_fields: ClassVar[dict[str, str]] = {}
    #: Shared fields this recipe has no use for: the command line has no flag for them, and a
    #: value other than the default is refused rather than silently ignored.
    unused_fields: ClassVar[tuple[str, ...]] = ()

    model_name_or_path: str = field(
        default="smollm2-135m", metadata={"help": "Model path, Hugging Face id or alias (smollm2-135m)."}
    )
    train_file: str | None = field(default=None, metadata={"help": "Training JSONL (knowlyr-hub export)."})
    eval_file: str | None = field(
        default=None, metadata={"help": "Evaluation JSONL in the same format; enables eval and early stopping."}
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
    num_epochs: int = field(default=3, metadata={"help": "Passes over the training data."})
    max_optimizer_steps: int = field(
        default=-1, metadata={"help": "Stop after this many optimizer steps (-1: run all epochs)."}
    )
    batch_size: int = field(
        default=4, metadata={"help": "Examples (SFT/DPO pairs/GRPO groups) per micro-batch per process."}
    )
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Micro-batches per optimizer step."})
    learning_rate: float = field(default=2e-5, metadata={"help": "Peak learning rate of AdamW."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    warmup_ratio: float = field(default=0.1, metadata={"help": "Fraction of optimizer steps with linear LR warmup."})
    lr_scheduler: str = field(default="cosine", metadata={"help": "LR decay after warmup: cosine, linear or constant."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm (0 disables)."})
    max_length: int = field(
        default=2048, metadata={"help": "Longest sequence in tokens; longer ones are truncated (or chunked)."}
    )
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
    seed: int = field(default=42, metadata={"help": "Seed for data order, initialisation and dropout."})
    packing: bool = field(
        default=True,
        metadata={"help": "Padding-free batches: sequences packed into one row with a block-diagonal mask."},
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
    save_steps: int = field(
        default=0, metadata={"help": "Write a resumable checkpoint every N optimizer steps (0: only the final model)."}
    )
    save_total_limit: int = field(
        default=2, metadata={"help": "Keep at most this many checkpoints, oldest deleted first (0: keep all)."}
    )
    resume_from_checkpoint: str | None = field(
        default=None, metadata={"help": "Checkpoint directory to resume from, or 'latest' in output_dir."}
    )
    eval_steps: int = field(
        default=0, metadata={"help": "Evaluate every N optimizer steps (0: at the end of each epoch)."}
    )
    early_stopping_patience: int = field(
        default=0, metadata={"help": "Stop after N evaluations without improvement (0 disables)."}
    )
    logging_steps: int = field(default=1, metadata={"help": "Log metrics every N optimizer steps."})
    report_to: list[str] = field(
        default_factory=list, metadata={"help": "Extra metric sinks: wandb (offline) and/or tensorboard."}
    )
    run_name: str | None = field(
        default=None, metadata={"help": "Run name for wandb / TensorBoard (default: output_dir's name)."}
    )
    progress_bar: bool = field(default=True, metadata={"help": "Show a tqdm progress bar."})

    def __post_init__(self) -> None:
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
        for name in self.unused_fields:
            if getattr(self, name) != defaults[name]:
                raise ConfigError(f"{name}: the {self.recipe} recipe does not use it; leave it out")
        if self.output_dir is None:
            self.output_dir = f"./output/{self.recipe}"
        if self.fp16:
            self.bf16 = False  # one autocast dtype; fp16 asked for explicitly wins over the bf16 default
        positive = (
            "num_epochs",
            "batch_size",
            "gradient_accumulation_steps",
            "max_length",
            "loss_chunk_size",
            "lora_r",
        )
        for name in positive:
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
        for name in ("save_steps", "eval_steps", "early_stopping_patience", "save_total_limit"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.early_stopping_patience and not self.eval_file:
            raise ConfigError("early_stopping_patience needs an eval_file")

    @property
    def effective_batch_size(self) -> int:
        return self.batch_size * self.gradient_accumulation_steps

    @classmethod
    def field_help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(
        cls: type[C], values: dict[str, Any], *, source: str = "config", lines: dict[str, int] | None = None
    ) -> C:
        """A config from ``values``; ``lines`` (a key's line in ``source``) places the errors.

        A key under its old name (``cls.renamed_fields``) still works, warning once."""
        try:
            values = rename_keys(values, cls.renamed_fields, cls.__name__)
        except TypeError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = [k for k in values if k not in names]
        if unknown:
            lines = lines or {}
            first = min((lines[k] for k in unknown if isinstance(k, str) and k in lines), default=None)
            where = source if first is None else f"{source}:{first}"
            shown = sorted(k for k in unknown if isinstance(k, str) and _IDENTIFIER.fullmatch(k))
            hidden = len(unknown) - len(shown)
            if not shown:
                raise ConfigError(f"{where}: {hidden} key(s) that are not {cls.__name__} field names")
            rest = f" and {hidden} key(s) that are not field names" if hidden else ""
            raise ConfigError(f"{where}: {len(unknown)} unknown {cls.__name__} field(s) {shown}{rest}")
        types = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        values = {k: _coerce(k, types[k], v, source) for k, v in values.items()}
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def from_yaml(cls: type[C], path: str | Path | None = None, **overrides: Any) -> C:
        """Fields from a YAML mapping, then ``overrides`` (``None`` values are ignored)."""
        values: dict[str, Any] = {}
        lines: dict[str, int] = {}
        if path is not None:
            values, lines = read_config_file(path)
        try:  # the file's old keys first: a new name among the overrides then wins over an old one in the file
            values = rename_keys(values, cls.renamed_fields, cls.__name__)
        except TypeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(values, source=str(path or "config"), lines=lines)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@renamed_fields(**OPTIMIZER_STEPS_RENAMED)
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
        super().__post_init__()
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


@renamed_fields(**OPTIMIZER_STEPS_RENAMED)
@dataclass
class DPOConfig(TrainConfig):
    """Direct preference optimisation on prompt / chosen / rejected pairs."""

    recipe: ClassVar[str] = "dpo"

    learning_rate: float = field(default=5e-6, metadata={"help": "Peak learning rate of AdamW."})
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


@renamed_fields(**OPTIMIZER_STEPS_RENAMED)
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
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate of AdamW."})
    batch_size: int = field(
        default=16,
        metadata={"help": "Records per micro-batch; a task's records are batched together, so their pairs meet."},
    )
    max_length: int = field(
        default=512, metadata={"help": "Tokens of a prefix the model reads; longer ones keep their end (newest steps)."}
    )
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


def algorithm_choices() -> dict[str, str]:
    """The registered policy-gradient algorithms and their summaries (the ``--algorithm`` choices)."""
    from agenttrainer.algorithms import summaries

    return summaries()


@renamed_fields(**OPTIMIZER_STEPS_RENAMED)
@dataclass
class GRPOConfig(TrainConfig):
    """Offline group relative policy optimisation over groups of scored trajectories."""

    recipe: ClassVar[str] = "grpo"  # online RL (``grpo --online``) too
    online: ClassVar[bool] = False  # the episodes are played during training (OnlineRLConfig)

    algorithm: str = field(
        default="grpo",
        metadata={
            "help": "Policy-gradient algorithm (agenttrainer.algorithms); offline, those that compare the "
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
    batch_size: int = field(default=2, metadata={"help": "Groups (tasks) per micro-batch per process."})
    learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate of AdamW."})
    group_size: int | None = field(
        default=None, metadata={"help": "Trajectories per group; records with another count raise (None: any)."}
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
            "help": "Optimizer updates per batch of groups (ratios differ from 1 after the first); save_steps counts optimizer steps."
        },
    )
    ref_model_name_or_path: str | None = field(
        default=None, metadata={"help": "Reference model for the KL (default: the initial policy)."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.group_size is not None and self.group_size < 2:
            raise ConfigError(f"group_size must be >= 2, got {self.group_size}")
        if not 0 < self.clip_eps < 1:
            raise ConfigError(f"clip_eps must be in (0, 1), got {self.clip_eps}")
        if self.clip_eps_high is not None and not self.clip_eps <= self.clip_eps_high < 1:
            raise ConfigError(f"clip_eps_high must be in [clip_eps, 1), got {self.clip_eps_high}")
        if self.kl_coef < 0:
            raise ConfigError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.grpo_iterations <= 0:
            raise ConfigError(f"grpo_iterations must be positive, got {self.grpo_iterations}")
        from agenttrainer.algorithms import get_algorithm
        from agenttrainer.algorithms.registry import NORMALIZATIONS

        try:
            algorithm = get_algorithm(self.algorithm)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not self.online and not algorithm.group_baseline:
            raise ConfigError(
                f"algorithm {self.algorithm} learns from episodes played during training, not from recorded groups: "
                "run it with --online (online: true)"
            )
        if self.loss_normalization not in (None, *NORMALIZATIONS):
            raise ConfigError(
                f"loss_normalization must be sequence, token or constant, got {self.loss_normalization!r}"
            )
        if self.eval_file or self.eval_steps:
            raise ConfigError("GRPO does not evaluate during training; run `knowlyr-trainer eval` on the saved model")


# Online, ``max_steps`` is the episode's step budget (formerly ``max_turns``); the optimizer steps
# are ``max_optimizer_steps`` as everywhere.
@renamed_fields(max_turns="max_steps")
@dataclass
class OnlineRLConfig(GRPOConfig):
    """Online RL: the policy acts in a live environment each iteration and learns from it.

    Each iteration samples ``tasks_per_iteration`` tasks from ``tasks_file``, plays
    ``group_size`` episodes of each with the current weights, scores them (environment outcome +
    process rewards - format penalties) and takes ``grpo_iterations`` optimizer steps on them.
    """

    online: ClassVar[bool] = True

    env_id: str | None = field(
        default=None, metadata={"help": "Registered environment id (knowlyr-core make()), e.g. knowlyr/retail."}
    )
    tasks_file: str | None = field(
        default=None, metadata={"help": "Tasks JSONL (knowlyr-hub tasks ...) the iterations sample from."}
    )
    env_kwargs: dict[str, Any] | None = field(
        default=None, metadata={"help": "Keyword arguments for the environment's constructor."}
    )
    group_size: int | None = field(default=4, metadata={"help": "Episodes per task per iteration."})
    tasks_per_iteration: int = field(default=4, metadata={"help": "Tasks sampled per iteration."})
    num_iterations: int = field(default=10, metadata={"help": "Rollout + update iterations."})
    max_steps: int = field(default=8, metadata={"help": "Online: steps (model answers) per episode before it is cut."})
    max_new_tokens: int = field(default=128, metadata={"help": "Tokens per model answer."})
    max_episode_tokens: int = field(
        default=2048, metadata={"help": "Token budget of an episode (prompt, answers, observations)."}
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of rollouts."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling of rollouts."})
    system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "System prompt of every episode (default: the model's prompt contract, else the task's "
            "metadata.system_prompt)."
        },
    )
    include_tools: bool | None = field(
        default=None,
        metadata={
            "help": "Render the environment's tool schemas with the chat template (default: the model's prompt "
            "contract, else yes)."
        },
    )
    closing_tool: str | None = field(
        default=None, metadata={"help": "Tool an answer without a tool call becomes (default: respond/finish/submit)."}
    )
    process_reward: str = field(
        default="rules",
        metadata={
            "help": "Per-step rewards: rules (knowlyr-reward's rule layer), learned:CHECKPOINT (a process reward model "
            "from knowlyr-trainer prm: each step's predicted chance of success), none, or module:function."
        },
    )
    process_reward_coef: float = field(
        default=0.2, metadata={"help": "Weight of the mean step reward in a trajectory's reward."}
    )
    format_penalty: float = field(
        default=0.1, metadata={"help": "Subtracted from a trajectory's reward per malformed tool call."}
    )
    skip_uniform_groups: bool = field(
        default=True,
        metadata={
            "help": "Leave groups whose episodes all scored the same out of the update (no signal; saves compute)."
        },
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "Refill an iteration: while fewer than tasks_per_iteration groups have rewards that differ, "
            "play further tasks (at most max_refill_rounds rounds); groups beyond that count and uniform "
            "groups are left out of the update."
        },
    )
    max_refill_rounds: int = field(
        default=2, metadata={"help": "Dynamic sampling: extra rollout rounds per iteration."}
    )
    task_sampling: str = field(
        default="sequential",
        metadata={
            "help": "sequential (every task once per pass, in a seeded order) or pass_rate (tasks drawn by their "
            "running pass rate: unseen ones and those between pass_rate_band are 10x likelier than the rest)."
        },
    )
    pass_rate_band: list[float] = field(
        default_factory=lambda: [0.2, 0.8],
        metadata={"help": "pass_rate sampling: the low and high pass rate between which a task still teaches."},
    )
    generation_url: str | None = field(
        default=None,
        metadata={
            "help": "OpenAI-compatible server to sample from (vLLM, SGLang, knowlyr-trainer serve); default in-process. "
            "Its API key is read from $KNOWLYR_GENERATION_API_KEY (or $KNOWLYR_SERVE_API_KEY)."
        },
    )
    served_model_name: str | None = field(
        default=None, metadata={"help": "Model name at generation_url (default: model_name_or_path)."}
    )
    push_weights: str = field(
        default="knowlyr",
        metadata={
            "help": "How updated weights reach generation_url: knowlyr (/load_weights), vllm (full weights reloaded "
            "in place: knowlyr-trainer serve --engine vllm --allow-weight-updates), vllm-lora, none."
        },
    )
    generation_batch_size: int | None = field(
        default=None, metadata={"help": "Episodes per in-process prefill forward (default: all live episodes)."}
    )
    reuse_cache: bool = field(
        default=True,
        metadata={
            "help": "In-process acting keeps each episode's KV cache across turns (only new tokens are prefilled); "
            "--no-reuse-cache prefills every turn's whole history again."
        },
    )
    clip_range: float | None = field(
        default=None, metadata={"help": "PPO's name for clip_eps; when set it overrides clip_eps."}
    )
    vf_coef: float = field(default=0.5, metadata={"help": "PPO: weight of the value loss."})
    gae_lambda: float = field(default=0.95, metadata={"help": "PPO: GAE lambda."})
    gamma: float = field(default=1.0, metadata={"help": "PPO: discount per model token."})
    num_epochs: int = field(
        default=1, metadata={"help": "Offline: passes over the training data (online RL runs num_iterations)."}
    )
    batch_size: int = field(
        default=8,
        metadata={"help": "Offline: groups per micro-batch per process; online: episodes per training micro-batch."},
    )

    def __post_init__(self) -> None:
        from agenttrainer.algorithms import algorithm_names, get_algorithm

        super().__post_init__()
        algorithm = get_algorithm(self.algorithm)
        if self.clip_range is not None:
            if not 0 < self.clip_range < 1:
                raise ConfigError(f"clip_range must be in (0, 1), got {self.clip_range}")
            self.clip_eps = self.clip_range
        if self.group_size is None or self.group_size < 1:
            raise ConfigError(f"group_size must be >= 1, got {self.group_size}")
        if not algorithm.value_head and self.group_size < 2:
            raise ConfigError(f"{self.algorithm} compares episodes of a task: group_size must be >= 2")
        for name in ("tasks_per_iteration", "num_iterations", "max_steps", "max_new_tokens", "max_episode_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_episode_tokens <= self.max_new_tokens:
            raise ConfigError("max_episode_tokens must exceed max_new_tokens (room for the prompt)")
        if not 0 <= self.temperature <= 2 or not 0 < self.top_p <= 1:
            raise ConfigError("temperature must be in [0, 2] and top_p in (0, 1]")
        if self.gradient_accumulation_steps != 1:
            raise ConfigError(
                "online RL accumulates gradients over an iteration's micro-batches of batch_size episodes; "
                "leave gradient_accumulation_steps at 1"
            )
        if self.push_weights not in ("knowlyr", "vllm", "vllm-lora", "none"):
            raise ConfigError(f"push_weights must be knowlyr, vllm, vllm-lora or none, got {self.push_weights!r}")
        if self.push_weights == "vllm-lora" and self.generation_url and not self.use_lora:
            raise ConfigError("push_weights=vllm-lora sends LoRA adapters: set use_lora")
        if self.push_weights == "vllm" and self.generation_url and self.use_lora:
            raise ConfigError("push_weights=vllm reloads full weights, LoRA pushes only the adapter: use vllm-lora")
        if self.vf_coef < 0 or not 0 <= self.gae_lambda <= 1 or not 0 < self.gamma <= 1:
            raise ConfigError("vf_coef must be >= 0, gae_lambda in [0, 1], gamma in (0, 1]")
        if not 0 <= self.max_refill_rounds <= 9:  # refill rounds take episode seeds 1000 apart within an iteration
            raise ConfigError(f"max_refill_rounds must be in [0, 9], got {self.max_refill_rounds}")
        if self.dynamic_sampling and not algorithm.group_baseline:
            raise ConfigError(
                f"dynamic_sampling keeps groups whose rewards differ; {self.algorithm} does not compare the episodes "
                f"of a group (use {', '.join(algorithm_names(offline=True))})"
            )
        if self.task_sampling not in ("sequential", "pass_rate"):
            raise ConfigError(f"task_sampling must be sequential or pass_rate, got {self.task_sampling!r}")
        try:
            low, high = (float(x) for x in self.pass_rate_band)
        except (TypeError, ValueError):
            low, high = -1.0, -1.0
        if not 0 <= low < high <= 1:
            raise ConfigError(f"pass_rate_band must be two rates 0 <= low < high <= 1, got {self.pass_rate_band!r}")
        self.pass_rate_band = [low, high]
        if self.process_reward not in ("rules", "none") and ":" not in self.process_reward:
            raise ConfigError(
                f"process_reward must be rules, learned:CHECKPOINT, none or module:function, got {self.process_reward!r}"
            )
        if self.process_reward.startswith("learned:") and not self.process_reward.removeprefix("learned:"):
            raise ConfigError("process_reward learned: needs the checkpoint directory, e.g. learned:runs/prm/final")
