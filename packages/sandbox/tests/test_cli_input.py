"""Bad input to ``knowlyr-sandbox`` (issue #12): every malformed file, option or id is one line
``error: FILE[:LINE]: problem`` on stderr, exit 2, no traceback, before any sandbox starts, and
an existing ``--output`` file is left as it was. Run in-process through ``main``."""

import json

import pytest

from agentsandbox.cli import main

TASK = {"description": "x", "domain": "coding"}
ACTION = {"tool": "submit", "params": {}}
TRAJECTORY = {
    "task": TASK,
    "source": "env:knowlyr/sandbox",
    "steps": [{"index": 0, "tool_call": {"name": "submit", "parameters": {}}, "observation": {"output": ""}}],
}

BAD_FILES = [  # (content, the stderr line after "error: FILE")
    (b"", ": empty file, no {what}"),
    (b'{"description": "x", "dom', ":1: invalid JSON: Unterminated string starting at (column 22)"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), ":1: not UTF-8 text (byte 0); is it a binary, Latin-1 or UTF-16 file?"),
    ('{"description": "x"}\n'.encode("utf-16"), ":1: the file is UTF-16 text; convert it to UTF-8"),
    (
        '{"description": "café"}\n'.encode("latin-1"),
        ":1: not UTF-8 text (byte 20); is it a binary, Latin-1 or UTF-16 file?",
    ),
    (b"[" * 100_000 + b"]" * 100_000, ":1: nested deeper than 100 levels"),
    (b'{"description": "x", "metadata": {"b": NaN}}', ":1: metadata.b: non-finite number (NaN)"),
]


