import json
import os

import pytest

from knowlyrcore import DataFormatError, Trajectory, read_jsonl, read_trajectories, write_jsonl, write_trajectories


def test_write_then_read(tmp_path):
    path = tmp_path / "sub" / "data.jsonl"
    assert write_jsonl(path, [{"a": 1}, {"a": "é"}]) == 2
    assert list(read_jsonl(path)) == [{"a": 1}, {"a": "é"}]
    assert "é" in path.read_text(encoding="utf-8")  # UTF-8, not \u escapes


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n\n   \n{"a": 2\n')
    reader = read_jsonl(path)
    assert next(reader) == {"a": 1}
    with pytest.raises(DataFormatError, match=r"d.jsonl:4: invalid JSON") as info:
        next(reader)
    assert info.value.line == 4


def test_non_object_lines_are_errors(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(DataFormatError, match=r":1: expected a JSON object, got list"):
        list(read_jsonl(path))


def test_binary_data_is_an_error(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"a": 1}\n\xff\xfe\x00garbage\n')
    with pytest.raises(DataFormatError, match=r":2: not UTF-8"):
        list(read_jsonl(path))


def test_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataFormatError, match=r"absent.jsonl: no such file or directory$"):
        list(read_jsonl(tmp_path / "absent.jsonl"))


def test_model_errors_name_line_and_field(tmp_path):
    path = tmp_path / "t.jsonl"
    good = Trajectory().model_dump(mode="json")
    bad = Trajectory().model_dump(mode="json")
    bad["steps"] = [{"index": 0, "tool_call": {"name": 5}}]
    write_jsonl(path, [good, bad])
    with pytest.raises(DataFormatError) as info:
        list(read_trajectories(path))
    assert info.value.line == 2
    assert info.value.field == "steps[0].tool_call.name"
    assert str(info.value).startswith(f"{path}:2: steps[0].tool_call.name: Input should be a valid string")
    assert "\n" not in str(info.value)


def test_reading_streams(tmp_path):
    path = tmp_path / "big.jsonl"
    write_jsonl(path, ({"i": i} for i in range(1000)))
    reader = read_jsonl(path)
    assert next(reader) == {"i": 0}  # no need to parse the other 999 lines first


def test_write_is_atomic_on_failure(tmp_path):
    path = tmp_path / "d.jsonl"
    write_jsonl(path, [{"keep": True}])

    def exploding():
        yield {"new": 1}
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        write_jsonl(path, exploding())
    assert list(read_jsonl(path)) == [{"keep": True}]
    assert os.listdir(tmp_path) == ["d.jsonl"]  # no temp file left behind


def test_append_keeps_existing_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    write_jsonl(path, [{"n": 1}])
    write_jsonl(path, [{"n": 2}], append=True)
    assert [r["n"] for r in read_jsonl(path)] == [1, 2]


def test_write_trajectories_validates_dicts(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [Trajectory(id="a"), {"id": "b"}])
    assert [t.id for t in read_trajectories(path)] == ["a", "b"]
    with pytest.raises(DataFormatError, match=r"<trajectory #0>: steps: Input should be a valid list"):
        write_trajectories(path, [{"steps": 3}])
    assert [t.id for t in read_trajectories(path)] == ["a", "b"]


def test_written_records_are_one_per_line(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(path, [{"text": "line1\nline2"}])
    lines = path.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == {"text": "line1\nline2"}


# ------------------------------------------------ encodings, long lines, schema_version (issue 12)


def test_utf16_file_is_named_as_such(tmp_path):
    path = tmp_path / "u16.jsonl"
    path.write_bytes('{"a": 1}\n'.encode("utf-16"))
    with pytest.raises(DataFormatError, match=rf"^{path}:1: the file is UTF-16 text; convert it to UTF-8$"):
        list(read_jsonl(path))


def test_latin1_and_binary_name_the_line_and_byte(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"a": 1}\n{"name": "caf\xe9"}\n')
    with pytest.raises(
        DataFormatError, match=rf"^{path}:2: not UTF-8 text \(byte 13\); is it a binary, Latin-1 or UTF-16 file\?$"
    ):
        list(read_jsonl(path))


def test_utf8_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n{"a": 2}\n')
    assert [r["a"] for r in read_jsonl(path)] == [1, 2]


def test_long_line_is_refused_and_skipped_with_on_error(tmp_path, monkeypatch):
    path = tmp_path / "long.jsonl"
    path.write_text('{"a": 1}\n{"a": "' + "x" * 5000 + '"}\n{"a": 3}\n')
    monkeypatch.setenv("KNOWLYR_MAX_LINE_BYTES", "1000")
    with pytest.raises(
        DataFormatError, match=rf"^{path}:2: line longer than 1000 bytes \(limit: KNOWLYR_MAX_LINE_BYTES\)$"
    ):
        list(read_jsonl(path))
    problems = []
    kept = [r["a"] for r in read_jsonl(path, on_error=problems.append)]
    assert kept == [1, 3] and [p.line for p in problems] == [2]
    monkeypatch.setenv("KNOWLYR_MAX_LINE_BYTES", "-5")
    with pytest.raises(DataFormatError, match="KNOWLYR_MAX_LINE_BYTES: expected a positive number of bytes"):
        list(read_jsonl(path))


@pytest.mark.parametrize(
    ("version", "problem"),
    [
        ("2.0", "schema_version: unsupported version '2.0' (this reader accepts 1.x)"),
        ("0.9", "schema_version: unsupported version '0.9' (this reader accepts 1.x)"),
        (1.0, "schema_version: must be a string like '1.0', got float"),
        (None, "schema_version: must be a string like '1.0', got NoneType"),
    ],
)
def test_every_record_with_a_foreign_schema_version_is_refused(tmp_path, version, problem):
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps({"schema_version": "1.3"}) + "\n" + json.dumps({"schema_version": version}) + "\n")
    with pytest.raises(DataFormatError) as info:
        list(read_jsonl(path))  # plain records too, not only trajectories
    assert str(info.value) == f"{path}:2: {problem}"


def test_records_without_schema_version_are_the_current_version(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text('{"id": "t1"}\n{"schema_version": "1.9", "id": "t2"}\n')
    assert [r["id"] for r in read_jsonl(path)] == ["t1", "t2"]


def test_hostile_a_lone_surrogate_is_written_escaped_and_reads_back(tmp_path):
    # a policy's output can hold "\ud800", which has no UTF-8 form: the record must still be kept
    path = tmp_path / "out.jsonl"
    records = [{"answer": "bad \ud800 text", "note": "café"}, {"answer": "fine"}]
    write_jsonl(path, records)
    assert "\\ud800" in path.read_text(encoding="utf-8")
    assert list(read_jsonl(path)) == records
