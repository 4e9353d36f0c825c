"""A 100,000-row data set (one JSON array, 37 MB) exports in bounded memory, with a progress bar.

Peak memory is the exporting process's VmHWM (see test_malformed for why not ru_maxrss). The
bound is relative: exporting 100,000 rows may not cost more than a few MB over exporting 5,000
rows of the same shape, whereas merely ``json.load``-ing the 100,000-row file takes about
240 MB here. No timing is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys

_MEASURE = """
import re, sys
from agentrecorder.cli import main
code = main(sys.argv[1:])
with open("/proc/self/status") as status:
    peak_kb = int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1))
print(code, peak_kb // 1024)
"""


def _adp_rows(path, n: int) -> None:
    """``n`` ADP rows: the task, one api_action and its observation, ``resolved`` on even rows."""
    with open(path, "w") as handle:
        handle.write("[")
        for i in range(n):
            row = {
                "id": f"row-{i}",
                "content": [
                    {
                        "class_": "text_observation",
                        "content": f"list the files of repo {i}",
                        "name": None,
                        "source": "user",
                    },
                    {
                        "class_": "api_action",
                        "function": "list_files",
                        "kwargs": {"path": f"src/{i}"},
                        "description": "look",
                    },
                    {"class_": "text_observation", "content": "a.py b.py", "name": None, "source": "environment"},
                ],
                "details": {"resolved": i % 2 == 0},
            }
            handle.write(("," if i else "") + json.dumps(row))
        handle.write("]")


def _export(source, out, *extra) -> tuple[int, int, str]:
    argv = ["export", "--to", "atif", str(source), "-o", str(out), *extra]
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    code, peak_mb = proc.stdout.split()
    return int(code), int(peak_mb), proc.stderr


def test_100k_row_json_array_exports_in_bounded_memory(tmp_path):
    small, big = tmp_path / "rows-5k.json", tmp_path / "rows-100k.json"
    _adp_rows(small, 5_000)
    _adp_rows(big, 100_000)
    assert big.stat().st_size > 35_000_000

    code, small_peak, _ = _export(small, tmp_path / "small.jsonl", "-q")
    assert code == 0
    out = tmp_path / "big.jsonl"
    code, big_peak, stderr = _export(big, out, "--progress")
    assert code == 0
    assert big_peak - small_peak < 16, f"100k rows peaked at {big_peak} MB, 5k rows at {small_peak} MB"
    assert big_peak < 150, f"100k rows peaked at {big_peak} MB"

    # the progress bar counted every row, and every row is a document of its own
    assert "export atif: 100000 trajectories" in stderr
    assert "wrote 100000 ATIF documents" in stderr
    count = 0
    with open(out) as handle:
        for count, line in enumerate(handle, start=1):
            if count == 77_777:
                doc = json.loads(line)
                assert doc["session_id"] == "row-77776"
                assert doc["steps"][1]["tool_calls"][0]["arguments"] == {"path": "src/77776"}
                assert doc["extra"]["knowlyr"]["outcome"]["success"] is True
    assert count == 100_000
