"""docs/architecture.md describes the package graph the pyprojects declare, row by row.

The page's tables are rebuilt here from ``packages/*/pyproject.toml`` and compared with what the
page says: per package its knowlyr siblings (hard, and per extra), its console scripts, its
plugin entry points (``knowlyr.envs``, ``knowlyr.task_suites``, ``knowlyr.recorder.adapters``) and
the names of its third-party libraries (hard, and per extra; the ``dev`` extras' test and lint
tools are left out). A package, extra, script or entry point missing from the page fails, and so
does one the page lists that no pyproject declares. Versions are not compared.

    pytest tests/test_architecture_doc.py
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
DOC = "docs/architecture.md"

PACKAGE_HEADER = ("package", "hard dependencies", "extras (extra: siblings)", "console scripts")
ENTRY_POINT_HEADER = ("package", "entry-point group", "name", "object")
THIRD_PARTY_HEADER = ("package", "hard third-party", "optional third-party (extra: libraries)")
NONE = {"", "—", "-"}


# -- what the pyprojects declare ---------------------------------------------------------------


def pyprojects(root: Path) -> dict[str, tuple[str, dict]]:
    """Distribution name → (pyproject path relative to ``root``, its ``[project]`` table)."""
    found = {}
    for path in sorted(root.glob("packages/*/pyproject.toml")):
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        found[project["name"]] = (path.relative_to(root).as_posix(), project)
    return found


def _named(requirement: Requirement) -> str:
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return requirement.name + extras


def _extra_requirements(project: dict, extra: str, seen: set[str] | None = None) -> list[Requirement]:
    """The requirements ``extra`` brings, following the extras of the package itself it names
    (``all = ["knowlyr-hub[sandbox,recorder]"]``)."""
    seen = set() if seen is None else seen
    if extra in seen:
        return []
    seen.add(extra)
    out = []
    for text in project.get("optional-dependencies", {}).get(extra, []):
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == canonicalize_name(project["name"]):
            for inner in sorted(requirement.extras):
                out += _extra_requirements(project, inner, seen)
        else:
            out.append(requirement)
    return out


def _optional_third_party(extras: dict[str, list[str]], siblings: set[str]) -> dict[str, set[str]]:
    """Extra → the third-party libraries it names itself (not through other extras: ``all`` would
    repeat them); the ``dev`` extra's test and lint tools and extras naming none are left out."""
    out = {}
    for extra, texts in extras.items():
        libraries = {canonicalize_name(Requirement(text).name) for text in texts} - siblings
        if extra != "dev" and libraries:
            out[extra] = libraries
    return out


def declared(root: Path) -> dict[str, dict]:
    """Per distribution: ``path``, ``hard`` siblings, ``extras`` (extra → siblings), ``scripts``,
    ``entry_points`` ((group, name) → object), ``third_party`` and ``optional_third_party``."""
    projects = pyprojects(root)
    siblings = {canonicalize_name(name) for name in projects}

    def is_sibling(requirement: Requirement) -> bool:
        return canonicalize_name(requirement.name) in siblings

    out = {}
    for name, (path, project) in projects.items():
        hard = [Requirement(text) for text in project.get("dependencies", [])]
        extras = project.get("optional-dependencies", {})
        groups = project.get("entry-points", {})
        out[name] = {
            "path": path,
            "hard": {_named(r) for r in hard if is_sibling(r)},
            "extras": {e: {_named(r) for r in _extra_requirements(project, e) if is_sibling(r)} for e in extras},
            "scripts": set(project.get("scripts", {})),
            "entry_points": {(group, ep): value for group, table in groups.items() for ep, value in table.items()},
            "third_party": {canonicalize_name(r.name) for r in hard if not is_sibling(r)},
            "optional_third_party": _optional_third_party(extras, siblings),
        }
    return out


# -- what the page says ------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    return [cell.strip().replace("`", "") for cell in line.strip().strip("|").split("|")]


def table(markdown: str, header: tuple[str, ...]) -> list[list[str]]:
    """The body rows of the table whose header row is ``header``."""
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("|") and tuple(_cells(line)) == header:
            rows = []
            for body in lines[i + 2 :]:
                if not body.lstrip().startswith("|"):
                    break
                cells = _cells(body)
                rows.append(cells + [""] * (len(header) - len(cells)))
            return rows
    raise AssertionError(f"{DOC} has no table with the header | {' | '.join(header)} |")


def names(cell: str) -> set[str]:
    """``a, b`` → ``{"a", "b"}``; ``—`` → ``set()``."""
    return {part.strip() for part in cell.split(",") if part.strip() not in NONE}


