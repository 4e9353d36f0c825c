"""Training configuration: one module per recipe on a small shared base, every field documented once.

- ``base``: ``Config``, what every config shares (its keys, ``from_dict`` / ``from_yaml`` / ``to_dict``);
- ``files``: ``read_config_file`` and ``ConfigError``;
- ``run``: ``RunConfig`` (the fields of every training run) and ``TrainConfig`` (a run over a data file);
- ``sft``, ``dpo``, ``grpo`` (offline), ``online`` (online RL), ``prm``, ``retriever``: one config each.

Load from YAML with ``SFTConfig.from_yaml(path, **overrides)``; the CLI passes its flags as
overrides so ``--config`` sets defaults and flags win. A config file and the command line name
every field flat, also those kept in a group (``use_lora`` of ``config.lora``, ``temperature`` of
``OnlineRLConfig.sampling``); in Python, ``from_dict`` takes flat keys too. Unknown keys and
out-of-range values raise :class:`ConfigError` with a one-line message naming the file and line; it
never echoes the file's text (a config path may come from an MCP client), only field names and
short plain values. ``max_steps`` counts an episode's steps (online RL); the optimizer steps of any
run are ``max_optimizer_steps``.

Example:
    >>> config = SFTConfig.from_dict({"train_file": "sft.jsonl", "use_lora": True, "max_optimizer_steps": 10})
    >>> config.lora.use_lora, config.max_optimizer_steps, config.to_dict()["use_lora"]
    (True, 10, True)
"""

from agenttrainer.config.base import Config
from agenttrainer.config.dpo import DPOConfig
from agenttrainer.config.files import ConfigError, read_config_file
from agenttrainer.config.grpo import GRPOConfig
from agenttrainer.config.online import OnlineRLConfig
from agenttrainer.config.prm import PRMConfig
from agenttrainer.config.retriever import RetrieverConfig
from agenttrainer.config.run import RunConfig, TrainConfig
from agenttrainer.config.sft import SFTConfig

__all__ = [
    # the base
    "Config",
    "ConfigError",
    "RunConfig",
    "TrainConfig",
    "read_config_file",
    # one per recipe (their groups of fields are in the recipe's module: config.online.Sampling, ...)
    "DPOConfig",
    "GRPOConfig",
    "OnlineRLConfig",
    "PRMConfig",
    "RetrieverConfig",
    "SFTConfig",
]
