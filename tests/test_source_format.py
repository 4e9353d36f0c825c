"""The formatter formats all source, tests included: no line opts out of it.

``make lint`` runs ``ruff format --check``, but a ``# fmt: skip`` / ``# fmt: off`` comment takes
code out of that check for good, and hand-aligned blocks drift from the style around them. Long
literal tables are left to the formatter (one item per line) or kept as data files.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC_FOLDERS = sorted(ROOT.glob("packages/*/src"))
#: every folder of Python the formatter checks: package source, package tests, the shared tests
FORMATTED = [*SRC_FOLDERS, *sorted(ROOT.glob("packages/*/tests")), ROOT / "tests"]
OPT_OUT = re.compile(r"#\s*fmt:\s*(skip|off)\b")


def test_the_package_folders_are_found():
    assert len(SRC_FOLDERS) >= 6, SRC_FOLDERS


def test_no_line_of_source_or_tests_opts_out_of_the_formatter():
    found = [
        f"{path}:{number}: {line.strip()}"
        for folder in FORMATTED
        for path in sorted(folder.rglob("*.py"))
        if path != Path(__file__).resolve()  # this file names the comments it looks for
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OPT_OUT.search(line)
    ]
    assert not found, "formatter opt-outs:\n" + "\n".join(found)
