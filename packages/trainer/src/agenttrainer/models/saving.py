"""Save a (possibly LoRA-wrapped) model and its tokenizer as a loadable checkpoint directory.

``save_model`` writes safetensors weights, config, generation config, tokenizer (with its
chat template) and the prompt contract the model carries (``prompt_contract.py``). With ``merge_lora=True`` (default) a LoRA model is merged into a plain model on a
copy, so the caller's training model keeps its adapters; with ``merge_lora=False`` only the
adapter is written and ``load_model_and_tokenizer`` re-attaches it to the base on load.

Writes are atomic: everything goes to a temp directory next to ``output_dir``; a new directory is
renamed into place at once, an existing one gets each file replaced with ``os.replace`` (other
files there, e.g. a trainer's state, are left alone; stale weights of the other kind are removed).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agenttrainer.models.prompt_contract import CONTRACT_FILE, contract_of, write_contract

# Files that describe the weights; when overwriting a checkpoint, ones the new save did not
# produce are stale (e.g. an old adapter next to new merged weights) and are removed.
_WEIGHT_FILES = (
    "adapter_config.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    CONTRACT_FILE,  # a checkpoint without a prompt contract must not keep an older one
)


def is_peft(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def save_model(model: Any, tokenizer: Any, output_dir: str | os.PathLike, *, merge_lora: bool = True) -> Path:
    """Write ``model`` + ``tokenizer`` to ``output_dir``; returns the directory."""
    output_dir = Path(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    to_save = model
    if is_peft(model) and merge_lora:
        if getattr(model, "is_loaded_in_4bit", False):
            raise ValueError("cannot merge LoRA into 4-bit weights; save with merge_lora=False (adapter only)")
        # merge_and_unload rewrites modules in place; work on a copy so training can continue.
        to_save = copy.deepcopy(model).merge_and_unload()

    tmp = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.tmp-", dir=output_dir.parent))
    try:
        to_save.save_pretrained(tmp)
        _enable_kv_cache(tmp / "config.json")
        tokenizer.save_pretrained(tmp)
        contract = contract_of(model)
        if contract is not None:
            write_contract(tmp, contract)
        if output_dir.exists():
            _replace_files(tmp, output_dir)
            shutil.rmtree(tmp)
        else:
            tmp.chmod(0o755)  # mkdtemp makes it owner-only
            os.rename(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output_dir


def _enable_kv_cache(config_file: Path) -> None:
    """Gradient checkpointing turns ``use_cache`` off on the live model; a saved checkpoint is
    for inference too, where generating without the KV cache would be needlessly slow."""
    if not config_file.is_file():  # adapter-only save
        return
    config = json.loads(config_file.read_text())
    if config.get("use_cache") is False:
        config["use_cache"] = True
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _replace_files(src: Path, dst: Path) -> None:
    written = {p.name for p in src.iterdir()}
    for stale in _WEIGHT_FILES:
        if stale not in written:
            (dst / stale).unlink(missing_ok=True)
    for stale_shard in dst.glob("model-*-of-*.safetensors"):
        if stale_shard.name not in written:
            stale_shard.unlink()
    # config.json last: a reader that finds the new config also finds the new weights.
    for name in sorted(written, key=lambda n: n == "config.json"):
        os.replace(src / name, dst / name)
