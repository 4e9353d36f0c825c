"""Seed 003's ``sage.tools.agent_training`` names over knowlyr-trainer (and knowlyr-reward).

===================================  ===============================================================
seed 003 name                        knowlyr API
===================================  ===============================================================
``AgentSFTConfig``                   :class:`~agenttrainer.config.SFTConfig` via ``to_sft_config()``:
                                     ``base_model`` -> ``model_name_or_path``,
                                     ``gradient_accumulation`` -> ``gradient_accumulation_steps``,
                                     LoRA, coreset, replay and ``task_weights`` fields 1:1
``train_data`` / ``dev_data``        ``"<suite>:<split>"`` (expert dialogs of a knowlyr task suite,
                                     e.g. ``retail:train``) or a JSONL path; SAGE's ``agent_sft``
                                     source does not exist here (one-line error naming these)
``AgentSFTTrainer``,                 :class:`~agenttrainer.trainers.sft.SFTTrainer`;
``AgentLoRATrainer``                 ``prepare_datasets()`` writes and reads the data (replay
                                     mixed in); coreset selection runs in ``train()`` (it needs
                                     the model's per-example losses)
``RLTrainingConfig``                 ``to_knowlyr_config()``: ``dpo`` -> ``DPOConfig`` (``beta``,
                                     ``reference_free``, ``label_smoothing``, ``loss_type``);
                                     ``ppo`` -> ``OnlineRLConfig(algorithm="ppo")`` (``kl_coef``,
                                     ``clip_range``, ``vf_coef``; ``num_rollouts`` -> episodes
                                     per iteration = ``tasks_per_iteration * group_size``
                                     (``group_size`` 2 unless given);
                                     ``chunk_size`` -> ``batch_size``); ``grpo`` ->
                                     ``OnlineRLConfig(algorithm="grpo")`` (``group_size``;
                                     ``beta`` -> ``kl_coef``; ``use_advantage=True`` is GRPO's
                                     group-normalised advantage, ``False`` is refused)
``load_in_4bit`` / ``load_in_8bit``  refused with one line (bitsandbytes needs CUDA; the
                                     recipes train bf16/fp32 weights): use ``use_lora`` and
                                     ``gradient_checkpointing``
``AgentRewardConfig``,               :mod:`agentreward.seed003` (re-exported here when
``AgentRewardModel``                 knowlyr-reward is installed)
===================================  ===============================================================

Names of seed 003 with no counterpart here (``AgentRLTrainer``, ``AgentTrainingEvaluator``,
``AgentSFTFormatter``, ``AgentTrainingUsage``) raise ``ImportError`` with one line naming the
knowlyr equivalent.

Example:
    >>> AgentSFTConfig(base_model="smollm2-135m", gradient_accumulation=2).to_sft_config("t.jsonl").gradient_accumulation_steps
    2
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agenttrainer.config import ConfigError, DPOConfig, OnlineRLConfig, SFTConfig

__all__ = ["AgentLoRATrainer", "AgentSFTConfig", "AgentSFTTrainer", "RLTrainingConfig"]

_QUANTISED = (
    "{name}=True is not supported: knowlyr-trainer trains bf16/fp32 weights and bitsandbytes needs CUDA; "
    "save memory with use_lora=True and gradient_checkpointing=True"
)


def _check_quantisation(config: Any) -> None:
    for name in ("load_in_4bit", "load_in_8bit"):
        if getattr(config, name):
            raise ConfigError(_QUANTISED.format(name=name))


def _data_file(spec: str, path: Path, max_samples: int, seed: int) -> str:
    """``spec`` as a JSONL path: a file as is, ``suite:split`` written as expert dialogs to ``path``."""
    if Path(spec).is_file() or spec.endswith(".jsonl"):
        return spec
    suite, _, split = spec.partition(":")
    if suite == "agent_sft" or not split:
        raise ConfigError(
            f"data {spec!r}: SAGE's data sources do not exist here; use '<suite>:<split>' (e.g. 'retail:train') "
            "or a JSONL path"
        )
    from agenttrainer.compat.hello_agents_rl import create_sft_dataset
    from agenttrainer.wrapper import _write_jsonl

    return str(_write_jsonl(create_sft_dataset(split, max_samples, suite=suite, seed=seed), path))


@dataclass
class AgentSFTConfig:
    """Seed 003's SFT configuration (defaults as in seed 003 except the model and the data)."""

    train_data: str = "retail:train"
    dev_data: str | None = None
    max_samples: int = 1000  # dialogs drawn from a suite spec
    task_weights: dict[str, float] | None = None  # resampling by task_type (the suite's templates)
    base_model: str = "smollm2-135m"
    max_length: int = 4096
    lora_r: int = 64
    lora_alpha: int = 128
    lora_dropout: float = 0.05
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    num_epochs: int = 3
    batch_size: int = 4
    gradient_accumulation: int = 8
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    lr_scheduler: str = "cosine"
    use_coreset_selection: bool = False
    coreset_target_size: int = 1000
    coreset_strategy: str = "hybrid"
    use_online_continual: bool = False
    continual_buffer_size: int = 4096
    continual_replay_ratio: float = 0.3
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    use_lora: bool = True
    output_dir: str = "./output/agent_sft"
    seed: int = 42
    #: Any other SFTConfig field (bf16, fp16, max_steps, progress_bar, ...).
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_quantisation(self)
        self.to_sft_config(None)  # every value checked now, by SFTConfig's own rules

    def to_sft_config(self, train_file: str | None, eval_file: str | None = None) -> SFTConfig:
        same = [
            "max_length",
            "lora_r",
            "lora_alpha",
            "lora_dropout",
            "num_epochs",
            "batch_size",
            "learning_rate",
            "warmup_ratio",
            "lr_scheduler",
            "use_coreset_selection",
            "coreset_target_size",
            "coreset_strategy",
            "use_online_continual",
            "continual_buffer_size",
            "continual_replay_ratio",
            "use_lora",
            "output_dir",
            "seed",
            "task_weights",
        ]
        return SFTConfig.from_dict(
            {
                **{name: getattr(self, name) for name in same},
                "model_name_or_path": self.base_model,
                "train_file": train_file,
                "eval_file": eval_file,
                "gradient_accumulation_steps": self.gradient_accumulation,
                "lora_target_modules": list(self.lora_target_modules),
                **self.extra,
            },
            source="AgentSFTConfig",
        )


