"""convert → validate → read back: lossless for every field the schema keeps."""

from __future__ import annotations

from agentrecorder import convert_file, expand_inputs
from agentrecorder.cli import main
from knowlyrcore.jsonl import read_trajectories, write_trajectories
from knowlyrcore.trajectory import Trajectory


def test_convert_validate_read_back(real_logs_folder, tmp_path, capsys):
    folder = real_logs_folder
    out = tmp_path / "all.jsonl"
    assert main(["convert", str(folder), "-o", str(out), "-q"]) == 0
    assert main(["validate", str(out)]) == 0
    assert f"{out}: ok, 34 trajectories" in capsys.readouterr().out

    expected: list[Trajectory] = [t for path in expand_inputs([folder]) for t in convert_file(path)]
    back = list(read_trajectories(out))
    assert len(back) == len(expected) == 34
    for original, reread in zip(expected, back, strict=True):
        assert reread == original
        assert reread.model_dump() == original.model_dump()  # every field, nested metadata included
        assert reread.model_fields_set >= {"id", "task", "steps", "outcome", "source", "metadata"}

    # writing what was read gives the same bytes: nothing is lost or reordered
    again = tmp_path / "again.jsonl"
    write_trajectories(again, back)
    assert again.read_bytes() == out.read_bytes()


def test_validate_rejects_a_corrupted_trajectory_file(real, tmp_path, capsys):
    out = tmp_path / "one.jsonl"
    assert main(["convert", str(real("swe-agent_test-repo-i1.traj")), "-o", str(out), "-q"]) == 0
    line = out.read_text().replace('"index": 3', '"index": 7')
    out.write_text(line + line)
    assert main(["validate", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"error: {out}:1: ")
    assert err.endswith("steps[3].index is 7, expected 3 (steps must be in order)")
