"""One meaning per name (#28 item 5, #44 item 5).

1. ``--max-steps`` is an episode's step budget (online RL, the only recipe that plays episodes)
   and ``--max-optimizer-steps`` the optimizer steps of every recipe.
2. No top-level public function name is defined in two packages with different parameters
   (``max_steps``-style clashes: one name, two meanings), and no module imports another module's
   private (``_name``) name: a name another module uses is public.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

import agenttrainer.cli
import agenttrainer.retrieval

ROOT = Path(__file__).resolve().parent.parent
SRC_FOLDERS = sorted(ROOT.glob("packages/*/src"))


# --- 1. one flag, one meaning ----------------------------------------------------------------------


@pytest.fixture
def captured(monkeypatch):
    """The configs the training commands would run, without running them."""
    seen = []
    monkeypatch.setattr(agenttrainer.cli, "_run", lambda trainer_cls, config: seen.append(config))
    monkeypatch.setattr(agenttrainer.retrieval, "train_retriever", lambda config: seen.append(config) or {})
    return seen


def invoke(*args: str):
    return CliRunner().invoke(agenttrainer.cli.cli, list(args))


ONLINE = ("grpo", "--online", "--env", "e", "--tasks", "t.jsonl")
RECIPES = [
    ("sft", "--train-file", "t.jsonl"),
    ("dpo", "--train-file", "t.jsonl"),
    ("prm", "--train-file", "t.jsonl"),
    ("grpo", "--train-file", "t.jsonl"),
    ONLINE,
    ("retriever",),
]


@pytest.mark.parametrize("recipe", RECIPES, ids=[" ".join(r[:2]) for r in RECIPES])
def test_max_optimizer_steps_caps_the_optimizer_steps_of_every_recipe(captured, recipe):
    result = invoke(*recipe, "--max-optimizer-steps", "3")
    assert result.exit_code == 0, result.output
    assert [config.max_optimizer_steps for config in captured] == [3]


def test_max_steps_is_an_episodes_step_budget_and_only_online_rl_plays_episodes(captured):
    result = invoke(*ONLINE, "--max-steps", "3")
    assert result.exit_code == 0, result.output
    assert [config.max_steps for config in captured] == [3]
    offline = invoke("grpo", "--train-file", "t.jsonl", "--max-steps", "3")
    assert offline.exit_code == 2 and "--max-steps: online RL options; add --online" in offline.output
    for recipe in ("sft", "dpo", "prm", "retriever"):
        refused = invoke(recipe, "--train-file", "t.jsonl", "--max-steps", "3")
        assert refused.exit_code == 2 and "--max-steps" in refused.output, recipe
    assert len(captured) == 1


# --- 2. the source keeps names apart ------------------------------------------------------------

#: Public functions that several packages define on purpose, with what they share.
SHARED_NAMES = {
    "build_server": "each package's mcp_server module builds its MCP server; the options are the "
    "package's own (the sandbox's backend, config and roots)",
}


def _interface_named(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A click command or an MCP tool: what callers use is the command's or the tool's name (each
    package's ``export`` command, ``evaluate`` tool), not the Python function's."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr in ("command", "tool", "group"):
            return True
    return False


def _parameters(args: ast.arguments) -> tuple[tuple[str, str], ...]:
    """The parameters as a caller sees them: kind and name, in order (annotations aside)."""
    return (
        *(("positional", a.arg) for a in args.posonlyargs),
        *(("positional_or_keyword", a.arg) for a in args.args),
        *((("*", args.vararg.arg),) if args.vararg else ()),
        *(("keyword", a.arg) for a in args.kwonlyargs),
        *((("**", args.kwarg.arg),) if args.kwarg else ()),
    )


def public_functions(tree: ast.Module) -> dict[str, tuple[tuple[str, str], ...]]:
    """A module's top-level public functions (commands and MCP tools aside) and their parameters."""
    return {
        node.name: _parameters(node.args)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not node.name.startswith("_")
        and not _interface_named(node)
    }


def private_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, what)`` of each import of another module's private name; only the imported name
    counts, not the alias (``from importlib import metadata as _metadata`` is fine)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [
                (node.lineno, f"from {'.' * node.level}{node.module or ''} import {alias.name}")
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {alias.name}")
                for alias in node.names
                if any(part.startswith("_") and not part.startswith("__") for part in alias.name.split("."))
            ]
    return found


def _modules():
    for folder in SRC_FOLDERS:
        for path in sorted(folder.rglob("*.py")):
            yield folder.parent.name, path, ast.parse(path.read_text(encoding="utf-8"))


def test_the_scans_see_every_package_and_what_they_look_for():
    assert len(SRC_FOLDERS) >= 6, SRC_FOLDERS
    tree = ast.parse(
        "from a import _b, c\nfrom . import _d\nfrom importlib import metadata as _metadata\n"
        "from __future__ import annotations\nimport e._f\n"
        "def g(x, *, y=1): pass\nasync def _h(): pass\n@cli.command('i')\ndef i(): pass\n"
    )
    assert private_imports(tree) == [(1, "from a import _b"), (2, "from . import _d"), (5, "import e._f")]
    assert public_functions(tree) == {"g": (("positional_or_keyword", "x"), ("keyword", "y"))}


def test_no_public_function_name_has_two_meanings_across_packages():
    defined = defaultdict(dict)  # name -> {parameters: [where, ...]}
    for package, path, tree in _modules():
        for name, parameters in public_functions(tree).items():
            defined[name].setdefault(parameters, []).append((package, path.relative_to(ROOT).as_posix()))
    clashes = {
        name: signatures
        for name, signatures in defined.items()
        if name not in SHARED_NAMES
        and len(signatures) > 1
        and len({package for places in signatures.values() for package, _ in places}) > 1
    }
    report = [
        f"{name}: {where}({', '.join(p for _, p in params)})"
        for name, signatures in sorted(clashes.items())
        for params, places in signatures.items()
        for _, where in places
    ]
    assert not clashes, "one name, several signatures in different packages:\n" + "\n".join(report)
    assert set(SHARED_NAMES) <= set(defined), "a shared name no package defines any more"


def test_no_module_imports_another_modules_private_name():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for _, path, tree in _modules()
        for line, what in private_imports(tree)
    ]
    assert not found, "a name another module imports is public; drop its underscore:\n" + "\n".join(found)
