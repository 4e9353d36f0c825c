"""Per-episode workspaces of an MCP server: a fresh copy of the task's files for every episode.

A task declares what its server works on in ``metadata.workspace``:

- ``{"copy": "path"}``: a directory (a relative path resolves against the current directory),
  copied as it is, symlinks kept as symlinks (inside the sandbox one pointing out of the copy
  leads nowhere);
- ``{"git": recipe}``: a repository built by ``agentsandbox.mcp.gitrepo.build_repository``.
  A recipe is built once per process into a cache and copied from there: building runs git a
  few times per commit, copying is a file copy.

``populate(spec, dest)`` fills the (empty) directory ``dest``; the caller owns and deletes it.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from knowlyrcore.errors import InputError

WORKSPACE_KINDS = ("copy", "git")

_cache_lock = threading.Lock()
_cache_dir: Path | None = None
_built: dict[str, Path] = {}


def check_spec(spec: Any, where: str = "metadata.workspace") -> dict[str, Any]:
    """``spec`` if it is a workspace declaration, else ``InputError`` naming ``where``."""
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in WORKSPACE_KINDS:
        raise InputError(f"{where}: must be {{'copy': path}} or {{'git': recipe}}, got {_show(spec)}")
    if "copy" in spec and not (isinstance(spec["copy"], str) and spec["copy"]):
        raise InputError(f"{where}.copy: must be a directory path, got {_show(spec['copy'])}")
    if "git" in spec and not isinstance(spec["git"], dict):
        raise InputError(f"{where}.git: must be a recipe object, got {_show(spec['git'])}")
    return spec


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def populate(spec: dict[str, Any], dest: Path) -> None:
    """Fill the empty directory ``dest`` as ``spec`` declares (see the module docstring)."""
    check_spec(spec)
    if "copy" in spec:
        source = Path(os.path.abspath(spec["copy"]))
        if not source.is_dir():
            raise InputError(f"metadata.workspace.copy: {source}: not a directory")
    else:
        source = _built_recipe(spec["git"])
    shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)


def _built_recipe(recipe: dict[str, Any]) -> Path:
    """The cached build of ``recipe`` (built on first use)."""
    from agentsandbox.mcp.gitrepo import build_repository

    global _cache_dir
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:24]
    with _cache_lock:
        if digest not in _built:
            if _cache_dir is None:
                _cache_dir = Path(tempfile.mkdtemp(prefix="knowlyr-mcp-recipes-"))
                atexit.register(shutil.rmtree, _cache_dir, True)
            try:
                _built[digest] = build_repository(recipe, _cache_dir / digest)
            except BaseException:
                shutil.rmtree(_cache_dir / digest, ignore_errors=True)  # the next try starts clean
                raise
        return _built[digest]
