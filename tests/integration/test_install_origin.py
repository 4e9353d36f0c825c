"""Installing a knowlyr package from built wheels takes its knowlyr siblings from those wheels,
never the unrelated knowlyr-* packages of the same names on PyPI (issue #25).

The six wheels are built once per session. Each case installs one package, with the extras that
pull in siblings, into a fresh virtual environment with pip's normal configuration: the public
index stays reachable (no ``--no-index``), so the other project's knowlyr-core 0.1.2 is a
candidate and only the exact sibling pins (``==0.1.0+mono``) keep pip from taking it. Then every
knowlyr distribution in the environment must be ours: our version, and every file of its import
package byte-identical to the wheel's. Importing runs the import-time origin check for real.

knowlyr-trainer requires torch, which this test does not install (a bare ``torch`` requirement
resolves to a multi-GB build; the Makefile installs the CPU one deliberately first): its case
resolves ``knowlyr-trainer[online]`` with ``pip install --dry-run --report`` and checks that pip
took knowlyr-trainer, knowlyr-core and knowlyr-reward from the wheelhouse. The resolution is the
part that went wrong; installing a resolved wheel is what the other cases check.

The hub case finally installs the other project's knowlyr-core over ours (what ``pip install
knowlyr-hub`` from PyPI did) and checks that ``knowlyr-hub --help`` stops with the one line naming
the fix (that knowlyrcore has no ``origin`` module). About three minutes, mostly pip.

    make test-long    # or: pytest tests/integration/test_install_origin.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib

from knowlyrcore.testing import require

pytestmark = [pytest.mark.integration, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "packages"
OURS = tomllib.loads((PACKAGES / "core" / "pyproject.toml").read_text())["project"]["version"]
IMPORT_NAMES = {
    "knowlyr-core": "knowlyrcore",
    "knowlyr-sandbox": "agentsandbox",
    "knowlyr-recorder": "agentrecorder",
    "knowlyr-reward": "agentreward",
    "knowlyr-hub": "trajectoryhub",
    "knowlyr-trainer": "agenttrainer",
}

#: requirement installed alone -> the knowlyr distributions it must bring, all ours.
CASES = {
    f"knowlyr-core=={OURS}": ["knowlyr-core"],
    f"knowlyr-sandbox=={OURS}": ["knowlyr-core", "knowlyr-sandbox"],
    f"knowlyr-recorder=={OURS}": ["knowlyr-core", "knowlyr-recorder"],
    f"knowlyr-reward[mcp]=={OURS}": ["knowlyr-core", "knowlyr-reward"],  # core only through the extra
    f"knowlyr-hub[sandbox,recorder,reward]=={OURS}": [
        "knowlyr-core",
        "knowlyr-hub",
        "knowlyr-recorder",
        "knowlyr-reward",
        "knowlyr-sandbox",
    ],
}

#: Run inside the fresh environment: every knowlyr-* distribution installed, and the file and
#: site-packages folder of each import package named on the command line (importing it runs
#: the origin check).
INSPECT = """
import importlib, importlib.metadata as metadata, json, sys, sysconfig
versions = {d.metadata["Name"]: d.version for d in metadata.distributions() if d.metadata["Name"].startswith("knowlyr-")}
files = {name: importlib.import_module(name).__file__ for name in sys.argv[1:]}
print(json.dumps({"versions": versions, "files": files, "site": sysconfig.get_paths()["purelib"]}))
"""


def pip(python: Path | str, *args: str) -> list[str]:
    """This interpreter's pip, acting on the environment of ``python``, with pip's usual
    configuration (indexes, find-links) left as it is."""
    return [sys.executable, "-m", "pip", "--python", str(python), *args]


def run(cmd: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="session")
def foreign_core_version() -> str:
    """The newest knowlyr-core pip can see that is not ours: the other project's, on PyPI."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "knowlyr-core"], capture_output=True, text=True, timeout=300
    )
    listed = re.search(r"Available versions: (.*)", done.stdout)
    others = [v.strip() for v in listed.group(1).split(",") if "+" not in v] if listed else []
    require(bool(others), "pip sees no knowlyr-core on a public index, so there is nothing to mistake ours for")
    return others[0]


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory, foreign_core_version) -> Path:
    """The six packages built once, without their dependencies."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(folder),
            *(str(PACKAGES / dist.removeprefix("knowlyr-")) for dist in IMPORT_NAMES),
        ]
    )
    return folder


def wheel_of(wheelhouse: Path, dist: str) -> Path:
    (wheel,) = wheelhouse.glob(f"{dist.replace('-', '_')}-*.whl")
    return wheel


def fresh_environment(path: Path) -> Path:
    """A virtual environment without pip of its own (this interpreter's pip installs into it)."""
    venv.create(path, with_pip=False)
    return path / "bin" / "python"


@pytest.mark.parametrize("requirement", sorted(CASES))
def test_installed_alone_takes_our_siblings_from_the_wheelhouse(
    requirement, wheelhouse, foreign_core_version, tmp_path
):
    python = fresh_environment(tmp_path / "env")
    run(pip(python, "install", "--quiet", "--find-links", str(wheelhouse), requirement))

    expected = CASES[requirement]
    done = run([str(python), "-c", INSPECT, *(IMPORT_NAMES[d] for d in expected)], timeout=300)
    seen = json.loads(done.stdout)
    assert seen["versions"] == dict.fromkeys(expected, OURS)
    site = Path(seen["site"])
    for dist in expected:
        module = IMPORT_NAMES[dist]
        assert Path(seen["files"][module]) == site / module / "__init__.py"
        with zipfile.ZipFile(wheel_of(wheelhouse, dist)) as wheel:
            members = [m for m in wheel.namelist() if m.startswith(f"{module}/")]
            assert members
            for member in members:
                assert (site / member).read_bytes() == wheel.read(member), f"{member} is not the wheel's"

    if requirement.startswith("knowlyr-hub"):
        check_another_projects_core_is_refused(python, foreign_core_version)


def check_another_projects_core_is_refused(python: Path, foreign: str) -> None:
    """The state `pip install knowlyr-hub` from PyPI left behind: the command stops at import with
    one line naming the package and the fix."""
    run(pip(python, "install", "--quiet", "--no-deps", f"knowlyr-core=={foreign}"))
    done = subprocess.run([str(python.parent / "knowlyr-hub"), "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr  # one line, as every knowlyr command's errors
    assert done.stderr == (
        "error: knowlyr-hub needs knowlyr-core from the knowlyr checkout, not PyPI's (another project); "
        "fix: pip install ./packages/core (docs/install.md)\n"
    )


def test_trainer_resolves_its_siblings_from_the_wheelhouse(wheelhouse, tmp_path):
    report = tmp_path / "report.json"
    requirement = f"knowlyr-trainer[online]=={OURS}"
    run(
        pip(
            sys.executable,
            "install",
            "--quiet",
            "--dry-run",
            "--ignore-installed",
            "--report",
            str(report),
            "--find-links",
            str(wheelhouse),
            requirement,
        )
    )
    resolved = {
        item["metadata"]["name"]: (item["metadata"]["version"], item["download_info"]["url"])
        for item in json.loads(report.read_text())["install"]
        if item["metadata"]["name"].startswith("knowlyr-")
    }
    assert resolved == {
        dist: (OURS, wheel_of(wheelhouse, dist).as_uri())
        for dist in ("knowlyr-core", "knowlyr-reward", "knowlyr-trainer")
    }
