"""Bad input: one-line errors naming file, position and field; never a traceback; big files.

Covers truncated JSON, wrong types at a JSON path, empty and whitespace-only files, binary
data, non-UTF-8 and UTF-16 text, NaN/Infinity, overlong JSONL lines, an unknown format (listing every format tried and why), a JSONL file
with one bad line, an explicit format that does not match, and 50 MB inputs (JSONL streamed,
a single JSON document parsed whole) with their peak memory measured in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrecorder import ConversionError, UnknownFormatError, convert_file, iter_convert, names
from agentrecorder.cli import main
from agentrecorder.registry import get_adapter


def _error(path, fmt="auto") -> str:
    with pytest.raises(ConversionError) as info:
        convert_file(path, fmt)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    return message


def test_truncated_json_names_line_and_column(real, tmp_path):
    text = real("swe-agent_test-repo-i1.traj").read_text()
    cut = tmp_path / "cut.traj"
    cut.write_text(text[: len(text) // 2])
    message = _error(cut)
    expected_line = text[: len(text) // 2].count("\n") + 1
    assert f"{cut}:{expected_line}: truncated JSON" in message
    assert "column" in message


def test_invalid_json_in_the_middle(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "history": [\n    {"role": "user", "content": "hi"},,\n  ]\n}\n')
    message = _error(bad)
    assert message.startswith(f"{bad}:3: invalid JSON")


def test_wrong_type_names_the_json_path(real_json, tmp_path):
    data = real_json("swe-agent_test-repo-i1.traj")
    data["trajectory"][2]["action"] = 5
    path = tmp_path / "typed.traj"
    path.write_text(json.dumps(data))
    assert _error(path) == f"{path}: $.trajectory[2].action: expected a string, got an integer (5)"


def test_bad_tool_arguments_in_a_record_list(real_json, tmp_path):
    records = real_json("tau-bench_gpt-4o-airline_tasks0-4.json")
    # record 6, message 4 is the get_user_details call
    records[6]["traj"][4]["tool_calls"][0]["function"]["arguments"] = '{"user_id": '
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(records))
    message = _error(path)
    assert "$[6].traj[4].tool_calls[0].function.arguments: arguments are not valid JSON" in message


def test_openhands_wrong_type(real_json, tmp_path):
    events = real_json("openhands_basic.json")
    events[1]["args"] = ["not", "an", "object"]
    path = tmp_path / "oh.json"
    path.write_text(json.dumps(events))
    assert _error(path) == f"{path}: $[1].args: expected an object, got a list"


@pytest.mark.parametrize("content", [b"", b"   \n\n  \t\n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.json"
    path.write_bytes(content)
    assert _error(path) == f"{path}: empty file, no records"


def test_binary_data(tmp_path):
    path = tmp_path / "image.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    assert _error(path) == f"{path}: binary data, not a JSON log (NUL byte at offset 8)"


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes('{"history": [],\n "question": "caf\xe9"}'.encode("latin-1"))
    message = _error(path)
    assert message.startswith(f"{path}:2: not UTF-8 text (byte offset")


def test_absurdly_deep_nesting(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    assert _error(path) == f"{path}: JSON nested too deeply to read"
    lines = tmp_path / "deep.jsonl"
    first = json.dumps({"conversations": [{"from": "human", "value": "hi"}]})
    lines.write_text(first + "\n" + '{"conversations": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    assert _error(lines) == f"{lines}:2: JSON nested too deeply to read"


def test_utf16_is_named(tmp_path):
    path = tmp_path / "chat.json"
    path.write_bytes('{"messages": []}'.encode("utf-16"))
    assert _error(path) == f"{path}: the file is UTF-16 text; convert it to UTF-8"


def test_non_finite_number_anywhere_is_refused_at_its_path(tmp_path):
    path = tmp_path / "run.traj"
    path.write_text('{"trajectory": [{"action": "ls", "observation": ""}], "info": {"x": [1, -Infinity]}}')
    assert _error(path) == f"{path}: $.info.x[1]: non-finite number (-Infinity)"


def test_overlong_jsonl_line_is_skipped_without_reading_it_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWLYR_MAX_LINE_BYTES", "1000")
    chat = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
    path = tmp_path / "chats.jsonl"
    path.write_text(chat + "\n" + '{"messages": "' + "x" * 200_000 + '"}\n' + chat + "\n")
    assert _error(path) == f"{path}:2: line longer than 1000 bytes (KNOWLYR_MAX_LINE_BYTES)"
    errors = []
    kept = list(iter_convert(path, on_error=errors.append))  # record by record: the next line is read
    assert len(kept) == 2 and [(e.line, e.problem[:16]) for e in errors] == [(2, "line longer than")]


def test_unknown_format_lists_every_format_and_why(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"events": [1, 2, 3]}')
    with pytest.raises(UnknownFormatError) as info:
        convert_file(path)
    assert set(info.value.reasons) == set(names())
    message = str(info.value)
    assert message.startswith(f"{path}: unknown log format (tried ")
    assert "swe-agent: no 'trajectory' with actions" in message
    assert "sharegpt: no 'conversations' list" in message


def test_jsonl_bad_line_is_named(real_json, tmp_path):
    record = real_json("tau-bench_gpt-4o-airline_tasks0-4.json")[1]
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n" + '{"task_id": 3, "traj": [\n')
    message = _error(path)
    assert message.startswith(f"{path}:3: truncated JSON")
    record["traj"][3]["content"] = {"oops": 1}
    path.write_text(json.dumps(record) + "\n\n" + json.dumps(record)[:-1] + ', "reward": "high"}\n')
    # line 1: content is an object, line 3 never reached
    assert _error(path) == (f"{path}:1: $.traj[3].content: expected a string or a list of content parts, got an object")


def test_explicit_format_that_does_not_match(real):
    path = real("tau-bench_gpt-4o-airline_tasks0-4.json")
    message = _error(path, "swe-agent")
    assert message == f"{path}: not in the swe-agent format: not a JSON object"


ROWS = "not a JSON object (a data set's rows are read one by one)"


@pytest.mark.parametrize(
    ("format_", "reason"),
    [
        ("atif", "not a JSON object"),
        ("who-and-when", "not a JSON object"),
        ("swe-agent", "not a JSON object"),
        ("adp", ROWS),
        ("nebius", ROWS),
    ],
)
def test_a_record_that_is_not_an_object_is_refused_with_the_formats_reason(format_, reason):
    """The object formats refuse a list (a whole data set read as one record) before reading a field."""
    assert get_adapter(format_).check([{"steps": [], "trajectory": [], "history": []}]) == reason


def test_jsonl_record_in_another_format(real_json, tmp_path):
    chat = real_json("tau-bench_gpt-4o-airline_tasks0-4.json")[1]
    sharegpt = {"conversations": [{"from": "human", "value": "hi"}]}
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(chat) + "\n" + json.dumps(sharegpt) + "\n")
    message = _error(path)
    assert (
        message
        == f"{path}:2: not in the openai-chat format: no 'messages' or 'traj' list of {{role, content}} messages"
    )


def test_cli_errors_are_one_line_without_traceback(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\x00\x01\x02")
    proc = subprocess.run(
        [sys.executable, "-m", "agentrecorder.cli", "convert", str(bad), "-o", str(tmp_path / "out.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{bad}: binary data" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_batch_with_bad_files_converts_the_good_ones(real, tmp_path, capsys):
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "binary.traj").write_bytes(b"\x00" * 64)
    (tmp_path / "cut.json").write_text('[{"role": "user", "content": "hi"')
    good = [real("mini-swe-agent_local.traj.json"), real("openhands_basic.json")]
    out = tmp_path / "out.jsonl"

    # without --skip-invalid the first bad file aborts and nothing is written
    assert main(["convert", str(tmp_path), *map(str, good), "-o", str(out)]) == 2
    assert not out.exists()
    capsys.readouterr()

    assert main(["convert", str(tmp_path), *map(str, good), "-o", str(out), "--skip-invalid"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    skipped = [line for line in err.splitlines() if line.startswith("warning: skipped")]
    assert len(skipped) == 3
    assert any("binary.traj: binary data" in line for line in skipped)
    assert any("cut.json:1: truncated JSON" in line for line in skipped)
    assert any("empty.json: empty file" in line for line in skipped)
    lines = out.read_text().splitlines()
    assert [json.loads(line)["agent"] for line in lines] == ["mini-swe-agent", "openhands"]
    assert "wrote 2 trajectories from 2 files" in err and "3 files skipped" in err


# Peak memory is this process's VmHWM: unlike getrusage's ru_maxrss, which Linux carries over
# from the parent across fork and exec (a pytest process that imported torch would count), the
# high-water mark starts afresh with the new address space of exec.
_MEASURE = """
import re, sys, time
from agentrecorder.cli import main
from agentrecorder.registry import get_adapter
start = time.perf_counter()
code = main(sys.argv[1:])
with open("/proc/self/status") as status:
    peak_kb = int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1))
