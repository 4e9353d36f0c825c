"""Models: resolve names, load, LoRA, save, and tiny test models.

``from agenttrainer.models import load_model_and_tokenizer, apply_lora, save_model`` is what
the trainers, the inference bridge and the server use.
"""

from agenttrainer.models.aliases import MODEL_ALIASES, cache_root, resolve_model_path
from agenttrainer.models.chat_template import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, TOOL_CHAT_TEMPLATE
from agenttrainer.models.errors import ModelLoadError
from agenttrainer.models.loading import load_model_and_tokenizer, load_tokenizer
from agenttrainer.models.lora import LORA_PRESETS, apply_lora, create_lora_config
from agenttrainer.models.prompt_contract import PromptContract, attach_contract, contract_of, read_contract
from agenttrainer.models.saving import save_model
from agenttrainer.models.tiny import build_tiny_model, overfit_tiny_model

__all__ = [
    # names and paths
    "MODEL_ALIASES",
    "cache_root",
    "resolve_model_path",
    # loading
    "ModelLoadError",
    "load_model_and_tokenizer",
    "load_tokenizer",
    # LoRA
    "LORA_PRESETS",
    "apply_lora",
    "create_lora_config",
    # saving
    "save_model",
    # the prompt a checkpoint was trained with
    "PromptContract",
    "attach_contract",
    "contract_of",
    "read_contract",
    # tests
    "build_tiny_model",
    "overfit_tiny_model",
    # chat template
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "TOOL_CHAT_TEMPLATE",
]
