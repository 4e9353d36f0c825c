"""Per-task tools: environments whose tools come with the task (BFCL: the task's functions) or
grow during an episode (BFCL multi-turn miss_func) offer them to the policy of ``knowlyr-hub
evaluate``, episode by episode and turn by turn, and SFT export gives each trajectory its own.

The model server is knowlyrcore's ``ScriptedChatServer`` (real HTTP on loopback); the BFCL tasks
need bfcl-eval (``pip install --no-deps bfcl-eval==2026.3.23``) and skip without it, failing under
``KNOWLYR_REQUIRE_COMPONENTS=1`` instead.
"""

import functools
import importlib.util
import json

import pytest

from knowlyrcore import AgentEnv, TimeStep, read_trajectories, write_jsonl
from knowlyrcore.endpoint import EndpointPolicy
from knowlyrcore.testing import ScriptedChatServer, require
from trajectoryhub.cli import main
from trajectoryhub.export import DatasetExporter
from trajectoryhub.rollout import collect

# knowlyr-sandbox and knowlyr-trainer are optional siblings of the hub: absent in the hub's
# isolated venv, where these tests are skipped (CI's strict mode runs them in the full venv)
pytest.importorskip("agentsandbox", reason="the BFCL environments come with knowlyr-sandbox")
HAVE_BFCL = all(importlib.util.find_spec(m) is not None for m in ("bfcl_eval", "mpmath"))


@functools.cache
def bfcl_task(bfcl_id):
    from agentsandbox.bfcl.data import INSTALL_STEP

    require(HAVE_BFCL, f"BFCL's tasks need bfcl-eval ({INSTALL_STEP}) and mpmath")
    if bfcl_id.startswith("multi_turn"):
        from agentsandbox.suites.bfcl_multi_turn import BFCL_MULTI_TURN as suite
        from agentsandbox.suites.bfcl_multi_turn import split_of

        split = split_of(bfcl_id)
    else:
        from agentsandbox.suites.bfcl import BFCL as suite

        split = "train" if bfcl_id.startswith("live_") else "test"
    return next(t for t in suite.generate(split, 10**6, 0) if t["metadata"]["bfcl_id"] == bfcl_id)


def reply(action):
    """The assistant message that makes ``action``: a native tool call, or text for ``respond``."""
    if action["tool"] == "respond":
        return {"content": action["params"]["message"]}
    arguments = json.dumps(action["params"])
    return {
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": action["tool"], "arguments": arguments}}],
    }


def names(request):
    return [tool["function"]["name"] for tool in request["body"].get("tools", [])]


def evaluate(server, task, tmp_path, *flags):
    tasks = tmp_path / "tasks.jsonl"
    write_jsonl(tasks, [task])
    server.replies.extend(reply(action) for action in task["metadata"]["solution"])
    out = tmp_path / "out.jsonl"
    code = main(
        ["evaluate", "--policy", server.base_url, "--model", "m", "--tasks", str(tasks), "-o", str(out), *flags]
    )
    assert code == 0
    (trajectory,) = read_trajectories(out)
    return trajectory


@pytest.fixture
def server():
    with ScriptedChatServer() as chat_server:
        yield chat_server


def test_evaluate_offers_a_bfcl_task_its_functions(server, tmp_path):
    """simple_python_1 brings math.factorial: the request offers it (with its JSON Schema), not only
    respond, and the scripted right call then a reply solves the task."""
    task = bfcl_task("simple_python_1")
    trajectory = evaluate(server, task, tmp_path)
    first, second = server.requests
    assert names(first) == names(second) == ["math.factorial", "respond"]
    parameters = first["body"]["tools"][0]["function"]["parameters"]
    assert parameters["type"] == "object" and parameters["properties"]["number"]["type"] == "integer"
    assert trajectory.outcome.success is True and trajectory.steps[0].tool_call.name == "math.factorial"
    assert [t["function"]["name"] for t in trajectory.metadata["tools"]] == ["math.factorial", "respond"]


def test_no_include_tools_keeps_them_out_of_the_request(server, tmp_path):
    trajectory = evaluate(server, bfcl_task("simple_python_1"), tmp_path, "--no-include-tools")
    assert all("tools" not in request["body"] for request in server.requests)
    assert trajectory.outcome.success is True


