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
