"""knowlyr-trainer: pure-PyTorch SFT / DPO / GRPO for LLM tool-use agents, and process reward models.

Example:
    >>> from agenttrainer import SFTConfig
    >>> SFTConfig(train_file="sft.jsonl", mask_observations=True).agent_format
    True
"""

from agenttrainer._siblings import __version__ as __version__  # first: knowlyr-core must be ours
from agenttrainer.acting import AgentInference, TokenPolicy
from agenttrainer.config import ConfigError, DPOConfig, GRPOConfig, OnlineRLConfig, PRMConfig, SFTConfig
from agenttrainer.data import DataError
from agenttrainer.eval import evaluate_model
from agenttrainer.models import LORA_PRESETS, apply_lora, create_lora_config, load_model_and_tokenizer, save_model
from agenttrainer.trainers.dpo import DPOTrainer
from agenttrainer.trainers.grpo import GRPOTrainer
from agenttrainer.trainers.prm import PRMTrainer
from agenttrainer.trainers.sft import SFTTrainer
from agenttrainer.wrapper import GRPOTrainerWrapper, SFTTrainerWrapper

__all__ = [
    # configuration
    "ConfigError",
    "DPOConfig",
    "GRPOConfig",
    "OnlineRLConfig",
    "PRMConfig",
    "SFTConfig",
    # trainers
    "DPOTrainer",
    "GRPOTrainer",
    "PRMTrainer",
    "SFTTrainer",
    # seed-002 wrappers
    "GRPOTrainerWrapper",
    "SFTTrainerWrapper",
    # evaluation and data
    "DataError",
    "evaluate_model",
    # models, LoRA, acting (agenttrainer.models / agenttrainer.acting)
    "LORA_PRESETS",
    "AgentInference",
    "TokenPolicy",
    "apply_lora",
    "create_lora_config",
    "load_model_and_tokenizer",
    "save_model",
]
