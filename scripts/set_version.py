"""Set the one version of all six knowlyr packages, or check that they agree.

Each ``packages/*/pyproject.toml`` holds the version once (``version = "..."``) and pins every
knowlyr sibling it names, in ``dependencies`` and in every extra, to exactly that version
(``"knowlyr-core==0.1.0+mono"``). The ``+mono`` local label keeps the packages off the version
line of the unrelated knowlyr-* packages on PyPI (docs/install.md); keep it when bumping.

    python scripts/set_version.py 0.2.0+mono   # rewrite the six versions and every sibling pin
    python scripts/set_version.py --check      # exit 1, naming each disagreement, if any

After a bump, ``make install`` reinstalls the editable packages (their metadata carries the
version the import-time check compares).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
SIBLINGS = ("knowlyr-core", "knowlyr-sandbox", "knowlyr-recorder", "knowlyr-reward", "knowlyr-hub", "knowlyr-trainer")
VERSION_LINE = re.compile(r'^version = "[^"]*"$', re.MULTILINE)
# A quoted requirement on a sibling with a version specifier: "knowlyr-core==0.1.0+mono", "knowlyr-reward>=0.1".
SIBLING_PIN = re.compile(
    r'"(?P<name>{})(?P<extras>\[[^\]]*\])?\s*[<>=!~][^";]*(?P<marker>;[^"]*)?"'.format("|".join(SIBLINGS))
)


def pyprojects(root: Path = ROOT) -> list[Path]:
    return sorted((root / "packages").glob("*/pyproject.toml"))


def problems(root: Path = ROOT) -> list[str]:
    """Every way the pyprojects under ``root`` break the one-version rule; empty when they agree."""
    found: list[str] = []
    projects = {path: tomllib.loads(path.read_text())["project"] for path in pyprojects(root)}
    versions = {project["version"] for project in projects.values()}
    if len(versions) != 1:
        listed = ", ".join(f"{p['name']} {p['version']}" for p in projects.values())
        found.append(f"the packages have different versions: {listed}")
    for path, project in projects.items():
        version = project["version"]
        requirements = [("dependencies", r) for r in project.get("dependencies", [])]
        for extra, reqs in project.get("optional-dependencies", {}).items():
            requirements += [(f"extra {extra}", r) for r in reqs]
        for where, requirement in requirements:
            name = re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()
            if name not in SIBLINGS or name == project["name"]:
                continue  # a third-party package, or the package's own extras ("knowlyr-hub[sandbox]")
            if re.sub(r"\[[^\]]*\]|;.*", "", requirement).replace(" ", "") != f"{name}=={version}":
                rel = path.relative_to(root)
                found.append(f"{rel}: {where} requires {requirement!r}, not {name}=={version}")
    return found


def set_version(version: str, root: Path = ROOT) -> None:
    """Write ``version`` into every pyproject and pin every sibling requirement to it."""
    for path in pyprojects(root):
        text = VERSION_LINE.sub(f'version = "{version}"', path.read_text(), count=1)
        text = SIBLING_PIN.sub(lambda m: f'"{m["name"]}{m["extras"] or ""}=={version}{m["marker"] or ""}"', text)
        path.write_text(text)


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        found = problems()
        for problem in found:
            print(problem, file=sys.stderr)
        return 1 if found else 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[0], "\nusage: set_version.py VERSION | --check", file=sys.stderr)
        return 2
    set_version(argv[0])
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    print(f"all six packages are now at {argv[0]}; run `make install` to refresh the editable installs")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
