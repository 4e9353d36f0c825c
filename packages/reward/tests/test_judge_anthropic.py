"""The judge's Anthropic path against a real Messages API server on loopback (knowlyr-core's
``ScriptedChatServer``): a verdict, not an abstention, whatever keywords the installed SDK's
``messages.create`` takes (anthropic 2.x dropped ``temperature``, and every call raised
``TypeError`` before a byte was sent)."""

import json

import pytest

from knowlyrcore.testing import ScriptedChatServer, require_module

require_module("anthropic", "the anthropic judge needs the anthropic SDK (knowlyr-reward[llm], in [dev])")

from agentreward import Judge, RewardEngine  # noqa: E402

TRAJ = {
    "task": {"description": "fix sort.py"},
    "steps": [
        {"tool_call": {"name": "read_file", "parameters": {"path": "sort.py"}}, "observation": {"output": "code"}},
        {"tool_call": {"name": "submit", "parameters": {}}, "observation": {"output": "done"}},
    ],
}
SCORES = '{"goal_progress": 0.9, "tool_selection": 0.8, "param_correctness": 0.7}'


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_the_anthropic_judge_gives_verdicts_with_its_sampling_options_in_the_body(temperature):
    with ScriptedChatServer() as server:
        server.replies.extend({"content": SCORES} for _ in range(3))  # one complete(), one per step
        # the SDK posts to {base_url}/v1/messages: the server's root, not its /v1
        judge = Judge(
            model="claude-test",
            provider="anthropic",
            base_url=server.base_url.removesuffix("/v1"),
            api_key="k",
            max_retries=0,
        )
        assert json.loads(judge.complete("score this", system="you judge", temperature=temperature)) == json.loads(
            SCORES
        )
        scored = RewardEngine(judge=judge).score_record(TRAJ)
    assert judge.failures == []
    assert scored["steps"] != RewardEngine().score_record(TRAJ)["steps"]  # the judge's scores were used
    first = server.requests[0]
    assert first["path"] == "/v1/messages"
    body = first["body"]
    assert body["temperature"] == temperature and body["system"] == "you judge" and body["model"] == "claude-test"
    assert body["messages"] == [{"role": "user", "content": "score this"}] and body["max_tokens"] == judge.max_tokens