def mapping(cell: str) -> dict[str, set[str]]:
    """``x; y: a, b`` → ``{"x": set(), "y": {"a", "b"}}``."""
    out = {}
    for entry in cell.split(";"):
        if entry.strip() in NONE:
            continue
        key, _, values = entry.partition(":")
        out[key.strip()] = names(values)
    return out


def _listed(values: set[str]) -> str:
    return ", ".join(sorted(values)) or "nothing"


# -- the comparison ----------------------------------------------------------------------------


def _rows_by_package(rows: list[list[str]], packages: dict[str, dict], what: str, problems: list[str]) -> dict:
    documented = {}
    for row in rows:
        if row[0] in documented:
            problems.append(f"{DOC} lists {row[0]} twice in the {what} table")
        documented[row[0]] = row
    for name in sorted(set(documented) - set(packages)):
        problems.append(f"{DOC} lists {name} in the {what} table; no packages/*/pyproject.toml defines it")
    for name in sorted(set(packages) - set(documented)):
        problems.append(f"{DOC} has no row for {name} in the {what} table ({packages[name]['path']})")
    return documented


def _compare_mapping(
    package: str, path: str, noun: str, says: dict[str, set[str]], truth: dict[str, set[str]], problems: list[str]
) -> None:
    for key in sorted(set(truth) - set(says)):
        problems.append(f"{DOC} has no {noun} {key!r} for {package}; {path} declares it ({key}: {_listed(truth[key])})")
    for key in sorted(set(says) - set(truth)):
        problems.append(f"{DOC} lists {noun} {key!r} for {package}; {path} declares no such {noun}")
    for key in sorted(set(says) & set(truth)):
        if says[key] != truth[key]:
            problems.append(
                f"{DOC} says {package}[{key}] pulls in {_listed(says[key])}; {path} says {_listed(truth[key])}"
            )


def package_table_problems(root: Path) -> list[str]:
    packages, problems = declared(root), []
    rows = table((root / DOC).read_text(encoding="utf-8"), PACKAGE_HEADER)
    documented = _rows_by_package(rows, packages, "package", problems)
    for name in sorted(set(documented) & set(packages)):
        _, hard, extras, scripts = documented[name]
        truth, path = packages[name], packages[name]["path"]
        if names(hard) != truth["hard"]:
            problems.append(
                f"{DOC} says {name} depends on {_listed(names(hard))}; {path} says {_listed(truth['hard'])}"
            )
        _compare_mapping(name, path, "extra", mapping(extras), truth["extras"], problems)
        for script in sorted(truth["scripts"] - names(scripts)):
            problems.append(f"{DOC} does not list console script {script} of {name}; {path} declares it")
        for script in sorted(names(scripts) - truth["scripts"]):
            problems.append(f"{DOC} lists console script {script} of {name}; {path} declares no such script")
    return problems


def entry_point_problems(root: Path) -> list[str]:
    packages, problems = declared(root), []
    truth = {(name, *key): value for name, p in packages.items() for key, value in p["entry_points"].items()}
    says = {}
    for package, group, name, value in table((root / DOC).read_text(encoding="utf-8"), ENTRY_POINT_HEADER):
        says[(package, group, name)] = value
    for key in sorted(set(truth) - set(says)):
        package, group, name = key
        path = packages[package]["path"]
        problems.append(f"{DOC} does not list entry point {name!r} ({group}) of {package}; {path} declares it")
    for key in sorted(set(says) - set(truth)):
        package, group, name = key
        where = packages[package]["path"] if package in packages else "no packages/*/pyproject.toml"
        problems.append(f"{DOC} lists entry point {name!r} ({group}) of {package}; {where} declares no such one")
    for key in sorted(set(says) & set(truth)):
        if says[key] != truth[key]:
            package, group, name = key
            path = packages[package]["path"]
            problems.append(
                f"{DOC} says entry point {name!r} ({group}) of {package} is {says[key]}; {path} says {truth[key]}"
            )
    return problems


def third_party_problems(root: Path) -> list[str]:
    packages, problems = declared(root), []
    rows = table((root / DOC).read_text(encoding="utf-8"), THIRD_PARTY_HEADER)
    documented = _rows_by_package(rows, packages, "third-party", problems)
    for name in sorted(set(documented) & set(packages)):
        _, hard, optional = documented[name]
        truth, path = packages[name], packages[name]["path"]
        hard_names = {canonicalize_name(n) for n in names(hard)}
        if hard_names != truth["third_party"]:
            problems.append(
                f"{DOC} says {name} requires {_listed(hard_names)}; {path} says {_listed(truth['third_party'])}"
            )
        says = {extra: {canonicalize_name(n) for n in libs} for extra, libs in mapping(optional).items()}
        _compare_mapping(name, path, "extra with third-party libraries", says, truth["optional_third_party"], problems)
    return problems