class AgentSFTTrainer:
    """Seed 003's SFT trainer: ``prepare_datasets()``, ``train()``, ``save_model(path)``, ``model``."""

    def __init__(self, config: AgentSFTConfig, *, model: Any = None, tokenizer: Any = None):
        from agenttrainer.trainers.sft import SFTTrainer

        self.agent_config = config
        self.output_dir = Path(config.output_dir)
        self.trainer = SFTTrainer(config.to_sft_config(None), model=model, tokenizer=tokenizer)
        self.config = self.trainer.config

    @property
    def model(self) -> Any:
        return self.trainer.model

    def prepare_datasets(self) -> dict[str, int]:
        """Write and read the training (and dev) data; the replay buffer's samples are mixed in.

        Returns the number of new and replayed conversations."""
        c = self.agent_config
        self.config.train_file = _data_file(c.train_data, self.output_dir / "train.jsonl", c.max_samples, c.seed)
        if c.dev_data:
            self.config.eval_file = _data_file(c.dev_data, self.output_dir / "dev.jsonl", c.max_samples, c.seed + 1)
        self.trainer.data = self.trainer.read_data()
        return {"train": len(self.trainer.data["train"]), "replay": len(self.trainer.data["replay"])}

    def train(self) -> dict[str, Any]:
        if self.trainer.data is None:
            self.prepare_datasets()
        return self.trainer.train()

    def save_model(self, path: str | Path) -> Path:
        return self.trainer.save_model(path)


#: Seed 003's LoRA trainer is the same trainer (``AgentSFTConfig.use_lora`` defaults to True).
AgentLoRATrainer = AgentSFTTrainer