def sandbox(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err.splitlines()


@pytest.fixture
def files(tmp_path):
    (tmp_path / "task.json").write_text(json.dumps(TASK))
    (tmp_path / "actions.jsonl").write_text(json.dumps(ACTION) + "\n")
    (tmp_path / "out.jsonl").write_text('{"kept": true}\n')
    return tmp_path


def run_args(path):
    return [
        "run",
        path / "task.json",
        "--backend",
        "local",
        "--actions",
        path / "actions.jsonl",
        "--output",
        path / "out.jsonl",
    ]


@pytest.mark.parametrize(("content", "problem"), BAD_FILES)
@pytest.mark.parametrize("which", ["task.json", "actions.jsonl"])
def test_run_refuses_malformed_task_and_action_files(capsys, files, which, content, problem):
    (files / which).write_bytes(content)
    what = "task" if which == "task.json" else "actions"
    assert sandbox(capsys, *run_args(files)) == (2, "", [f"error: {files / which}{problem.format(what=what)}"])
    assert (files / "out.jsonl").read_text() == '{"kept": true}\n'


@pytest.mark.parametrize(("content", "problem"), BAD_FILES)
def test_replay_refuses_malformed_trajectory_files(capsys, tmp_path, content, problem):
    path = tmp_path / "traj.jsonl"
    path.write_bytes(content)
    expected = problem.format(what="task") if content else ": no trajectories (empty file)"
    assert sandbox(capsys, "replay", path, "--backend", "local") == (2, "", [f"error: {path}{expected}"])


def test_a_bad_line_after_many_good_ones_is_named_before_anything_runs(capsys, files):
    good = json.dumps(TRAJECTORY)
    (files / "traj.jsonl").write_text((good + "\n") * 49_999 + good[:40] + "\n")
    code, out, err = sandbox(capsys, "replay", files / "traj.jsonl", "--backend", "local")
    assert (code, out) == (2, "") and err[0].startswith(f"error: {files / 'traj.jsonl'}:50000: invalid JSON")
    (files / "actions.jsonl").write_text((json.dumps(ACTION) + "\n") * 49_999 + '{"tool": 5}\n')
    assert sandbox(capsys, *run_args(files)) == (
        2,
        "",
        [f"error: {files / 'actions.jsonl'}:50000: action field 'tool' must be a non-empty string, got 5"],
    )
    assert (files / "out.jsonl").read_text() == '{"kept": true}\n'


def test_an_overlong_line_is_refused_unread(capsys, files, monkeypatch):
    monkeypatch.setenv("KNOWLYR_MAX_LINE_BYTES", "1000")  # stands for the 16 MiB default
    (files / "task.json").write_text(json.dumps({"description": "a" * 5000}))
    assert sandbox(capsys, *run_args(files))[2] == [
        f"error: {files / 'task.json'}:1: line longer than 1000 bytes (limit: KNOWLYR_MAX_LINE_BYTES)"
    ]
    (files / "traj.jsonl").write_text(json.dumps({**TRAJECTORY, "id": "a" * 5000}) + "\n")
    assert sandbox(capsys, "replay", files / "traj.jsonl")[2] == [
        f"error: {files / 'traj.jsonl'}:1: line longer than 1000 bytes (limit: KNOWLYR_MAX_LINE_BYTES)"
    ]


def test_wrong_field_types_name_the_file_line_and_field(capsys, files):
    (files / "task.json").write_text(json.dumps({"description": "x", "max_steps": "many"}))
    assert sandbox(capsys, *run_args(files)) == (
        2,
        "",
        [
            f"error: {files / 'task.json'}:1: max_steps: Input should be a valid integer, "
            "unable to parse string as an integer"
        ],
    )
    (files / "task.json").write_text(json.dumps(TASK))
    (files / "actions.jsonl").write_text(json.dumps([ACTION, {"tool": "bash", "params": []}]))
    assert sandbox(capsys, *run_args(files))[2] == [
        f"error: {files / 'actions.jsonl'}: [1]: action field 'params' of tool 'bash' must be a dict, got list"
    ]
    (files / "traj.jsonl").write_text(json.dumps({**TRAJECTORY, "steps": "many"}) + "\n")
    assert sandbox(capsys, "replay", files / "traj.jsonl")[2] == [
        f"error: {files / 'traj.jsonl'}:1: steps: Input should be a valid list"
    ]


def test_a_json_document_over_several_lines_is_read_and_its_errors_have_lines(capsys, files):
    (files / "task.json").write_text('{\n  "description": "x",\n  "domain": coding\n}\n')
    assert sandbox(capsys, *run_args(files))[2] == [
        f"error: {files / 'task.json'}:3: invalid JSON: Expecting value (column 13)"
    ]


def test_trajectories_of_unknown_environments_are_refused_before_replaying(capsys, files):
    path = files / "traj.jsonl"
    path.write_text(json.dumps(TRAJECTORY) + "\n" + json.dumps({**TRAJECTORY, "source": "env:knowlyr/nope"}) + "\n")
    code, _, err = sandbox(capsys, "replay", path, "--backend", "local")
    assert code == 2 and err[0].startswith(f"error: {path}:2: source: unknown environment 'knowlyr/nope'")
    no_env = {**TRAJECTORY, "source": None, "task": {**TASK, "domain": "nowhere"}}
    path.write_text(json.dumps(no_env) + "\n")
    code, _, err = sandbox(capsys, "replay", path, "--backend", "local")
    assert code == 2 and err[0].startswith(f"error: {path}:1: ") and err[0].endswith("; pass --env")
    code, _, err = sandbox(capsys, "replay", path, "--env", "knowlyr/nope")
    assert code == 2 and err[0].startswith("error: unknown environment 'knowlyr/nope'")


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["exec", "--backend", "local"], "give a command after -- (see 'knowlyr-sandbox exec --help')"),
        (["exec", "--timeout", "0", "--", "ls"], "Invalid value for '--timeout': 0.0 is not in the range x>0."),
        (["run", "{task}", "--backend", "local"], "give --actions FILE, or --endpoint URL and --model NAME"),
        (["run", "{task}", "--actions", "{actions}", "--max-steps", "0"], "Invalid value for '--max-steps'"),
        (["run", "{task}", "--actions", "{actions}", "--output", "{dir}"], "Invalid value for '-o' / '--output'"),
        (["run", "{task}", "--backend", "bogus"], "Invalid value for '--backend': 'bogus' is not one of"),
        (["run", "{dir}/missing.json", "--actions", "{actions}"], "{dir}/missing.json: no such file or directory"),
        (["run", "{task}", "--actions", "{dir}/missing.jsonl"], "{dir}/missing.jsonl: no such file or directory"),
        (["replay", "{dir}/missing.jsonl"], "{dir}/missing.jsonl: no such file or directory"),
        (["replay", "{dir}", "--backend", "local"], "{dir}: Is a directory"),
    ],
)
def test_bad_options_and_paths_exit_2_with_one_line(capsys, files, args, problem):
    names = {"task": files / "task.json", "actions": files / "actions.jsonl", "dir": files}
    code, out, err = sandbox(capsys, *[a.format(**names) for a in args])
    assert (code, out, len(err)) == (2, "", 1) and err[0].startswith(f"error: {problem.format(**names)}")


def test_unsafe_task_files_are_bad_input_and_leave_the_output_alone(capsys, files):
    from agentsandbox.testing import require_backend

    require_backend("local")
    (files / "task.json").write_text(json.dumps({**TASK, "metadata": {"files": {"../evil": "x"}}}))
    code, out, err = sandbox(capsys, *run_args(files))
    assert (code, out) == (2, "") and err[0].startswith(f"error: {files / 'task.json'}:1: metadata.files: unsafe")
    assert (files / "out.jsonl").read_text() == '{"kept": true}\n'
