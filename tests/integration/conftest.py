"""Shared fixtures of the cross-package tests."""

import shutil

import pytest

from knowlyrcore.testing import real_data


@pytest.fixture
def real_logs_folder(tmp_path):
    """A copy of ``shared/data/real`` without ``interop/``: the agent-framework logs the
    recorder's adapters convert (the ATIF / ADP / dataset samples there have readers of their own)."""
    folder = tmp_path / "real-logs"
    shutil.copytree(real_data(), folder, ignore=shutil.ignore_patterns("interop"))
    return folder