@dataclass
class RLTrainingConfig:
    """Seed 003's RL configuration; ``to_knowlyr_config()`` gives the config of the real trainer."""

    algorithm: Literal["dpo", "ppo", "grpo"] = "dpo"
    dpo_config: dict[str, Any] = field(
        default_factory=lambda: {"beta": 0.1, "reference_free": False, "label_smoothing": 0.0, "loss_type": "sigmoid"}
    )
    ppo_config: dict[str, Any] = field(
        default_factory=lambda: {
            "kl_coef": 0.02,
            "clip_range": 0.2,
            "vf_coef": 0.5,
            "num_rollouts": 128,
            "chunk_size": 64,
        }
    )
    grpo_config: dict[str, Any] = field(default_factory=lambda: {"group_size": 4, "beta": 0.1, "use_advantage": True})
    load_in_4bit: bool = False
    load_in_8bit: bool = False

    def __post_init__(self) -> None:
        if self.algorithm not in ("dpo", "ppo", "grpo"):
            raise ConfigError(f"algorithm must be dpo, ppo or grpo, got {self.algorithm!r}")
        _check_quantisation(self)
        self.to_knowlyr_config()

    def to_knowlyr_config(self, **fields: Any) -> DPOConfig | OnlineRLConfig:
        """``DPOConfig`` (dpo) or ``OnlineRLConfig`` (ppo, grpo); ``fields`` set any other field."""
        if self.algorithm == "dpo":
            return DPOConfig.from_dict({**self.dpo_config, **fields}, source="RLTrainingConfig.dpo_config")
        if self.algorithm == "ppo":
            ppo = dict(self.ppo_config)
            rollouts, chunk = ppo.pop("num_rollouts", 128), ppo.pop("chunk_size", 64)
            # episodes per task: GRPOConfig refuses 1 even for ppo, which does not compare them
            group = ppo.pop("group_size", 2)
            if rollouts % group:
                raise ConfigError(f"num_rollouts ({rollouts}) must be a multiple of group_size ({group})")
            mapped = {"algorithm": "ppo", "group_size": group, "tasks_per_iteration": rollouts // group}
            return OnlineRLConfig.from_dict(
                {**mapped, "batch_size": chunk, **ppo, **fields}, source="RLTrainingConfig.ppo_config"
            )
        grpo = dict(self.grpo_config)
        if not grpo.pop("use_advantage", True):
            raise ConfigError(
                "use_advantage=False (raw rewards as advantages) is not supported; use algorithm 'rloo' or 'dr_grpo' "
                "(OnlineRLConfig.algorithm)"
            )
        if "beta" in grpo:
            grpo["kl_coef"] = grpo.pop("beta")
        return OnlineRLConfig.from_dict({"algorithm": "grpo", **grpo, **fields}, source="RLTrainingConfig.grpo_config")


try:  # the reward half of seed 003 lives in knowlyr-reward (the ``online`` extra)
    from agentreward.seed003 import AgentRewardConfig, AgentRewardModel

    __all__ += ["AgentRewardConfig", "AgentRewardModel"]
except ImportError:
    pass

_ELSEWHERE = {
    "AgentRLTrainer": "DPOTrainer(RLTrainingConfig(algorithm='dpo').to_knowlyr_config(...)) on pairs from "
    "agentreward.build_preference_pairs, or OnlineRLTrainer for ppo/grpo",
    "AgentTrainingEvaluator": "agenttrainer.evaluate_model (loss/accuracy) or `knowlyr-hub evaluate` (task success "
    "and tool-selection metrics in live environments)",
    "AgentSFTFormatter": "agenttrainer.compat.hello_agents_rl.create_sft_dataset (chat records with <tool_call> blocks)",
    "AgentTrainingUsage": "agenttrainer.compat.hello_agents_rl.create_sft_dataset / create_rl_dataset",
    "AgentRewardConfig": "agentreward.seed003.AgentRewardConfig (pip install knowlyr-reward)",
    "AgentRewardModel": "agentreward.seed003.AgentRewardModel (pip install knowlyr-reward)",
}


def __getattr__(name: str) -> Any:
    if name in _ELSEWHERE:
        raise ImportError(f"{name} is not provided by agenttrainer.compat.agent_training; use {_ELSEWHERE[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
