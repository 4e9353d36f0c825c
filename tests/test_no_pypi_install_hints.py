"""No message in the packages' code tells the user to `pip install knowlyr-<x>` by its bare name
(issue #43): the public index answers that with another project's package. Hints come from
``knowlyrcore.origin.install_command`` (the checkout or wheelhouse form).

Docstrings and comments are documentation, written as package READMEs write extras; the string
constants the code builds messages from are checked (f-string parts included).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BARE = re.compile(r"pip install\s+(?:--\S+\s+)*['\"]?knowlyr-")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def bare_hints(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
        if BARE.search(node.value)
    ]


def test_the_scan_finds_a_bare_hint_and_skips_docstrings():
    source = '"""pip install knowlyr-hub in a docstring"""\nHINT = "none installed: pip install knowlyr-sandbox"\n'
    assert bare_hints(source) == [(2, "none installed: pip install knowlyr-sandbox")]
    assert bare_hints("x = f\"pip install '{dist}[{extra}]'\"\n") == []
    assert bare_hints("x = \"pip install 'knowlyr-hub[report]'\"\n") == [(1, "pip install 'knowlyr-hub[report]'")]


def test_no_message_names_a_bare_knowlyr_package_to_install():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sorted(ROOT.glob("packages/*/src/**/*.py"))
        for line, text in bare_hints(path.read_text(encoding="utf-8"))
    ]
    assert not found, "use knowlyrcore.origin.install_command:\n" + "\n".join(found)


DOCS = sorted([ROOT / "README.md", *ROOT.glob("packages/*/README.md"), *ROOT.glob("docs/*.md")])
#: ``pip install`` with a knowlyr package by its bare name anywhere among its arguments (neither a
#: checkout path nor pinned to our version, as a wheelhouse install is), up to a comment, a parenthesis or a code span's end
DOC_BARE = re.compile(
    r"pip install\b[^`\n#()]*?(?<![\w./-])['\"]?knowlyr-(?:core|sandbox|recorder|reward|hub|trainer)"
    r"(?:\[[^\]]*\])?(?![\w\[=-])"
)
#: a line that names the bare install to warn against it ("... would install that", "installs something else")
WARNING = re.compile(r"would install|installs something else|from the public|not on PyPI", re.IGNORECASE)


def doc_hints(text: str) -> list[tuple[int, str]]:
    """The lines of a markdown document that tell the reader to install a knowlyr package by its bare name."""
    return [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), 1)
        if DOC_BARE.search(line) and not WARNING.search(line)
    ]


def test_the_doc_scan_finds_advice_and_passes_warnings():
    text = "On Ray (`pip install 'knowlyr-hub[ray]'`): ...\n`pip install knowlyr-hub` would install that.\n"
    assert doc_hints(text) == [(1, "On Ray (`pip install 'knowlyr-hub[ray]'`): ...")]
    assert doc_hints("pip install torch==2.13.0 knowlyr-trainer\n") == [
        (1, "pip install torch==2.13.0 knowlyr-trainer")
    ]
    for fine in (
        "pip install './packages/hub[ray]' from the checkout",
        "pip install --no-index --find-links WHEELHOUSE 'knowlyr-hub[trainer]==0.1.0+mono'",
        "pip install ./packages/core ./packages/trainer './packages/hub[trainer]'",
        "pip install -e packages/core  # knowlyr-core",
    ):
        assert doc_hints(fine) == [], fine


def test_no_doc_tells_the_reader_to_install_a_bare_knowlyr_name():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in DOCS
        for line, text in doc_hints(path.read_text(encoding="utf-8"))
    ]
    assert not found, "name the checkout or wheelhouse form (docs/install.md):\n" + "\n".join(found)
