"""Training checkpoints: ``checkpoint-<step>`` directories to resume from and to load as models.

A checkpoint holds what resuming needs (trainable weights, optimizer, scheduler, RNG states,
trainer state) and, when the recipe passes its model, the model itself in ``save_pretrained``
form, so every checkpoint is also a model directory. Weights are stored once: a full fine-tune's
trainable weights are read back from the model's safetensors, and ``trainable.pt`` keeps only
what the model files do not hold (a PPO value head; a LoRA adapter, which is small). Writes are
atomic (temp directory, fsync, rename); ``save_total_limit`` prunes the oldest.

A checkpoint may come from elsewhere (a download, a shared drive, an MCP client's
``resume_from_checkpoint``), and unpickling a file runs whatever code it names. So every file is
read with ``torch.load(weights_only=True)``: tensors and plain values (dicts, lists, tuples,
numbers, strings) only, which is all a checkpoint written here holds. Anything else is refused
in one line naming the file (``CheckpointError``), before any of it runs.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agenttrainer.config import RunConfig
from agenttrainer.errors import CheckpointError
from agenttrainer.models.saving import save_model

CHECKPOINT_PREFIX = "checkpoint-"


def trainable_state(model: nn.Module, skip: Any = ()) -> dict[str, torch.Tensor]:
    """The trainable parameters by name, except those in ``skip`` (parameter objects)."""
    skipped = {id(p) for p in skip}
    return {
        n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad and id(p) not in skipped
    }


def _in_model_files(lm: Any) -> list[nn.Parameter]:
    """The parameters ``save_pretrained`` writes in full for ``lm`` (none for a LoRA model, whose
    files hold the adapter under other names)."""
    from agenttrainer.models.saving import is_peft

    return [] if lm is None or is_peft(lm) else list(lm.parameters())


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "torch": torch.get_rng_state()}


def save_checkpoint(
    accelerator: Any,
    model: nn.Module,
    optimizer: Any,
    scheduler: Any,
    config: RunConfig,
    state: dict[str, Any],
    *,
    lm: Any = None,
    tokenizer: Any = None,
) -> Path:
    """Write ``checkpoint-<step>`` atomically: a temp directory renamed into place when complete.

    Holds the trainable weights, optimizer, scheduler, each process's RNG state and the trainer
    state (step, data position, best eval) for resuming. Given the causal LM ``lm`` and its
    ``tokenizer``, it is also a model directory: ``save_pretrained`` weights (for LoRA the adapter,
    loaded onto its base) and tokenizer, so ``load_model_and_tokenizer(checkpoint)`` and
    ``knowlyr-trainer eval --model checkpoint-N`` work. Old checkpoints beyond
    ``save_total_limit`` are removed.
    """
    root = Path(config.output_dir)
    final = root / f"{CHECKPOINT_PREFIX}{state['global_step']}"
    tmp = root / f".tmp-{CHECKPOINT_PREFIX}{state['global_step']}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    torch.save(_rng_state(), tmp / f"rng-{accelerator.process_index}.pt")
    if accelerator.is_main_process:
        torch.save(trainable_state(accelerator.unwrap_model(model), skip=_in_model_files(lm)), tmp / "trainable.pt")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
        if lm is not None:
            save_model(lm, tokenizer, tmp, merge_lora=False)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        for f in tmp.iterdir():  # data reaches the disk before the rename makes it visible
            if not f.is_file():
                continue
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        kept = sorted(list_checkpoints(root), key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]))
        for old in kept[: max(len(kept) - config.save_total_limit, 0)] if config.save_total_limit else []:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def list_checkpoints(root: Path) -> list[Path]:
    return [
        p
        for p in root.glob(f"{CHECKPOINT_PREFIX}*")
        if p.is_dir() and p.name[len(CHECKPOINT_PREFIX) :].isdigit() and (p / "trainer_state.json").is_file()
    ]


def resolve_checkpoint(config: RunConfig) -> Path | None:
    if not config.resume_from_checkpoint:
        return None
    if config.resume_from_checkpoint == "latest":
        found = list_checkpoints(Path(config.output_dir))
        return max(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :])) if found else None
    path = Path(config.resume_from_checkpoint)
    if not (path / "trainer_state.json").is_file():
        raise FileNotFoundError(f"resume_from_checkpoint={path}: not a checkpoint (no trainer_state.json)")
    return path


def _weights_from_model_files(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """``names`` (parameters of the training module) read from the checkpoint's safetensors,
    whose keys are the causal LM's: a training wrapper's name ends with ``.<key>``."""
    files = sorted(path.glob("model*.safetensors"))
    if not names or not files:
        return {}
    from safetensors import safe_open

    found: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            keys = list(f.keys())
            for name in names:
                matches = [k for k in keys if name == k or name.endswith("." + k)]
                if matches:
                    found[name] = f.get_tensor(max(matches, key=len))
    return found


def load_plain(file: Path) -> Any:
    """``torch.load`` of tensors and plain values only; a file holding any other object (which
    unpickling would build, running its code) or a corrupt one is a one-line ``CheckpointError``."""
    try:
        with warnings.catch_warnings():  # torch warns about a foreign pickle protocol before refusing it
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        named = re.search(r"GLOBAL (\S+) was not an allowed global", str(exc))
        what = f"it would build {named.group(1)}, not only" if named else "not a torch.save file of"
        raise CheckpointError(
            f"{file}: refused: {what} tensors and plain values; unpickling it could run code"
        ) from None
    except (RuntimeError, EOFError, ValueError) as exc:  # truncated or not a torch file at all
        raise CheckpointError(f"{file}: not a readable checkpoint file ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _restore(file: Path, what: str, restore: Any, value: Any) -> None:
    """``restore(value)``; a value of the wrong shape (another optimizer, an edited file) is named in one line."""
    try:
        restore(value)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{file}: does not fit this run's {what} ({_first_line(exc)})") from None


def _set_rng_state(rng: Any) -> None:
    random.setstate(rng["python"])  # a (version, 625-int tuple, gauss_next) tuple, as random.getstate() gives
    torch.set_rng_state(rng["torch"])


def load_checkpoint(path: Path, accelerator: Any, model: nn.Module, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote; returns the trainer state."""
    weights = load_plain(path / "trainable.pt")
    if not isinstance(weights, dict):
        raise CheckpointError(f"{path / 'trainable.pt'}: not a dict of tensors")
    params = dict(accelerator.unwrap_model(model).named_parameters())
    weights.update(
        _weights_from_model_files(path, [n for n, p in params.items() if p.requires_grad and n not in weights])
    )
    missing = [n for n, p in params.items() if p.requires_grad and n not in weights]
    if missing:
        raise CheckpointError(
            f"{path}: checkpoint lacks trainable parameters {missing[:3]} (different model or LoRA setup?)"
        )

    def copy_weights(weights: dict[str, Any]) -> None:
        with torch.no_grad():
            for name, value in weights.items():
                params[name].copy_(value)

    _restore(path / "trainable.pt", "trainable weights", copy_weights, weights)
    for name, what, target in (("optimizer.pt", "optimizer", optimizer), ("scheduler.pt", "schedule", scheduler)):
        _restore(path / name, what, target.load_state_dict, load_plain(path / name))
    rng_file = path / f"rng-{accelerator.process_index}.pt"
    if rng_file.exists():
        _restore(rng_file, "RNG", _set_rng_state, load_plain(rng_file))
    return json.loads((path / "trainer_state.json").read_text())
