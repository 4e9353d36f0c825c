"""Content hashes of models: what a cache of model outputs is keyed by (never a path or an mtime).

``directory_fingerprint`` is a streaming sha256 of a model directory's config and weight files;
``weights_fingerprint`` a sha256 of a module's tensors in memory. A file is re-read only when
its size or modification time changed since it was last hashed in this process.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import torch

# What decides a checkpoint's outputs: its config and weight files (a model or a LoRA adapter).
CONTENT_FILES = ("config.json", "adapter_config.json", "*.safetensors", "*.bin")


def directory_fingerprint(path: str | Path) -> str:
    """A sha256 of the config and weight files of the model directory ``path`` (names and bytes)."""
    path = Path(path)
    files = sorted({f for pattern in CONTENT_FILES for f in path.glob(pattern) if f.is_file()})
    return _hash_files(tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@functools.cache
def _hash_files(states: tuple[tuple[str, int, int], ...]) -> str:
    """Memoised by (file, size, mtime) only so that an unchanged file is read once per process;
    the hash itself is of the names and bytes."""
    digest = hashlib.sha256()
    for name, _size, _mtime in states:
        digest.update(Path(name).name.encode() + b"\0")
        with open(name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def weights_fingerprint(module: torch.nn.Module) -> str:
    """A sha256 of ``module``'s parameters and buffers (names, dtypes, shapes, values)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        if t.numel():
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
