"""Shared fixtures: the real agent logs (``knowlyrcore.testing.real_data``), and loading them."""

from __future__ import annotations

import json
import shutil

import pytest

from knowlyrcore.testing import real_data


@pytest.fixture
def real():
    """``real(name)``: path of a real log; skips (fails under KNOWLYR_REQUIRE_COMPONENTS=1) if absent."""
    return real_data


@pytest.fixture
def real_json(real):
    """``real_json(name)``: the parsed content of a real log."""
    return lambda name: json.loads(real(name).read_text(encoding="utf-8"))


@pytest.fixture
def real_logs_folder(tmp_path):
    """A copy of the real-log folder without ``interop/``: the agent-framework logs this
    package's adapters convert (the ATIF / ADP / dataset samples there have readers of their own)."""
    folder = tmp_path / "real-logs"
    shutil.copytree(real_data(), folder, ignore=shutil.ignore_patterns("interop"))
    return folder
