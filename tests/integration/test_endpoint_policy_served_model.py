"""``knowlyrcore.EndpointPolicy`` against a real model server: ``knowlyr-trainer serve`` with the
embedded SmolLM2-135M-Instruct on loopback, playing episodes through ``play_episodes`` as
``knowlyr-hub collect`` and ``knowlyr-sandbox run`` do. What the 135M model answers is its own
business, so the test checks the contract: every action well formed, every request extending the
episode's conversation, the trajectories written and read back.

    pytest tests/integration/test_endpoint_policy_served_model.py -m integration
"""

from __future__ import annotations

import pytest

from knowlyrcore import (
    AgentEnv,
    EndpointPolicy,
    TimeStep,
    parse_action,
    read_trajectories,
    tool_schemas,
    write_trajectories,
)
from knowlyrcore.policy import as_batch_policy
from knowlyrcore.rollout import play_episodes, wrap_episode_env
from knowlyrcore.testing import require_module

require_module("agenttrainer", "the served model is knowlyr-trainer's `serve`")
require_module("starlette", "serving needs knowlyr-trainer[serve] (in [dev])")

from agenttrainer.serving.background import ServerProcess  # noqa: E402

pytestmark = pytest.mark.integration


class Weather(AgentEnv):
    """Answers get_weather; respond ends the episode."""

    domain = "generic"

    def reset(self, *, task=None, seed=None):
        return TimeStep("What is the weather in Paris? Use get_weather, then respond.")

    def step(self, action):
        if action["tool"] == "respond":
            return TimeStep("bye", terminated=True, info={"success": True})
        return TimeStep("sunny, 21 C")

    @property
    def available_tools(self):
        return ["get_weather", "respond"]


GET_WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_a_served_model_plays_recorded_episodes(tmp_path):
    tools = tool_schemas([GET_WEATHER, "respond"])
    policies = []
    with ServerProcess("smollm2-135m", "--dtype", "bfloat16") as server:

        def factory():
            policies.append(EndpointPolicy(server.base_url, server.model_name, tools=tools, max_tokens=32))
            return policies[-1]

        envs = [wrap_episode_env(Weather(), max_steps=2) for _ in range(2)]
        episodes = play_episodes(envs, as_batch_policy(factory), [None, None], max_steps=2)
    assert [e.end in ("terminated", "max_steps") for e in episodes] == [True, True]
    for episode, policy in zip(episodes, policies):
        steps = episode.trajectory.steps
        assert 1 <= len(steps) <= 2
        for step in steps:
            parse_action({"tool": step.tool_call.name, "params": step.tool_call.parameters})
        roles = [m["role"] for m in policy.messages]
        assert roles[0] == "user" and roles.count("assistant") == len(steps)
    write_trajectories(tmp_path / "out.jsonl", [e.trajectory for e in episodes])
    assert len(list(read_trajectories(tmp_path / "out.jsonl"))) == 2