print(code, round(time.perf_counter() - start, 2), peak_kb // 1024)
"""


def _convert_measured(*argv) -> tuple[int, float, int]:
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, "convert", *argv], capture_output=True, text=True, timeout=300
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    code, seconds, peak_mb = proc.stdout.split()
    return int(code), float(seconds), int(peak_mb)


def test_50mb_jsonl_is_streamed(tmp_path):
    path = tmp_path / "big.jsonl"
    records = 0
    with open(path, "w") as handle:
        while handle.tell() < 50 * 1024 * 1024:
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
    out = tmp_path / "out.jsonl"
    code, seconds, peak_mb = _convert_measured(str(path), "-o", str(out), "-q")
    assert code == 0
    assert len(out.read_text().splitlines()) == records
    assert peak_mb < 250, f"streaming a 50 MB JSONL peaked at {peak_mb} MB"
    assert seconds < 120


def test_50mb_json_document(tmp_path):
    path = tmp_path / "big.traj"
    entries = [
        {"action": f"cat f{i}.py", "observation": "y" * 5000, "thought": "look", "state": "{}"} for i in range(10_000)
    ]
    path.write_text(json.dumps({"trajectory": entries, "history": [], "info": {"exit_status": "submitted"}}))
    assert path.stat().st_size > 50_000_000
    out = tmp_path / "out.jsonl"
    code, seconds, peak_mb = _convert_measured(str(path), "-o", str(out), "-q")
    assert code == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(record["steps"]) == 10_000
    assert record["steps"][9999]["tool_call"]["parameters"] == {"command": "cat f9999.py"}
    assert peak_mb < 1024, f"a 50 MB JSON document peaked at {peak_mb} MB"
    assert seconds < 120


def test_50mb_truncated_document_names_the_line(tmp_path):
    path = tmp_path / "big_cut.json"
    entries = [{"action": "ls", "observation": "z" * 5000} for _ in range(10_000)]
    text = json.dumps({"trajectory": entries}, indent=1)
    path.write_text(text[: len(text) - 1000])
    message = _error(path)
    assert "truncated JSON" in message
    assert f"{path}:{text[: len(text) - 1000].count(chr(10)) + 1}:" in message
