"""The scripted agent of ``knowlyr-sandbox run --actions`` (a model behind an endpoint is
``knowlyrcore.endpoint.EndpointPolicy``, tested in knowlyr-core)."""

import pytest

from agentsandbox.agents import AgentError, ScriptedAgent


def test_scripted_agent_plays_its_actions_and_rewinds_at_reset():
    agent = ScriptedAgent([{"tool": "bash", "params": {"command": "ls"}}])
    assert agent("obs")["tool"] == "bash"
    with pytest.raises(AgentError, match="only 1 actions"):
        agent("obs")
    agent.reset()
    assert agent("obs")["tool"] == "bash"
