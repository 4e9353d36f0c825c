"""``knowlyr-hub tasks`` and ``knowlyr-hub evaluate --policy``, and ``evaluate_policy`` underneath them."""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec

import pytest

from knowlyrcore import AgentEnv, InvalidActionError, TaskInfo, TimeStep, read_trajectories, register, unregister
from knowlyrcore.actions import parse_action
from knowlyrcore.origin import install_command
from knowlyrcore.testing import require
from trajectoryhub.cli import main
from trajectoryhub.evaluate import compare_stages, evaluate_policy

ENV_ID = "hubtest/plan-v0"
PLANS = {"p0": ["lookup", "respond"], "p1": ["lookup", "act", "respond"], "p2": ["act", "respond"], "p3": ["respond"]}


class PlanEnv(AgentEnv):
    """Carry out the task's plan: the episode ends at ``respond`` and succeeds when the calls made
    equal the tools of ``metadata["solution"]`` (as the retail env checks against its solution)."""

    domain = "hubtest"

    def reset(self, *, task=None, seed=None):
        self.task = TaskInfo.coerce(task)
        self.calls = []
        return TimeStep(f"task: {self.task.description}")

    def step(self, action):
        tool, _ = parse_action(action)
        if tool not in self.available_tools:
            raise InvalidActionError(f"unknown tool {tool!r}")
        self.calls.append(tool)
        if tool != "respond":
            return TimeStep(f"{tool}: done")
        ok = self.calls == [a["tool"] for a in self.task.metadata["solution"]]
        return TimeStep("bye", reward=1.0 if ok else 0.0, terminated=True, info={"success": ok})

    @property
    def available_tools(self):
        return ["lookup", "act", "respond"]


@pytest.fixture
def plan_env():
    register(ENV_ID, PlanEnv)
    yield ENV_ID
    unregister(ENV_ID)


def plan_tasks():
    return [
        {
            "id": tid,
            "description": f"do {' then '.join(tools)}",
            "domain": "hubtest",
            "metadata": {"solution": [{"tool": t, "params": {}} for t in tools]},
        }
        for tid, tools in PLANS.items()
    ]


@pytest.fixture
def tasks_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in plan_tasks()))
    return path


class Hasty:
    """Answers at once, whatever the task."""

    def __call__(self, observation):
        return {"tool": "respond", "params": {"message": "done"}}


def test_evaluate_policy_scripted_policies(plan_env):
    """Hasty solves only p3 (plan [respond]). Its tool-selection F1 per task: p0 [respond] vs
    [lookup, respond] P=1 R=1/2 -> 2/3; p1 R=1/3 -> 1/2; p2 -> 2/3; p3 -> 1: mean 17/24.
    Plans followed: only p3. Against the expert (4/4): a_only = 3, b_only = 0,
    McNemar p = 2 * (1/2)^3 = 0.25."""
    summary, hasty = evaluate_policy(Hasty, plan_tasks(), env=plan_env, name="hasty", split="dev", progress=False)
    assert [t.task.id for t in hasty] == list(PLANS) and all(t.agent == "hasty" for t in hasty)
    assert summary["name"] == "hasty" and summary["split"] == "dev" and summary["n"] == 4
    assert summary["success_rate"] == 0.25 and summary["mean_reward"] == 0.25
    metrics = summary["metrics"]
    assert metrics["tool_selection_accuracy"]["mean"] == pytest.approx(17 / 24)
    assert metrics["plan_success_rate"]["mean"] == 0.25
    assert metrics["step_efficiency"] == {"mean": 1.0, "std": 0.0, "count": 1}
    assert metrics["timing"]["count"] == 4 and metrics["timing"]["mean"] >= 0

    from trajectoryhub.evaluate import ExpertReplay

    expert_summary, expert = evaluate_policy(ExpertReplay, plan_tasks(), env=plan_env, name="expert", progress=False)
    assert expert_summary["success_rate"] == 1.0 and expert_summary["metrics"]["step_efficiency"]["mean"] == 1.0
    (row,) = compare_stages({"expert": expert, "hasty": hasty})
    assert (row["a_only"], row["b_only"], row["p_value"]) == (3, 0, 0.25)


