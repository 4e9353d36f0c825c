"""The frozen reference model's log-probs for DPO and GRPO, computed once and cached on disk.

The cache file (``<output_dir>/<name>.pt``) is keyed by a hash of the token ids and the reference
model's name, so a resumed run reuses it and a changed dataset or reference recomputes it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agenttrainer.config import TrainConfig
from agenttrainer.models.attention import HiddenStates


def cached_reference_logps(config: TrainConfig, accelerator: Any, policy: Any, name: str, token_ids: list[Any],
                           compute: Callable[[Any], Any]) -> Any:  # fmt: skip
    """``compute(reference_model)``, or its cached result for the same ``token_ids`` and reference.

    The reference is ``config.ref_model_name_or_path`` when set, else ``policy`` itself (called
    before the first update, it is the starting policy). Only the main process writes the cache,
    atomically.
    """
    reference_name = config.ref_model_name_or_path or config.model_name_or_path
    key = hashlib.sha256(repr([*token_ids, reference_name]).encode()).hexdigest()
    cache = Path(config.output_dir) / f"{name}.pt"
    if cache.exists():
        saved = torch.load(cache)
        if saved["key"] == key:
            return saved["logps"]
    if config.ref_model_name_or_path:
        from agenttrainer.models import load_model_and_tokenizer

        ref = HiddenStates(load_model_and_tokenizer(config.ref_model_name_or_path, torch_dtype=torch.float32)[0])
        ref.to(accelerator.device)
    else:
        ref = policy
    ref.eval()
    logps = compute(ref)
    if accelerator.is_main_process:
        cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"key": key, "logps": logps}, cache.with_suffix(".tmp"))
        os.replace(cache.with_suffix(".tmp"), cache)
    return logps