# -- the tests ---------------------------------------------------------------------------------


def test_the_six_packages_are_found():
    assert len(pyprojects(ROOT)) == 6, sorted(pyprojects(ROOT))


@pytest.mark.parametrize("check", [package_table_problems, entry_point_problems, third_party_problems])
def test_the_doc_matches_the_pyprojects(check):
    problems = check(ROOT)
    assert not problems, f"{DOC} is out of date (update it with the pyprojects):\n" + "\n".join(problems)


def _copy(tmp_path: Path) -> Path:
    for path in ROOT.glob("packages/*/pyproject.toml"):
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True)
        shutil.copy(path, target)
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / DOC, tmp_path / DOC)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


DRIFTS = {
    "hard dependency dropped": (
        "packages/hub/pyproject.toml",
        '    "knowlyr-core==0.1.0+mono",\n',
        "",
        package_table_problems,
        f"{DOC} says knowlyr-hub depends on knowlyr-core; packages/hub/pyproject.toml says nothing",
    ),
    "extra added": (
        "packages/hub/pyproject.toml",
        "[project.optional-dependencies]\n",
        '[project.optional-dependencies]\nnotebooks = ["knowlyr-trainer==0.1.0+mono"]\n',
        package_table_problems,
        f"{DOC} has no extra 'notebooks' for knowlyr-hub; packages/hub/pyproject.toml declares it "
        "(notebooks: knowlyr-trainer)",
    ),
    "extra's sibling changed": (
        "packages/trainer/pyproject.toml",
        'online = ["knowlyr-reward==0.1.0+mono"]',
        'online = ["knowlyr-reward==0.1.0+mono", "knowlyr-sandbox==0.1.0+mono"]',
        package_table_problems,
        f"{DOC} says knowlyr-trainer[online] pulls in knowlyr-reward; packages/trainer/pyproject.toml says "
        "knowlyr-reward, knowlyr-sandbox",
    ),
    "console script added": (
        "packages/reward/pyproject.toml",
        "[project.scripts]\n",
        '[project.scripts]\nknowlyr-reward-mcp = "agentreward.mcp_server:main"\n',
        package_table_problems,
        f"{DOC} does not list console script knowlyr-reward-mcp of knowlyr-reward; "
        "packages/reward/pyproject.toml declares it",
    ),
    "package row removed": (
        DOC,
        "| `knowlyr-recorder` |",
        "| `not-a-package` |",
        package_table_problems,
        f"{DOC} has no row for knowlyr-recorder in the package table (packages/recorder/pyproject.toml)",
    ),
    "entry point added": (
        "packages/sandbox/pyproject.toml",
        '[project.entry-points."knowlyr.envs"]\n',
        '[project.entry-points."knowlyr.envs"]\n"knowlyr/new" = "agentsandbox.new:NewEnv"\n',
        entry_point_problems,
        f"{DOC} does not list entry point 'knowlyr/new' (knowlyr.envs) of knowlyr-sandbox; "
        "packages/sandbox/pyproject.toml declares it",
    ),
    "third-party hard dependency added": (
        "packages/core/pyproject.toml",
        '    "click>=8.1",\n',
        '    "click>=8.1",\n    "torch>=2.1",\n',
        third_party_problems,
        f"{DOC} says knowlyr-core requires click, jsonschema, pydantic, pydantic-core, pyyaml, typing-extensions; "
        "packages/core/pyproject.toml says click, jsonschema, pydantic, pydantic-core, pyyaml, torch, typing-extensions",
    ),
}


@pytest.mark.parametrize("drift", DRIFTS, ids=list(DRIFTS))
def test_a_drift_is_named_in_one_line(tmp_path, drift):
    """The comparison on a copy of the pyprojects and the page with one thing changed.

    Only the line the change causes is asserted, so a real drift fails
    ``test_the_doc_matches_the_pyprojects`` alone, not these too."""
    relative, old, new, check, message = DRIFTS[drift]
    root = _copy(tmp_path)
    assert message not in check(root)
    _edit(root / relative, old, new)
    assert message in check(root)


def test_a_missing_table_is_named(tmp_path):
    root = _copy(tmp_path)
    _edit(root / DOC, "| package | hard dependencies |", "| packages | hard dependencies |")
    with pytest.raises(AssertionError, match=re.escape(f"{DOC} has no table with the header | package |")):
        package_table_problems(root)
