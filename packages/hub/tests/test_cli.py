import json

from knowlyrcore import read_jsonl, write_trajectories
from trajectoryhub.cli import main


def test_export_dedup_evaluate_compare(traj, tmp_path, capsys):
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    write_trajectories(
        a,
        [
            traj("a1", "x", reward=0.9, agent="alpha"),
            traj("a2", "y", reward=0.8, agent="alpha"),
            traj("a3", "x", reward=0.1, agent="alpha"),
        ],
    )
    write_trajectories(b, [traj("b1", "x", reward=0.2, agent="beta"), traj("b2", "y", reward=0.3, agent="beta")])
    assert main(["export", "--format", "sft", "-t", str(a), "-o", str(tmp_path / "sft.jsonl")]) == 0
    assert not list(read_jsonl(tmp_path / "sft.jsonl"))  # nobody judged these runs a success
    assert capsys.readouterr().err == (
        f"sft: wrote 0 records to {tmp_path / 'sft.jsonl'}; left out 3: 3 not successful "
        "(failed or not judged; --include-failures keeps them)\n"
    )
    argv = ["export", "--format", "sft", "-t", str(a), "-o", str(tmp_path / "sft.jsonl"), "--min-reward", "0.5"]
    assert main([*argv, "--include-failures"]) == 0
    assert len(list(read_jsonl(tmp_path / "sft.jsonl"))) == 2
    assert "wrote 2 records" in capsys.readouterr().err
    assert main([*argv, "--success-only"]) == 0  # the old flag: the default now
    assert main([*argv, "--success-only", "--include-failures"]) == 2
    assert main(["export", "--format", "dpo", "-t", str(a), "-o", str(tmp_path / "d.jsonl"), "--include-failures"]) == 2
    assert "--include-failures is for --format sft" in capsys.readouterr().err
    assert main(["export", "--format", "dpo", "-t", str(a), "-o", str(tmp_path / "dpo.jsonl")]) == 0
    assert "dpo: wrote 1 records" in capsys.readouterr().err
    assert main(["export", "--format", "grpo", "-t", str(a), str(b), "-o", str(tmp_path / "g.jsonl")]) == 0
    assert main(["dedup", "-t", str(a), str(a), "-o", str(tmp_path / "u.jsonl"), "--store", str(tmp_path / "cas")]) == 0
    assert "6 trajectories, 2 unique" in capsys.readouterr().err  # a1 and a3: same task, same steps
    assert main(["evaluate", "-t", str(a)]) == 0
    assert json.loads(capsys.readouterr().out)["agent"] == "alpha"
    assert main(["compare", "-t", str(a), "-t", str(b)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[1] == "alpha" and "alpha vs beta" in out


def test_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"steps": 3}\n')
    assert main(["export", "--format", "sft", "-t", str(bad), "-o", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:1: steps:") and err.count("\n") == 1
