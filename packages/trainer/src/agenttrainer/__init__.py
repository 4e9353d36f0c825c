"""knowlyr-trainer: pure-PyTorch SFT / DPO / GRPO for LLM tool-use agents.

Example:
    >>> from agenttrainer import SFTConfig
    >>> SFTConfig(train_file="sft.jsonl", mask_observations=True).agent_format
    True
"""

# ruff: noqa: E402 -- the knowlyr siblings must be checked before anything is imported from them
from importlib import metadata as _metadata

__version__ = _metadata.version("knowlyr-trainer")
try:
    from knowlyrcore.origin import check_siblings
except ImportError as exc:  # the other project's knowlyr-core (PyPI) has no knowlyrcore.origin
    raise ImportError(
        "knowlyr-trainer needs the knowlyr checkout's knowlyr-core, and this one has no knowlyrcore.origin (the "
        "knowlyr-* packages on PyPI are another project); fix: pip install ./packages/core (docs/install.md)"
    ) from exc

check_siblings("knowlyr-trainer")

from agenttrainer.batch_policy import LocalBatchPolicy
from agenttrainer.config import ConfigError, DPOConfig, GRPOConfig, OnlineRLConfig, SFTConfig
from agenttrainer.data import DataError
from agenttrainer.eval import evaluate_model
from agenttrainer.inference import AgentInference
from agenttrainer.models import LORA_PRESETS, apply_lora, create_lora_config, load_model_and_tokenizer, save_model
from agenttrainer.trainers.dpo import DPOTrainer
from agenttrainer.trainers.grpo import GRPOTrainer
from agenttrainer.trainers.sft import SFTTrainer
from agenttrainer.wrapper import GRPOTrainerWrapper, SFTTrainerWrapper

__all__ = [
    # configuration
    "ConfigError",
    "DPOConfig",
    "GRPOConfig",
    "OnlineRLConfig",
    "SFTConfig",
    # trainers
    "DPOTrainer",
    "GRPOTrainer",
    "SFTTrainer",
    # seed-002 wrappers
    "GRPOTrainerWrapper",
    "SFTTrainerWrapper",
    # evaluation and data
    "DataError",
    "evaluate_model",
    # models, LoRA, inference (agenttrainer.models / agenttrainer.inference / agenttrainer.batch_policy)
    "LORA_PRESETS",
    "AgentInference",
    "LocalBatchPolicy",
    "apply_lora",
    "create_lora_config",
    "load_model_and_tokenizer",
    "save_model",
]
