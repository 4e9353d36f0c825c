"""The frozen reference model's log-probs for DPO and GRPO, computed once and cached on disk.

The cache file (``<output_dir>/<name>.pt``) is keyed by a hash of the token ids and of the
reference model's *content*, so a resumed run reuses it and a changed dataset or a different
model recomputes it, even one saved later at the same path. The content is the reference's
weights: for ``ref_model_name_or_path``, a streaming sha256 of its config and weight files
(hashed once per file state in a process); for the policy as its own reference, a sha256 of its
parameters in memory before the first update. A Hub id that is not on disk is keyed by its name.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agenttrainer.checkpoints import load_plain
from agenttrainer.config import TrainConfig
from agenttrainer.fingerprint import directory_fingerprint, weights_fingerprint
from agenttrainer.models.attention import HiddenStates


def reference_fingerprint(config: TrainConfig, policy: Any) -> str:
    """What the reference's log-probs depend on: its weights (see the module docstring)."""
    name = getattr(config, "ref_model_name_or_path", None)
    if not name:
        return "policy:" + weights_fingerprint(policy)
    from agenttrainer.models import resolve_model_path

    path = resolve_model_path(name)
    return "files:" + directory_fingerprint(path) if Path(path).is_dir() else "hub:" + name


def cached_reference_logps(
    config: TrainConfig, accelerator: Any, policy: Any, name: str, token_ids: list[Any], compute: Callable[[Any], Any]
) -> Any:
    """``compute(reference_model)``, or its cached result for the same ``token_ids`` and reference.

    The reference is ``config.ref_model_name_or_path`` when set, else ``policy`` itself (called
    before the first update, it is the starting policy). Only the main process writes the cache,
    atomically.
    """
    key = hashlib.sha256(repr([*token_ids, reference_fingerprint(config, policy)]).encode()).hexdigest()
    cache = Path(config.output_dir) / f"{name}.pt"
    if cache.exists():
        saved = load_plain(cache)  # a run directory may come from elsewhere: tensors and plain values only
        if isinstance(saved, dict) and saved.get("key") == key:
            return saved["logps"]
    if getattr(config, "ref_model_name_or_path", None):
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
