"""knowlyr-recorder conversion throughput and peak memory on generated 50 MB logs.

Writes a 50 MB OpenAI-chat JSONL (streamed by the converter) and a 50 MB SWE-agent .traj
(one JSON document, parsed whole) to a temporary directory, converts each with the
`knowlyr-recorder` CLI in a child process, and prints one JSON line with seconds, MB/s,
trajectories/s and peak RSS. Run: `python bench/recorder.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

SIZE = 50 * 1024 * 1024
MEASURE = """
import resource, sys, time
from agentrecorder.cli import main
start = time.perf_counter()
assert main(sys.argv[1:]) == 0
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def write_jsonl(path: Path) -> int:
    records = 0
    with open(path, "w") as handle:
        while handle.tell() < SIZE:
            messages = [{"role": "user", "content": f"task {records}"}]
            for k in range(10):
                call = {
                    "id": f"c{k}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": "x" * 400})
            handle.write(json.dumps({"task_id": records, "reward": 1.0, "messages": messages}) + "\n")
            records += 1
    return records


def write_traj(path: Path) -> int:
    entries = [{"action": f"cat f{i}.py", "observation": "y" * 5000, "thought": "look"} for i in range(10_000)]
    path.write_text(json.dumps({"trajectory": entries, "info": {"exit_status": "submitted"}}))
    return 1


def convert(path: Path, out: Path) -> tuple[float, float]:
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, "convert", str(path), "-o", str(out), "-q"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    seconds, peak = proc.stdout.split()
    return float(seconds), float(peak)


def main() -> None:
    result: dict[str, object] = {"bench": "recorder"}
    with tempfile.TemporaryDirectory() as tmp:
        for name, writer in (("jsonl_50mb", write_jsonl), ("json_document_50mb", write_traj)):
            path = Path(tmp) / f"{name}.{'jsonl' if 'jsonl' in name else 'traj'}"
            trajectories = writer(path)
            seconds, peak_mb = convert(path, Path(tmp) / f"{name}.out.jsonl")
            megabytes = path.stat().st_size / 1024 / 1024
            result[name] = {
                "seconds": round(seconds, 2),
                "mb_per_s": round(megabytes / seconds, 1),
                "trajectories_per_s": round(trajectories / seconds, 1),
                "peak_rss_mb": round(peak_mb),
            }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
