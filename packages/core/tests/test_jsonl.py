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
    with pytest.raises(DataFormatError, match="No such file"):
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