def test_the_tool_list_grows_at_the_turn_that_brings_withheld_functions(server, tmp_path):
    """multi_turn_miss_func_7: mkdir and echo are withheld until turn 1 (the second user turn)."""
    task = bfcl_task("multi_turn_miss_func_7")
    trajectory = evaluate(server, task, tmp_path)
    users = [sum(m["role"] == "user" for m in request["body"]["messages"]) for request in server.requests]
    offered = [set(names(request)) for request in server.requests]
    turn0 = [tools for tools, n in zip(offered, users) if n == 1]
    later = [tools for tools, n in zip(offered, users) if n > 1]
    assert turn0 and later and "cd" in turn0[0]
    assert all("mkdir" not in tools and "echo" not in tools for tools in turn0)
    assert all({"mkdir", "echo"} <= tools and turn0[0] < tools for tools in later)
    assert trajectory.outcome.success is True
    assert {"mkdir", "echo", "cd", "respond"} <= {t["function"]["name"] for t in trajectory.metadata["tools"]}


def test_collect_hands_each_episode_its_tools(server):
    """The per-episode path (``collect``, and Ray actors through ``run_episode``): a reused agent
    is offered each task's functions, and back on the tools it was built with at reset."""
    tasks = [bfcl_task("simple_python_1"), bfcl_task("simple_python_0")]
    for task in tasks:
        server.replies.extend(reply(action) for action in task["metadata"]["solution"])
    agent = EndpointPolicy(server.base_url, "m")
    trajectories = collect("knowlyr/bfcl", agent, tasks=tasks, n_episodes=2, progress=False)
    assert [t.outcome.success for t in trajectories] == [True, True]
    assert [names(request)[0] for request in server.requests] == ["math.factorial"] * 2 + [
        "calculate_triangle_area"
    ] * 2
    agent.reset()
    assert agent.tools is None


class FixedTools(AgentEnv):
    """Offers its domain's tools whatever the task: nothing is handed over, nothing recorded."""

    domain = "engineering"

    def reset(self, *, task=None, seed=None):
        return TimeStep("go")

    def step(self, action):
        return TimeStep("done", terminated=True, info={"success": True})


def test_fixed_tools_are_left_as_the_policy_was_built(server):
    server.replies.append({"content": "ok"})
    agent = EndpointPolicy(server.base_url, "m", tools=[{"type": "function", "function": {"name": "mine"}}])
    (trajectory,) = collect(FixedTools, agent, progress=False)
    assert names(server.requests[0]) == ["mine"] and "tools" not in trajectory.metadata


def test_sft_export_gives_a_bfcl_trajectory_its_functions(server, tmp_path):
    """Recorded by the rollout (metadata.tools), or for a BFCL trajectory recorded without them,
    from its task's functions: every offered function, the unused ones too."""
    task = bfcl_task("multiple_0")
    trajectory = evaluate(server, task, tmp_path)
    functions = [f["name"] for f in task["metadata"]["functions"]]
    assert len(functions) > 1 and trajectory.outcome.success is True
    for t in (trajectory, trajectory.model_copy(update={"metadata": {}})):
        out = tmp_path / "sft.jsonl"
        DatasetExporter(trajectories=[t]).export_sft(out, format="messages")
        (record,) = [json.loads(line) for line in out.read_text().splitlines()]
        assert [tool["function"]["name"] for tool in record["tools"]] == [*functions, "respond"]
        assert all(tool["function"]["parameters"]["type"] == "object" for tool in record["tools"])


def test_the_local_policy_is_given_each_episodes_tools():
    """The lockstep path with a local model (``TokenPolicy.set_tools_batch``), on a tiny random model."""
    pytest.importorskip("agenttrainer", reason="local model policies need knowlyr-trainer")
    from agenttrainer.acting import LocalGenerator, TokenPolicy
    from agenttrainer.models import build_tiny_model
    from trajectoryhub.batched import collect_batched

    tasks = [bfcl_task("simple_python_1"), bfcl_task("multiple_0")]
    model, tokenizer = build_tiny_model(seed=0)
    policy = TokenPolicy(LocalGenerator(model, tokenizer), tokenizer, max_new_tokens=4, temperature=0.0)
    collect_batched("knowlyr/bfcl", policy, tasks, max_steps=2, progress=False)
    offered = [[tool["function"]["name"] for tool in tools] for tools in policy.episode_tools]
    assert offered == [[f["name"] for f in t["metadata"]["functions"]] + ["respond"] for t in tasks]
