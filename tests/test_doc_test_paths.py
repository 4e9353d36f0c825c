"""Every test file the docs name exists where they say (issue #43: docs pointed at
`tests/test_security.py`, which lives under `packages/<pkg>/tests/`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *ROOT.glob("packages/*/README.md"), *ROOT.glob("docs/*.md")])
#: a test file named as a path: `tests/test_x.py`, `packages/hub/tests/test_x.py`, `tests/integration/test_x.py`
TEST_PATH = re.compile(r"(?<![\w/.-])((?:packages/[\w-]+/)?tests/(?:[\w-]+/)*test_\w+\.py)")


def named_test_paths(text: str) -> list[tuple[int, str]]:
    """The test paths named in the prose (fenced blocks are examples, run by test_docs_snippets)."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            found += [(number, path) for path in TEST_PATH.findall(line)]
    return found


def _exists(doc: Path, path: str) -> bool:
    # from the clone's root, as the docs write commands; a package README may also name its own tests/
    return (ROOT / path).is_file() or (doc.parent / path).is_file()


def test_the_scan_reads_paths_as_written():
    text = "see `packages/hub/tests/test_store.py` and tests/integration/test_x.py::test_y, not my_tests/test_z.py"
    assert named_test_paths(text) == [(1, "packages/hub/tests/test_store.py"), (1, "tests/integration/test_x.py")]
    assert named_test_paths("```python\nagent('fix tests/test_sort.py')\n```\ntests/test_a.py\n") == [
        (4, "tests/test_a.py")
    ]


def test_every_test_file_the_docs_name_exists():
    missing = [
        f"{doc.relative_to(ROOT)}:{line}: {path}"
        for doc in DOCS
        for line, path in named_test_paths(doc.read_text(encoding="utf-8"))
        if not _exists(doc, path)
    ]
    assert not missing, "test files named in the docs that are not there:\n" + "\n".join(missing)
