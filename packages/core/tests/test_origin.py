"""The import-time check that the knowlyr packages next to each other are ours, at one version,
and the one-version rule of the six pyprojects (scripts/set_version.py)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib

import knowlyrcore
from knowlyrcore import origin
from knowlyrcore.testing import import_file

ROOT = Path(__file__).resolve().parents[3]
OURS = metadata.version("knowlyr-core")


def fake_versions(monkeypatch, **versions):
    """Make ``importlib.metadata.version`` answer ``versions`` (``knowlyr_sandbox="0.1.2"``; None:
    not installed) and the real installed version for every other distribution."""
    real = metadata.version
    wanted = {name.replace("_", "-"): version for name, version in versions.items()}

    def version(dist):
        if dist not in wanted:
            return real(dist)
        if wanted[dist] is None:
            raise metadata.PackageNotFoundError(dist)
        return wanted[dist]

    monkeypatch.setattr(metadata, "version", version)


def test_core_version_is_the_pyprojects_with_the_local_label():
    """The installed metadata (editable or wheel) carries this checkout's version, whose local
    label no package on a public index can have."""
    pyproject = tomllib.loads((ROOT / "packages" / "core" / "pyproject.toml").read_text())
    assert knowlyrcore.__version__ == OURS == pyproject["project"]["version"]
    assert "+" in OURS


def test_siblings_at_our_version_or_absent_pass(monkeypatch):
    fake_versions(monkeypatch, knowlyr_sandbox=OURS, knowlyr_hub=None, knowlyr_trainer=None)
    assert origin.check_siblings("knowlyr-core") == OURS
    assert origin.check_siblings("knowlyr-sandbox") == OURS


def test_another_projects_sibling_fails_with_one_line(monkeypatch):
    fake_versions(monkeypatch, knowlyr_hub=OURS, knowlyr_sandbox="0.1.2", knowlyr_recorder=None)
    with pytest.raises(ImportError) as raised:
        origin.check_siblings("knowlyr-hub")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"knowlyr-hub {OURS} needs knowlyr-sandbox {OURS}, found knowlyr-sandbox 0.1.2 ")
    assert "pip install ./packages/sandbox" in message
    assert f"knowlyr-sandbox=={OURS}" in message


def test_a_sibling_left_at_an_older_version_of_ours_fails(monkeypatch):
    """An editable install not refreshed after a version bump is caught as well."""
    fake_versions(monkeypatch, knowlyr_trainer=OURS, knowlyr_reward="0.0.9+mono")
    with pytest.raises(ImportError, match=r"found knowlyr-reward 0\.0\.9\+mono"):
        origin.check_siblings("knowlyr-trainer")


#: Packages that check their knowlyr siblings before importing anything from them, by import name.
DEPENDENTS = {
    "agentsandbox": "knowlyr-sandbox",
    "agentrecorder": "knowlyr-recorder",
    "agentreward": "knowlyr-reward",
    "trajectoryhub": "knowlyr-hub",
    "agenttrainer": "knowlyr-trainer",
}

IMPORT_WITH_CORE_AT = """
import importlib, importlib.metadata as metadata, sys
real = metadata.version
metadata.version = lambda dist: sys.argv[2] if dist == "knowlyr-core" else real(dist)
try:
    importlib.import_module(sys.argv[1])
except ImportError as error:
    print(error)
    sys.exit(1)
