"""The four commands of docs/mcp-env.md, as a user runs them on a server of their own.

``mcp-server-sqlite`` (a published server nobody here wrote) on a folder holding the user's
database, copied afresh for every episode: (1) ``knowlyr-hub tasks mcp`` has a model write the
tasks from the server's tool list, (2) ``knowlyr-hub evaluate`` plays a checkpoint on them, (3)
``knowlyr-trainer grpo --online`` trains it with the group-relative judge as reward, (4) the
trained checkpoint is evaluated the same way. The task writer and the judge are real loopback
chat servers answering from a script (what they say is not under test here: the flow is); the
server, the sandbox, the model, the trainer and the files between the commands are all real.
"""

import json
import sqlite3

import pytest

from knowlyrcore import read_jsonl, read_trajectories
from knowlyrcore.testing import ScriptedChatServer, require_module

require_module("agentsandbox.mcp", "knowlyr/mcp needs knowlyr-sandbox and its mcp extra")
require_module("agenttrainer", "the trained model is knowlyr-trainer's")

from agentsandbox.testing import require_mcp_server  # noqa: E402
from agenttrainer.cli import main as trainer  # noqa: E402
from agenttrainer.models import build_tiny_model, save_model  # noqa: E402
from trajectoryhub.cli import main as hub  # noqa: E402

SERVER = "mcp-server-sqlite --db-path {workspace}/shop.db"
TASKS = [
    {
        "description": "How many customers does the shop have?",
        "rubric": "Counts the rows of the customers table with a query and states the number.",
        "answer_contains": ["3"],
    },
    {
        "description": "Which customer lives in Oslo?",
        "rubric": "Looks the city up in the customers table and names that customer.",
        "answer_contains": ["Ingrid"],
    },
]


@pytest.fixture
def shop(tmp_path):
    """The user's folder: a database the server opens at ``{workspace}/shop.db``."""
    folder = tmp_path / "shop"
    folder.mkdir()
    with sqlite3.connect(folder / "shop.db") as db:
        db.execute("CREATE TABLE customers (name TEXT, city TEXT)")
        db.executemany("INSERT INTO customers VALUES (?, ?)", [("Ada", "Leeds"), ("Ingrid", "Oslo"), ("Li", "Xi'an")])
    return folder


@pytest.mark.integration
def test_tasks_evaluate_train_evaluate_on_a_server_of_your_own(shop, tmp_path, capsys, monkeypatch):
    require_mcp_server(SERVER)
    monkeypatch.chdir(tmp_path)
    checkpoint = str(save_model(*build_tiny_model(seed=0), tmp_path / "tiny"))
    env_kwargs = json.dumps({"server": SERVER})

    with ScriptedChatServer() as writer:  # 1. the tasks
        writer.replies.append({"content": json.dumps({"tasks": TASKS})})
        argv = ["tasks", "mcp", "--server", SERVER, "--workspace-copy", "shop", "--generator-url", writer.base_url]
        assert hub([*argv, "--generator-model", "writer", "-n", "2", "-o", "tasks.jsonl"]) == 0
    tasks = list(read_jsonl(tmp_path / "tasks.jsonl"))
    assert [t["description"] for t in tasks] == [t["description"] for t in TASKS]
    assert all(t["metadata"]["workspace"] == {"copy": "shop"} and t["metadata"]["rubric"] for t in tasks)

    def evaluate(policy: str, out: str) -> list:  # 2. and 4.
        argv = ["evaluate", "--policy", policy, "--tasks", "tasks.jsonl", "--env", "knowlyr/mcp"]
        assert hub([*argv, "--env-kwargs", env_kwargs, "--max-new-tokens", "16", "-o", out]) == 0
        runs = list(read_trajectories(tmp_path / out))
        assert len(runs) == 2 and not any("infrastructure_failure" in r.metadata for r in runs)
        return runs

    evaluate(checkpoint, "base.jsonl")

    with ScriptedChatServer() as judge:  # 3. online RL, the judge ranking each group
        judge.replies += [{"content": '{"scores": [0.9, 0.1]}'}, {"content": '{"scores": [0.2, 0.7]}'}]
        argv = [
            "grpo",
            "--online",
            "--env",
            "knowlyr/mcp",
            "--tasks",
            "tasks.jsonl",
            "--model",
            checkpoint,
            "--env-kwargs",
            env_kwargs,
            "--group-judge-url",
            judge.base_url,
            "--group-judge-model",
            "judge",
            "--output-dir",
            "rl",
            "--num-iterations",
            "2",
            "--tasks-per-iteration",
            "1",
            "--group-size",
            "2",
            "--max-steps",
            "2",
            "--max-new-tokens",
            "16",
        ]
        assert trainer(argv) == 0
        assert len(judge.requests) == 2  # one call per group, each showing the task's rubric
        shown = [json.dumps(r["body"]["messages"]) for r in judge.requests]
        assert all(any(t["rubric"] in text for t in TASKS) for text in shown)
    capsys.readouterr()

    evaluate(str(tmp_path / "rl" / "final"), "rl.jsonl")
