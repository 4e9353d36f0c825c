"""The adapter registry: lazy loading, third-party entry points, registration in code."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from agentrecorder import ConversionError, get_adapter, names, register_adapter
from agentrecorder.adapters.base import Adapter
from agentrecorder.detect import detect
from agentrecorder.registry import BUILTIN, ENTRY_POINT_GROUP


def _python(code: str, *extra_path: str) -> subprocess.CompletedProcess:
    prelude = f"import sys; sys.path[:0] = {list(extra_path)!r}\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=60)


def test_listing_formats_imports_no_adapter():
    proc = _python(
        "import sys, agentrecorder.registry as r\n"
        "print(len(r.names()), sorted(m for m in sys.modules if m.startswith('agentrecorder.adapters.') and m != 'agentrecorder.adapters.base'))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(" ", 1) == [str(len(BUILTIN)), "[]\n"]


def test_third_party_adapter_through_an_entry_point(tmp_path):
    """A distribution on sys.path declaring the group is found by the CLI and used by auto-detection."""
    (tmp_path / "csvlog_adapter.py").write_text(
        textwrap.dedent(
            """
            from knowlyrcore.trajectory import Trajectory
            from agentrecorder import Adapter, StepList

            class CsvLogAdapter(Adapter):
                name = "csvlog"
                description = "rows of {tool, input, output}"
                priority = 5

                def check(self, record):
                    return None if isinstance(record, dict) and "rows" in record else "no 'rows'"

                def convert(self, record, *, source):
                    steps = StepList()
                    for row in record["rows"]:
                        steps.add(row["tool"], {"input": row["input"]}, output=row["output"])
                    yield Trajectory(steps=steps.steps, source=source)
            """
        )
    )
    dist = tmp_path / "csvlog_adapter-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: csvlog-adapter\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ncsvlog = csvlog_adapter:CsvLogAdapter\n")
    log = tmp_path / "run.json"
    log.write_text(json.dumps({"rows": [{"tool": "grep", "input": "TODO", "output": "a.py:3"}]}))
    proc = _python(
        "from agentrecorder.cli import main\nraise SystemExit(main(['convert', sys.argv[-1]]))".replace(
            "sys.argv[-1]", repr(str(log))
        ),
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    (record,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert record["source"].startswith("csvlog:")
    assert record["steps"][0]["tool_call"] == {"name": "grep", "parameters": {"input": "TODO"}, "id": None}
    assert "detected format csvlog" in proc.stderr


def test_broken_entry_point_is_a_clear_error(tmp_path):
    dist = tmp_path / "broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbroken = no_such_module:Adapter\n")
    listing = _python("from agentrecorder.cli import main\nraise SystemExit(main(['formats']))", str(tmp_path))
    assert listing.returncode == 0, listing.stderr
    assert "broken          cannot be loaded: format 'broken': cannot load 'no_such_module:Adapter'" in listing.stdout
    assert "swe-agent" in listing.stdout  # the other formats still work
    named = _python(
        "from agentrecorder.cli import main\nraise SystemExit(main(['convert', '-f', 'broken', 'x.json']))",
        str(tmp_path),
    )
    assert named.returncode == 2 and "Traceback" not in named.stderr
    assert named.stderr.strip().startswith("error: Invalid value for '-f' / '--format': format 'broken': cannot load")


def test_register_adapter_in_code():
    class Upper(Adapter):
        name = "upper-test"
        description = "test only"
        priority = 1

        def check(self, record):
            return None if record == {"UPPER": True} else "not UPPER"

        def convert(self, record, *, source):
            return iter(())

    register_adapter("upper-test", Upper)
    try:
        assert "upper-test" in names()
        assert detect({"UPPER": True}).adapter.name == "upper-test"
        assert detect({"trajectory": [{"action": "ls", "observation": ""}]}).ruled_out["upper-test"] == "not UPPER"
    finally:
        from agentrecorder import registry

        registry._targets.pop("upper-test")
        registry._loaded.pop("upper-test", None)
    with pytest.raises(ConversionError, match="unknown format 'upper-test'"):
        get_adapter("upper-test")