def test_evaluate_expert_cli_writes_report_and_trajectories(plan_env, tasks_file, tmp_path, capsys):
    out, report_dir = tmp_path / "run.jsonl", tmp_path / "report"
    code = main(
        [
            "evaluate",
            "--policy",
            "expert",
            "--tasks",
            str(tasks_file),
            "--env",
            plan_env,
            "--split",
            "dev",
            "--report-dir",
            str(report_dir),
            "-o",
            str(out),
            "--batch-size",
            "3",
        ]
    )
    assert code == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["stage", "split", "n", "success"]
    assert row.split()[:4] == ["expert", "dev", "4", "100.0%"]
    trajectories = list(read_trajectories(out))
    assert [t.task.id for t in trajectories] == list(PLANS) and all(t.outcome.success for t in trajectories)
    report = json.loads((report_dir / "report.json").read_text())
    (stage,) = report["stages"]
    assert stage["name"] == "expert" and stage["ci95"][1] == 1.0 and report["comparisons"] == []
    assert report["env"] == plan_env and report["policy"] == "expert" and report["seconds"] > 0
    for metric in ("tool_selection_accuracy", "plan_success_rate", "step_efficiency", "end_to_end_success"):
        assert stage["metrics"][metric] == {"mean": 1.0, "std": 0.0, "count": 4}
    assert (report_dir / "success.png").exists() and 'id="plot-success"' in (report_dir / "report.html").read_text()


def test_evaluate_finds_the_env_of_the_tasks_domain(plan_env, tasks_file, capsys):
    assert main(["evaluate", "--policy", "expert", "--tasks", str(tasks_file)]) == 0
    assert "100.0%" in capsys.readouterr().out


def test_evaluate_errors(plan_env, tasks_file, tmp_path, capsys, monkeypatch):
    def error(argv):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
        return err

    assert "needs --tasks" in error(["evaluate", "--policy", "expert"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(plan_tasks()[0]) + "\n" + json.dumps({"id": "x", "max_steps": 0}) + "\n")
    assert error(["evaluate", "--policy", "expert", "--tasks", str(bad), "--env", plan_env]).startswith(
        f"error: {bad}:2: max_steps:"
    )
    assert "needs --model" in error(
        ["evaluate", "--policy", "http://127.0.0.1:9/v1", "--tasks", str(tasks_file), "--env", plan_env]
    )
    if find_spec("agenttrainer") is not None:
        missing = str(tmp_path / "no-such-checkpoint")
        assert "does not exist" in error(
            ["evaluate", "--policy", missing, "--tasks", str(tasks_file), "--env", plan_env]
        )
    no_domain = tmp_path / "generic.jsonl"
    no_domain.write_text(json.dumps({"id": "g", "description": "?", "metadata": {"solution": []}}) + "\n")
    assert "pass --env" in error(["evaluate", "--policy", "expert", "--tasks", str(no_domain)])
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "matplotlib.figure", None)  # as if matplotlib were absent: fail before running
        out = tmp_path / "never.jsonl"
        argv = ["evaluate", "--policy", "expert", "--tasks", str(tasks_file), "--env", plan_env, "-o", str(out)]
        assert "knowlyr-hub[report]" in error([*argv, "--report-dir", str(tmp_path / "r")])
        assert not out.exists()
    monkeypatch.setitem(sys.modules, "agenttrainer.acting", None)  # as if knowlyr-trainer were absent
    assert install_command("knowlyr-hub", "trainer") in error(
        ["evaluate", "--policy", "./ckpt", "--tasks", str(tasks_file), "--env", plan_env]
    )
    # -t and --policy are two different evaluations
    assert "either --policy" in error(["evaluate", "-t", str(tasks_file), "--policy", "expert"])
    assert "either --policy" in error(["evaluate"])


