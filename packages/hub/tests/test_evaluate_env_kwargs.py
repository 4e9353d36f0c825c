"""``knowlyr-hub evaluate --env-kwargs``: the environment's keyword arguments from the command line,
as a user's own MCP server needs them (docs/mcp-env.md), over the suite's."""

import json

import pytest

from knowlyrcore import read_trajectories, write_jsonl
from knowlyrcore.testing import require_module
from trajectoryhub.cli import main


@pytest.mark.integration
def test_the_env_runs_with_the_keywords_given(tmp_path, capsys):
    require_module("agentsandbox.mcp", "knowlyr/mcp needs knowlyr-sandbox and its mcp extra")
    from agentsandbox.suites.mcp_git import MCP_GIT
    from agentsandbox.testing import require_mcp_server

    require_mcp_server(MCP_GIT.env_kwargs["server"])
    tasks, out = tmp_path / "git.jsonl", tmp_path / "runs.jsonl"
    assert main(["tasks", "mcp-git", "--split", "test", "--n", "3", "--seed", "4", "-o", str(tasks)]) == 0
    argv = ["evaluate", "--policy", "expert", "--tasks", str(tasks), "--env", "knowlyr/mcp", "-o", str(out)]
    # the suite's server, with observations cut at 30 characters: only the given keywords can do that
    assert main([*argv, "--env-kwargs", json.dumps({**MCP_GIT.env_kwargs, "max_observation_chars": 30})]) == 0
    runs = list(read_trajectories(out))
    assert len(runs) == 3 and all(r.outcome.success for r in runs)
    shown = [s.observation.output for r in runs for s in r.steps[:-1]]  # every tool result before respond
    assert shown and all(o.endswith("more characters cut]") and len(o.split("\n")[0]) <= 30 for o in shown), shown
    capsys.readouterr()


@pytest.mark.parametrize(
    ("value", "problem"),
    [("{not json", "not JSON"), ("[1, 2]", "a JSON object is needed, got list"), ('"text"', "got str")],
)
def test_env_kwargs_that_are_no_json_object_are_one_line(tmp_path, capsys, value, problem):
    tasks = tmp_path / "tasks.jsonl"
    write_jsonl(tasks, [{"id": "t", "description": "anything"}])
    code = main(
        ["evaluate", "--policy", "expert", "--tasks", str(tasks), "--env", "hubtest/none", "--env-kwargs", value]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "--env-kwargs" in err and problem in err and err.count("\n") == 1, err
