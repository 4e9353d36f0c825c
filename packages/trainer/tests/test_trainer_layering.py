"""Layering: evaluation, acting, checkpoints, the model code and the online rollout code never
import the recipes (``agenttrainer.trainers`` and the online recipe ``agenttrainer.online.trainer``);
the recipes import the leaf modules and the recipe helpers, not each other."""

import ast
from pathlib import Path

import pytest

import agenttrainer

SRC = Path(agenttrainer.__file__).parent


def _is_module(dotted):
    """Whether ``dotted`` names a module or package of agenttrainer (not a name inside one)."""
    head, *rest = dotted.split(".")
    path = SRC.joinpath(*rest)
    return head == "agenttrainer" and (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file())


def _imports(path):
    """Modules ``path`` imports from: ``from m import x`` gives ``m``, or ``m.x`` when ``x`` is a
    submodule (``from agenttrainer.trainers import loop`` imports ``agenttrainer.trainers.loop``)."""
    tree = ast.parse(path.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                modules.add(submodule if _is_module(submodule) else node.module)
        elif isinstance(node, ast.Import):
            modules.update(a.name for a in node.names)
    return modules


def _is_recipe_side(module):
    """A recipe, a recipe helper, or a package whose ``__init__`` pulls a recipe in."""
    return module.startswith("agenttrainer.trainers") or module in (
        "agenttrainer.online",
        "agenttrainer.online.trainer",
    )


RECIPES = ["trainers/sft.py", "trainers/dpo.py", "trainers/grpo.py", "trainers/prm.py", "online/trainer.py"]
#: what a recipe may import from the recipe side: the helpers, not another recipe
RECIPE_HELPERS = {
    f"agenttrainer.trainers.{name}" for name in ("setup", "plan", "guards", "reference", "loop", "output_dir")
}

LEAVES = [
    "eval.py",
    "checkpoints.py",
    "packed.py",
    "console.py",
    *sorted(f"models/{p.name}" for p in (SRC / "models").glob("*.py")),
    # where a model acts: the engine, the generators, the chat, the local policy, the factory
    *sorted(f"acting/{p.name}" for p in (SRC / "acting").glob("*.py")),
    # the online recipe's rollout and sampling code; __init__ re-exports the recipe
    *sorted(f"online/{p.name}" for p in (SRC / "online").glob("*.py") if p.name not in ("__init__.py", "trainer.py")),
]


def test_the_acting_and_online_packages_are_covered():
    assert {"acting/__init__.py", "acting/engine.py", "acting/policy.py", "acting/spec.py"} <= set(LEAVES)
    assert {"online/rollout.py", "online/sampling.py"} <= set(LEAVES)
    assert "online/trainer.py" in RECIPES


@pytest.mark.parametrize("name", LEAVES)
def test_leaf_modules_do_not_import_the_recipes(name):
    assert not {m for m in _imports(SRC / name) if _is_recipe_side(m)}


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipes_import_leaf_modules_not_each_other(recipe):
    imported = {m for m in _imports(SRC / recipe) if _is_recipe_side(m)}
    assert imported <= RECIPE_HELPERS, f"{recipe} imports {sorted(imported - RECIPE_HELPERS)}"
