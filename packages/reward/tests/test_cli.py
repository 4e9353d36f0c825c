import json

from agentreward.cli import main


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def traj(tid, task, tool_outputs, success=None):
    steps = [
        {"index": i, "tool_call": {"name": n, "parameters": p}, "observation": {"output": o}, "metadata": m}
        for i, (n, p, o, m) in enumerate(tool_outputs)
    ]
    return {
        "id": tid,
        "task": {"id": task, "description": "fix a.py", "domain": "coding"},
        "steps": steps,
        "outcome": {"success": success},
    }


def test_score_pairs_calibrate(tmp_path, capsys):
    good = traj(
        "g",
        "t",
        [("read_file", {"path": "a.py"}, "x", {"human_score": 1.0}), ("submit", {}, "ok", {"human_score": 0.9})],
        success=True,
    )
    bad = traj(
        "b",
        "t",
        [("read_file", {"path": "a.py"}, "x", {"mistake": True}), ("read_file", {"path": "a.py"}, "x", {})],
        success=False,
    )
    write(tmp_path / "in.jsonl", [good, bad, good | {"id": "g2"}, bad | {"id": "b2"}])
    assert main(["score", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "s.jsonl"), "-q"]) == 0
    scored = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert scored[0]["reward"] > scored[1]["reward"]
    assert main(["pairs", str(tmp_path / "s.jsonl"), "-o", str(tmp_path / "p.jsonl")]) == 0
    pairs = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert {(p["chosen"]["id"][0], p["rejected"]["id"][0]) for p in pairs} == {("g", "b")}
    assert main(["calibrate", str(tmp_path / "s.jsonl"), "-o", str(tmp_path / "c.json")]) == 0
    assert json.loads((tmp_path / "c.json").read_text())["report"]["n_labels"] == 6
    assert (
        main(
            [
                "score",
                str(tmp_path / "in.jsonl"),
                "-o",
                str(tmp_path / "s2.jsonl"),
                "-q",
                "--calibration",
                str(tmp_path / "c.json"),
            ]
        )
        == 0
    )


def test_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text('{"steps": "nope"}\n')
    assert main(["score", str(tmp_path / "bad.jsonl"), "-o", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "bad.jsonl:1: steps: must be a list" in err and err.count("\n") == 1
    assert not (tmp_path / "o.jsonl").exists()
    assert main(["score", str(tmp_path / "bad.jsonl"), "-o", "x", "--judge-url", "http://x"]) == 2
    assert "--judge-model" in capsys.readouterr().err


def test_rubrics(capsys):
    assert main(["rubrics", "--domain", "coding"]) == 0
    out = capsys.readouterr().out
    assert "goal_progress      model  weight 0.30" in out and "non_redundancy     rule   weight 0.15" in out