def smollm2_evaluate(tasks_file, env_id) -> list[str]:
    """``knowlyr-hub evaluate`` of the embedded SmolLM2-135M on ``tasks_file`` in ``env_id``."""
    return ["evaluate", "--policy", "smollm2-135m", "--tasks", str(tasks_file), "--env", env_id]


@pytest.mark.integration
def test_evaluate_local_model(plan_env, tasks_file, tmp_path, capsys):
    """The embedded SmolLM2-135M plays every task in one batch; whatever it answers, each episode
    is recorded and scored against the expert's plan."""
    require(find_spec("agenttrainer") is not None, "local model policies need knowlyr-trainer")
    out = tmp_path / "smol.jsonl"
    model_options = ["--max-steps", "3", "--max-new-tokens", "32"]
    code = main(
        [*smollm2_evaluate(tasks_file, plan_env), *model_options, "-o", str(out), "--report-dir", str(tmp_path / "r")]
    )
    assert code == 0
    trajectories = list(read_trajectories(out))
    assert [t.task.id for t in trajectories] == list(PLANS) and all(1 <= len(t.steps) <= 3 for t in trajectories)
    assert all(t.agent == "smollm2-135m" for t in trajectories)
    stage = json.loads((tmp_path / "r" / "report.json").read_text())["stages"][0]
    assert stage["n"] == 4 and stage["metrics"]["tool_selection_accuracy"]["count"] == 4
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "smollm2-135m"


@pytest.mark.integration
def test_evaluate_sampled_local_model_repeats_with_its_seed(plan_env, tasks_file, tmp_path, capsys):
    """--samples 2 plays every task twice at temperature 1 and prints pass@1 and
    pass@2; the same --seed gives the same samples again."""
    require(find_spec("agenttrainer") is not None, "local model policies need knowlyr-trainer")
    runs = []
    for n in range(2):
        out = tmp_path / f"s{n}.jsonl"
        sampling = ["--max-steps", "2", "--max-new-tokens", "16", "--samples", "2", "--seed", "3", "--dtype", "float32"]
        code = main([*smollm2_evaluate(tasks_file, plan_env), *sampling, "-o", str(out)])
        assert code == 0
        runs.append(list(read_trajectories(out)))
        printed = capsys.readouterr().out
        assert "pass@1 " in printed and "pass@2 " in printed and "(4 tasks x 2 samples)" in printed
    assert [t.task.id for t in runs[0]] == [task for task in PLANS for _ in range(2)]
    calls = [[[(s.tool_call.name, s.tool_call.parameters) for s in t.steps] for t in run] for run in runs]
    assert calls[0] == calls[1]


class ChatCompletions(BaseHTTPRequestHandler):
    """A loopback OpenAI-compatible endpoint whose model always calls ``respond``; keeps every request."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        call = {"id": "call_1", "type": "function", "function": {"name": "respond", "arguments": '{"message": "ok"}'}}
        reply = json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": "", "tool_calls": [call]},
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def test_evaluate_endpoint_policy(plan_env, tasks_file, capsys):
    """Through a real HTTP server on loopback: the environment's tools and the system prompt reach
    the endpoint, and the served model's calls are played (respond at once: only p3 succeeds)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatCompletions)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        code = main(
            [
                "evaluate",
                "--policy",
                url,
                "--model",
                "served",
                "--tasks",
                str(tasks_file),
                "--env",
                plan_env,
                "--system-prompt",
                "Be brief.",
            ]
        )
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.split()[:3] == ["served", "4", "25.0%"]  # no split label: the tasks carry none
    assert len(server.requests) == 4 and all(r["model"] == "served" for r in server.requests)
    for request in server.requests:
        assert [t["function"]["name"] for t in request["tools"]] == ["lookup", "act", "respond"]
        assert request["messages"][0] == {"role": "system", "content": "Be brief."}
        assert request["messages"][1]["content"].startswith("task: do ")


def require_retail():
    # knowlyr-sandbox is an optional sibling, absent when the hub is tested alone
    # (`make test-isolated`): a plain skip, not a missing machine component.
    pytest.importorskip("agentsandbox.suites", reason="task suites need knowlyr-sandbox (knowlyr-hub[sandbox])")
    from agentsandbox.suites import list_suites

    require("retail" in list_suites(), "the retail suite is not installed")


