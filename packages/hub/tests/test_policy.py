"""OpenAIPolicy (the openai SDK) against a real loopback OpenAI-compatible server: knowlyr-core's
policy suite, plus what the SDK path adds (request options, tools, collect())."""

import pytest

from knowlyrcore import AgentEnv, TimeStep, write_trajectories
from knowlyrcore.domain import get_domain_profile
from knowlyrcore.testing import PolicyConformance, ScriptedChatServer, require_module
from trajectoryhub.policy import OpenAIPolicy
from trajectoryhub.rollout import collect

require_module("openai", "OpenAIPolicy needs the openai SDK (knowlyr-hub[llm], in [dev])")
TOOLS = [t.to_openai_tool() for t in get_domain_profile("engineering").tools]  # bash, ..., submit, finish


@pytest.fixture
def chat_server():
    with ScriptedChatServer() as server:
        yield server


class TestOpenAIPolicyConforms(PolicyConformance):
    closing_tool, closing_param = "finish", "message"

    @pytest.fixture(autouse=True)
    def _server(self, chat_server):
        self.server = chat_server

    def make_policy(self):
        return OpenAIPolicy("policy", base_url=self.server.base_url, tools=TOOLS, system_prompt="You are an engineer.")

    def script_replies(self, replies):
        self.server.replies.extend(replies)

    def model_requests(self):
        return [request["body"]["messages"] for request in self.server.requests]


def test_request_carries_the_sdk_options(chat_server):
    chat_server.replies.append({"content": "hi"})
    policy = OpenAIPolicy("m-1", base_url=chat_server.base_url, api_key="k-2", temperature=0.5, max_tokens=32)
    assert policy("hello") == {"tool": "respond", "params": {"message": "hi"}, "thought": ""}
    (request,) = chat_server.requests
    assert request["authorization"] == "Bearer k-2"
    body = request["body"]
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("m-1", 0.5, 32)
    assert "tools" not in body and body["messages"] == [{"role": "user", "content": "hello"}]


def test_fallback_tool_forces_the_closing_tool(chat_server):
    chat_server.replies.append({"content": "42"})
    policy = OpenAIPolicy("m", base_url=chat_server.base_url, tools=TOOLS, fallback_tool="submit")
    assert policy("what is 6*7?")["params"] == {"answer": "42"}


class NoteEnv(AgentEnv):
    """Takes notes until `finish`; rejects nothing, so the recorded steps are the policy's actions."""

    domain = "generic"

    def reset(self, *, task=None, seed=None):
        return TimeStep("take a note, then finish")

    def step(self, action):
        if action["tool"] == "finish":
            return TimeStep("bye", terminated=True, info={"success": True})
        return TimeStep(f"noted {action['params']}")

    @property
    def available_tools(self):
        return ["note", "finish"]


def test_collect_records_the_policy_actions_with_call_ids(chat_server):
    chat_server.replies += [
        PolicyConformance.tool_call("note", '{"text": "a"}', call_id="call_1"),
        PolicyConformance.tool_call("note", "not json", call_id="call_2"),
        {"content": "Done."},
    ]
    tools = [{"type": "function", "function": {"name": name}} for name in ("note", "finish")]
    factory = lambda: OpenAIPolicy("m", base_url=chat_server.base_url, tools=tools)  # noqa: E731
    (trajectory,) = collect(NoteEnv, agent_factory=factory, progress=False)
    steps = [(s.tool_call.name, s.tool_call.parameters, s.tool_call.id) for s in trajectory.steps]
    assert steps == [("note", {"text": "a"}, "call_1"), ("note", {}, "call_2"), ("finish", {"message": "Done."}, None)]
    third = chat_server.requests[2]["body"]["messages"]
    assert third[-1] == {"role": "tool", "tool_call_id": "call_2", "content": "noted {}"}


def test_hostile_a_reply_with_a_lone_surrogate_is_graded_not_fatal(chat_server, tmp_path):
    # JSON can carry "\ud800"; UTF-8 cannot. Kept as is, the next request (which resends the
    # reply) and the trajectory writer both failed, ending the whole run.
    chat_server.replies += [
        PolicyConformance.tool_call("note", '{"text": "a\\ud800"}', call_id="call_1"),
        {"content": "Done \udfff."},
    ]
    tools = [{"type": "function", "function": {"name": name}} for name in ("note", "finish")]
    factory = lambda: OpenAIPolicy("m", base_url=chat_server.base_url, tools=tools)  # noqa: E731
    (trajectory,) = collect(NoteEnv, agent_factory=factory, progress=False)
    assert [s.tool_call.parameters for s in trajectory.steps] == [{"text": "a\ufffd"}, {"message": "Done \ufffd."}]
    assert chat_server.requests[1]["body"]["messages"][-1]["content"] == "noted {'text': 'a\ufffd'}"
    write_trajectories(tmp_path / "out.jsonl", [trajectory])