"""


def import_with_core_at(
    module: str, core_version: str, *, path_first: Path | None = None
) -> subprocess.CompletedProcess:
    """Import ``module`` in a fresh interpreter (the check runs once, at first import) with
    knowlyr-core's installed version reported as ``core_version`` and ``path_first`` ahead of
    everything on ``sys.path``."""
    if importlib.util.find_spec(module) is None:
        # not a component: the dependents are optional siblings, absent when core is tested alone
        pytest.skip(f"{DEPENDENTS[module]} is not installed next to knowlyr-core here")
    env = dict(os.environ)
    if path_first is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path_first), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", IMPORT_WITH_CORE_AT, module, core_version],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.parametrize("module", sorted(DEPENDENTS))
def test_dependent_refuses_core_at_another_version(module):
    """With knowlyr-core's version reported as the other project's 0.1.2 the import fails with
    the one line of the shared check."""
    done = import_with_core_at(module, "0.1.2")
    assert done.returncode == 1, done.stderr
    dist = DEPENDENTS[module]
    assert done.stdout.strip() == origin.mismatch_message(dist, metadata.version(dist), "knowlyr-core", "0.1.2")


@pytest.mark.parametrize("module", sorted(DEPENDENTS))
def test_dependent_refuses_a_core_without_origin(module, tmp_path):
    """The other project's knowlyrcore has no ``origin`` module: the import fails with one line
    naming the package and the fix, not with a ModuleNotFoundError."""
    (tmp_path / "knowlyrcore").mkdir()
    (tmp_path / "knowlyrcore" / "__init__.py").write_text('__version__ = "0.1.2"\n')
    done = import_with_core_at(module, "0.1.2", path_first=tmp_path)
    assert done.returncode == 1, done.stderr
    message = done.stdout.strip()
    assert "\n" not in message
    assert message.startswith(f"{DEPENDENTS[module]} needs knowlyr-core from the knowlyr checkout, not PyPI's")
    assert message.endswith("fix: pip install ./packages/core (docs/install.md)")


@pytest.mark.parametrize("module", sorted(DEPENDENTS))
def test_dependent_imports_with_our_core(module):
    done = import_with_core_at(module, OURS)
    assert done.returncode == 0, done.stdout + done.stderr


# -- one version for the six pyprojects ---------------------------------------------------------


def load_set_version():
    return import_file(ROOT / "scripts" / "set_version.py")


def test_the_six_pyprojects_share_one_version_and_pin_siblings_to_it():
    set_version = load_set_version()
    assert set_version.problems() == []
    versions = {tomllib.loads(p.read_text())["project"]["version"] for p in set_version.pyprojects()}
    assert versions == {OURS}


@pytest.fixture
def checkout_copy(tmp_path):
    """The six pyprojects alone, in a scratch tree shaped like the checkout."""
    for pyproject in (ROOT / "packages").glob("*/pyproject.toml"):
        target = tmp_path / "packages" / pyproject.parent.name / "pyproject.toml"
        target.parent.mkdir(parents=True)
        shutil.copy(pyproject, target)
    return tmp_path


def test_problems_name_a_loose_pin_and_a_stray_version(checkout_copy):
    set_version = load_set_version()
    hub = checkout_copy / "packages" / "hub" / "pyproject.toml"
    hub.write_text(hub.read_text().replace(f'"knowlyr-sandbox=={OURS}"', '"knowlyr-sandbox>=0.1"'))
    trainer = checkout_copy / "packages" / "trainer" / "pyproject.toml"
    trainer.write_text(trainer.read_text().replace(f'version = "{OURS}"', 'version = "0.1.2"'))
    found = set_version.problems(checkout_copy)
    assert any("packages/hub/pyproject.toml: extra sandbox requires 'knowlyr-sandbox>=0.1'" in p for p in found)
    assert any(p.startswith("the packages have different versions") and "knowlyr-trainer 0.1.2" in p for p in found)
    # the trainer's own sibling pins now disagree with its version too
    assert any("packages/trainer/pyproject.toml: dependencies requires 'knowlyr-core==" in p for p in found)


def test_set_version_rewrites_every_version_and_pin(checkout_copy):
    set_version = load_set_version()
    hub = checkout_copy / "packages" / "hub" / "pyproject.toml"
    hub.write_text(
        hub.read_text().replace(
            f'"knowlyr-reward=={OURS}"', "\"knowlyr-reward[llm] >= 0.1 ; python_version >= '3.10'\""
        )
    )
    set_version.set_version("0.2.0+mono", checkout_copy)
    assert set_version.problems(checkout_copy) == []
    projects = [tomllib.loads(p.read_text())["project"] for p in set_version.pyprojects(checkout_copy)]
    assert {p["version"] for p in projects} == {"0.2.0+mono"}
    hub_project = tomllib.loads(hub.read_text())["project"]
    assert hub_project["dependencies"][0] == "knowlyr-core==0.2.0+mono"
    assert hub_project["optional-dependencies"]["reward"] == [
        "knowlyr-reward[llm]==0.2.0+mono; python_version >= '3.10'"
    ]
