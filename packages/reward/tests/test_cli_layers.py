"""knowlyr-reward score / eval with --layers and --prm: the figures of any layer set, one-line refusals."""

import json
import subprocess
import sys

import pytest

from agentreward import RewardEngine, evaluate
from agentreward.cli import main
from knowlyrcore.origin import install_command


def traj(tid, outputs, success):
    steps = [
        {"tool_call": {"name": name, "parameters": {"path": "a.py"}}, "observation": {"output": out}}
        for name, out in outputs
    ]
    return {
        "id": tid,
        "task": {"id": "t", "description": "fix a.py", "domain": "coding"},
        "steps": steps,
        "outcome": {"success": success},
    }


RECORDS = [
    traj("ok", [("read_file", "x = 1"), ("edit_file", "edited"), ("bash", "3 passed")], True),
    traj("bad", [("read_file", "x = 1"), ("read_file", "x = 1"), ("bash", "Traceback (most recent call last)")], False),
    traj("ok2", [("read_file", "def f"), ("bash", "1 passed")], True),
    traj("bad2", [("bash", "error: no such file or directory")], False),
]


@pytest.fixture(scope="module")
def prm(build_prm, tmp_path_factory):
    return build_prm(tmp_path_factory.mktemp("prm"), bias=0.2, weight_std=2.0)


@pytest.fixture
def labelled(tmp_path):
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


@pytest.mark.parametrize("layers", [("learned",), ("rules", "learned")])
def test_score_with_the_learned_layer(labelled, tmp_path, prm, layers, capsys):
    out = tmp_path / "scored.jsonl"
    assert main(["score", str(labelled), "-o", str(out), "-q", "--layers", ",".join(layers), "--prm", str(prm)]) == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    engine = RewardEngine(layers=layers, prm=prm)
    assert scored == [engine.score_record(r) for r in RECORDS]
    assert all("learned_value" in s["metadata"] for t in scored for s in t["steps"])
    assert "scored 4 trajectories" in capsys.readouterr().err


def test_eval_reports_the_figures_of_the_layers_asked_for(labelled, prm, capsys):
    reports = {}
    for layers in ("rules", "learned", "rules,learned"):
        args = ["eval", str(labelled), "--layers", layers] + (["--prm", str(prm)] if "learned" in layers else [])
        assert main(args) == 0
        reports[layers] = json.loads(capsys.readouterr().out)
    assert reports["rules"]["layers"] == ["rules"] and reports["rules"]["prm"] is None
    assert reports["rules,learned"]["layers"] == ["rules", "learned"] and reports["learned"]["prm"] == str(prm)
    for layers, report in reports.items():
        engine = RewardEngine(layers=layers.split(","), prm=prm if "learned" in layers else None)
        expected = evaluate(engine, RECORDS)
        assert {k: report[k] for k in expected} == expected, layers
        assert report["labelled_success"] == 4 and report["auc"] is not None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "learned"], "--layers learned needs --prm PATH"),
        (["--layers", "rules", "--prm", "{prm}"], "--prm is the learned layer's checkpoint: add learned to --layers"),
        (["--layers", "rules,llm"], "'llm': name layers among rules, judge, calibration, learned"),
        (["--layers", ","], "',': name layers among"),
        (["--layers", "judge"], "--layers judge needs --judge-model"),
        (["--layers", "rules,calibration"], "--layers calibration needs --calibration FILE"),
        (["--layers", "learned", "--prm", "{tmp}/absent"], "{tmp}/absent: no such file or directory"),
        (["--layers", "learned", "--prm", "{tmp}"], "{tmp}: not a process reward model checkpoint (no prm.json"),
        (["--layers", "learned", "--prm", "{tmp}/labelled.jsonl"], "labelled.jsonl: not a process reward model"),
        (["--layers", "learned", "--preset", "seed-003", "--prm", "{prm}"], "preset='seed-003' composes the rule"),
    ],
)
@pytest.mark.parametrize("command", ["score", "eval"])
def test_bad_layer_options_are_one_line(labelled, tmp_path, prm, command, args, message, capsys):
    args = [a.format(tmp=tmp_path, prm=prm) for a in args]
    assert main([command, str(labelled), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "Traceback" not in captured.err, captured.err
    assert message.format(tmp=tmp_path) in err[0]


def test_missing_extra_is_the_install_line(labelled, prm):
    """torch taken away (a None in sys.modules is what Python reads as not installed)."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from agentreward.cli import main\n"
        f"sys.exit(main(['score', {str(labelled)!r}, '--layers', 'learned', '--prm', {str(prm)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"error: the learned reward layer needs the 'learned' extra: {install_command('knowlyr-reward', 'learned')}"
    )
