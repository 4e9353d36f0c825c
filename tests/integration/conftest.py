"""Shared fixtures of the cross-package tests."""

import shutil
from pathlib import Path

import pytest

from knowlyrcore.testing import require

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "real"


@pytest.fixture
def real_logs_folder(tmp_path):
    """A copy of ``shared/data/real`` without ``interop/``: the agent-framework logs the
    recorder's adapters convert (the ATIF / ADP / dataset samples there have readers of their own)."""
    require(REAL.is_dir(), f"real agent logs not found at {REAL}")
    folder = tmp_path / "real-logs"
    shutil.copytree(REAL, folder, ignore=shutil.ignore_patterns("interop"))
    return folder
