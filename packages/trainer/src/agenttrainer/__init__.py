"""knowlyr-trainer: pure-PyTorch SFT / DPO / GRPO for LLM tool-use agents.

Example:
    >>> from agenttrainer import SFTConfig
    >>> SFTConfig(train_file="sft.jsonl", mask_observations=True).agent_format
    True
"""

# ruff: noqa: E402 -- knowlyr-core must be checked before anything is imported from it
from importlib import metadata as _metadata

__version__ = _metadata.version("knowlyr-trainer")
# The other project's knowlyr-core (PyPI) has no knowlyrcore.origin, so core is checked here.
if _metadata.version("knowlyr-core") != __version__:
    raise ImportError(
        f"knowlyr-trainer {__version__} needs knowlyr-core {__version__}, found knowlyr-core "
        f"{_metadata.version('knowlyr-core')} (the knowlyr-* packages on PyPI are another project); "
        "fix: pip install ./packages/core from the knowlyr checkout, or pip install --no-index "
        f"--find-links WHEELHOUSE knowlyr-core=={__version__} (docs/install.md)"
    )

from knowlyrcore.origin import check_siblings

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
