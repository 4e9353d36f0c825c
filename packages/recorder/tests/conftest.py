"""Shared fixtures: where the real agent logs live, and loading them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from knowlyrcore.testing import require

# packages/recorder/tests -> the repo root is parents[2]; shared/ sits beside the clone
REAL = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "real"


@pytest.fixture
def real():
    """``real(name)``: path of a real log; skips (fails under KNOWLYR_REQUIRE_COMPONENTS=1) if absent."""

    def find(name: str) -> Path:
        path = REAL / name
        require(path.exists(), f"real agent logs not found at {REAL.resolve()} (shared/data/real beside the clone)")
        return path

    return find


@pytest.fixture
def real_json(real):
    """``real_json(name)``: the parsed content of a real log."""
    return lambda name: json.loads(real(name).read_text(encoding="utf-8"))


@pytest.fixture
def real_logs_folder(real, tmp_path):
    """A copy of the real-log folder without ``interop/``: the agent-framework logs this
    package's adapters convert (the ATIF / ADP / dataset samples there have readers of their own)."""
    folder = tmp_path / "real-logs"
    shutil.copytree(real("who-and-when").parent, folder, ignore=shutil.ignore_patterns("interop"))
    return folder