def test_tasks_are_byte_identical_across_runs(tmp_path, capsys):
    require_retail()
    paths = [tmp_path / f"{name}.jsonl" for name in ("a", "b", "other_seed")]
    for path, seed in zip(paths, ["7", "7", "8"]):
        assert main(["tasks", "retail", "--split", "test", "--n", "5", "--seed", seed, "-o", str(path)]) == 0
    assert "5 retail tasks (test, seed 7)" in capsys.readouterr().err
    assert paths[0].read_bytes() == paths[1].read_bytes() != paths[2].read_bytes()
    records = [json.loads(line) for line in paths[0].read_text().splitlines()]
    assert len(records) == 5 and all(r["metadata"]["suite"] == "retail" and r["metadata"]["solution"] for r in records)
    assert main(["tasks", "--list"]) == 0
    assert any(line.split("\t")[:2] == ["retail", "knowlyr/retail"] for line in capsys.readouterr().out.splitlines())


def test_tasks_errors_exit_2(tmp_path, capsys):
    require_retail()
    for argv in (
        ["tasks", "no-such-suite", "-o", str(tmp_path / "x.jsonl")],
        ["tasks", "retail", "--split", "validation", "-o", str(tmp_path / "x.jsonl")],
        ["tasks", "retail"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "x.jsonl").exists()


def test_retail_expert_through_the_suite(tmp_path, capsys):
    """No --env: the tasks name their suite, which gives the env, the step budget and the expert."""
    require_retail()
    tasks = tmp_path / "retail.jsonl"
    assert main(["tasks", "retail", "--split", "test", "--n", "6", "--seed", "1", "-o", str(tasks)]) == 0
    assert main(["evaluate", "--policy", "expert", "--tasks", str(tasks), "--report-dir", str(tmp_path / "r")]) == 0
    _, row = capsys.readouterr().out.splitlines()
    assert row.split()[:4] == ["expert", "test", "6", "100.0%"]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["env"] == "knowlyr/retail" and report["stages"][0]["metrics"]["plan_success_rate"]["mean"] == 1.0


@pytest.mark.integration
def test_evaluate_prompts_a_checkpoint_by_its_prompt_contract(plan_env, tasks_file, tmp_path, capsys):
    """A checkpoint trained without tool schemas and with a system prompt is evaluated that way
    unless a flag says otherwise, and the command says which contract it used."""
    require(find_spec("agenttrainer") is not None, "local model policies need knowlyr-trainer")
    from types import SimpleNamespace

    from agenttrainer.models import PromptContract, attach_contract, build_tiny_model, save_model
    from trajectoryhub.cli import _policy

    model, tokenizer = build_tiny_model(seed=0)
    attach_contract(model, PromptContract("Trained system prompt.", include_tools=False))
    checkpoint = str(save_model(model, tokenizer, tmp_path / "ckpt"))

    def policy(**flags):
        defaults = dict(
            policy=checkpoint,
            system_prompt=None,
            include_tools=None,
            model=None,
            api_key=None,
            max_new_tokens=8,
            samples=1,
            temperature=None,
            dtype="float32",
        )
        args = SimpleNamespace(**{**defaults, **flags})
        return _policy(args, None, plan_env, {})[0]

    trained = policy()
    assert trained.system_prompt == "Trained system prompt." and trained.tools is None
    overridden = policy(system_prompt="Mine.", include_tools=True)
    assert overridden.system_prompt == "Mine." and overridden.tools
    assert "by its prompt contract (a 22-character system prompt, tool schemas not shown)" in capsys.readouterr().err
    code = main(
        [
            "evaluate",
            "--policy",
            checkpoint,
            "--tasks",
            str(tasks_file),
            "--env",
            plan_env,
            "--max-steps",
            "2",
            "--max-new-tokens",
            "8",
        ]
    )
    assert code == 0 and "prompting" in capsys.readouterr().err
