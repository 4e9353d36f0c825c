"""knowlyr-hub reaches the trainer through one door: ``agenttrainer.acting.policy_from_spec``.

Hub builds a policy from ``--policy SPEC`` and nothing else of the trainer is its business (how a
model is loaded, prompted, cached or warned about belongs to the trainer). Every import of
``agenttrainer`` in hub's source, at module level or inside a function, must be that one name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import trajectoryhub

SRC = Path(trajectoryhub.__file__).parent
DOOR = ("agenttrainer.acting", "policy_from_spec")


def trainer_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of each import of agenttrainer in ``path`` (name None: ``import m``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "agenttrainer":
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "agenttrainer"]
    return found


def test_hub_imports_only_the_policy_factory_from_the_trainer():
    imports = {
        f"{path.relative_to(SRC)}:{line}": (module, name)
        for path in sorted(SRC.rglob("*.py"))
        for line, module, name in trainer_imports(path)
    }
    assert imports, "hub's evaluate builds local model policies through the trainer's factory"
    assert {where: door for where, door in imports.items() if door != DOOR} == {}


def test_the_scan_sees_every_form_of_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import agenttrainer.cli\n"
        "def f():\n"
        "    from agenttrainer.acting import policy_from_spec, TokenPolicy\n"
        "    from agenttrainer import models\n"
    )
    assert trainer_imports(module) == [
        (1, "agenttrainer.cli", None),
        (3, "agenttrainer.acting", "policy_from_spec"),
        (3, "agenttrainer.acting", "TokenPolicy"),
        (4, "agenttrainer", "models"),
    ]
