"""Layering: evaluation, inference, checkpoints and the model code never import the recipes
(``agenttrainer.trainers``); the recipes import the leaf modules, not each other."""

import ast
from pathlib import Path

import pytest

import agenttrainer

SRC = Path(agenttrainer.__file__).parent


def _imports(path):
    """Modules ``path`` imports from (``from m import x`` gives ``m``)."""
    tree = ast.parse(path.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(a.name for a in node.names)
    return modules


LEAVES = [
    "eval.py",
    "inference.py",
    "checkpoints.py",
    "packed.py",
    *sorted(f"models/{p.name}" for p in (SRC / "models").glob("*.py")),
]


@pytest.mark.parametrize("name", LEAVES)
def test_leaf_modules_do_not_import_the_recipes(name):
    assert not {m for m in _imports(SRC / name) if m.startswith("agenttrainer.trainers")}


@pytest.mark.parametrize("recipe", ["sft", "dpo", "grpo"])
def test_recipes_import_leaf_modules_not_common_or_each_other(recipe):
    imported = {m for m in _imports(SRC / "trainers" / f"{recipe}.py") if m.startswith("agenttrainer.trainers")}
    assert imported <= {"agenttrainer.trainers.setup", "agenttrainer.trainers.plan", "agenttrainer.trainers.guards",
                        "agenttrainer.trainers.reference", "agenttrainer.trainers.loop"}  # fmt: skip
