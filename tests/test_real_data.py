"""The published real agent logs are found in one place: ``knowlyrcore.testing.real_data``, whose
folder the root conftest sets to ``shared/data/real`` beside the clone (or ``$KNOWLYR_REAL_DATA``).

Before, seven test files each built the path from their own ``__file__`` in three spellings, and
three of them skipped with a raw ``pytest.skip`` that ``KNOWLYR_REQUIRE_COMPONENTS=1`` did not
turn into a failure."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_FOLDERS = [ROOT / "tests", *sorted(ROOT.glob("packages/*/tests"))]
#: a path built to the shared data (``... / "shared" / "data"``), in any spelling
PATH_TO_SHARED_DATA = re.compile(r"""["']shared["']\s*/\s*["']data["']|["']shared/data""")

SESSION = """
import os
from pathlib import Path

from knowlyrcore.testing import real_data


def test_found_beside_the_clone():
    assert real_data("log.json") == Path(os.environ["EXPECTED"])


def test_a_missing_log_is_a_missing_component():
    real_data("missing.json")
"""


def run_session(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A pytest session in ``tmp_path/clone`` (a copy of the root conftest) with
    ``tmp_path/shared/data/real/log.json`` beside it."""
    clone = tmp_path / "clone"
    clone.mkdir(exist_ok=True)
    shutil.copy(ROOT / "conftest.py", clone / "conftest.py")
    (clone / "pytest.ini").write_text("[pytest]\n")  # this folder is the rootdir, not the monorepo
    (clone / "test_session.py").write_text(SESSION)
    (tmp_path / "shared" / "data" / "real").mkdir(parents=True, exist_ok=True)
    (tmp_path / "shared" / "data" / "real" / "log.json").write_text("{}")
    base = {k: v for k, v in os.environ.items() if k not in ("KNOWLYR_REAL_DATA", "KNOWLYR_REQUIRE_COMPONENTS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=clone,
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=300,
    )


def test_the_root_conftest_points_real_data_beside_the_clone(tmp_path):
    expected = str(tmp_path / "shared" / "data" / "real" / "log.json")
    done = run_session(tmp_path, EXPECTED=expected)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 1 skipped" in done.stdout.splitlines()[-1], done.stdout
    assert "real agent logs not found" in done.stdout and "missing.json" in done.stdout


def test_a_missing_log_fails_under_require_components(tmp_path):
    expected = str(tmp_path / "shared" / "data" / "real" / "log.json")
    done = run_session(tmp_path, EXPECTED=expected, KNOWLYR_REQUIRE_COMPONENTS="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED test_session.py::test_a_missing_log_is_a_missing_component" in done.stdout
    assert "required component missing" in done.stdout


def test_knowlyr_real_data_names_another_folder(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "log.json").write_text("{}")
    done = run_session(tmp_path, EXPECTED=str(elsewhere / "log.json"), KNOWLYR_REAL_DATA=str(elsewhere))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 1 skipped" in done.stdout.splitlines()[-1], done.stdout


def test_the_test_folders_are_found():
    assert len(TEST_FOLDERS) >= 7, TEST_FOLDERS


def test_no_test_file_builds_its_own_path_to_the_shared_data():
    found = [
        f"{path}:{number}: {line.strip()}"
        for folder in TEST_FOLDERS
        for path in sorted(folder.rglob("*.py"))
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PATH_TO_SHARED_DATA.search(line)
    ]
    assert not found, "use knowlyrcore.testing.real_data instead:\n" + "\n".join(found)
