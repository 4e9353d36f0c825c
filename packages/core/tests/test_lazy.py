"""``knowlyrcore.lazy.lazy_import``: found at once, executed on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from knowlyrcore.lazy import lazy_import


def test_a_missing_module_fails_at_import_time():
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        lazy_import("no_such_module_here")


def test_the_module_runs_only_when_an_attribute_is_read(tmp_path):
    (tmp_path / "noisy_module.py").write_text("print('executed')\nVALUE = 7\n")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from knowlyrcore.lazy import lazy_import\n"
        "m = lazy_import('noisy_module'); print('imported')\n"
        "print(m.VALUE)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["imported", "executed", "7"]
