"""Shared fixtures: where the real agent logs live, and loading them."""

from __future__ import annotations

import json
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
