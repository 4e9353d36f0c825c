"""EndpointAgent against a real loopback OpenAI-compatible server: knowlyr-core's policy suite
(function calling, tool results threaded back as ``tool`` messages, text replies mapped to the
domain's closing tool, malformed arguments as format errors, reset), and clear errors when the
endpoint is down or answers nonsense."""

import socket

import pytest

from agentsandbox.agents import AgentError, EndpointAgent, ScriptedAgent
from knowlyrcore.testing import PolicyConformance, ScriptedChatServer


@pytest.fixture
def chat_server():
    with ScriptedChatServer() as server:
        yield server


class TestEndpointAgentConforms(PolicyConformance):
    closing_tool, closing_param = "finish", "message"  # the coding domain has finish, submit

    @pytest.fixture(autouse=True)
    def _server(self, chat_server):
        self.server = chat_server

    def make_policy(self):
        return EndpointAgent(self.server.base_url, "policy", domain="coding")

    def script_replies(self, replies):
        self.server.replies.extend(replies)

    def model_requests(self):
        return [request["body"]["messages"] for request in self.server.requests]


def test_request_carries_model_key_tools_and_system_prompt(chat_server):
    chat_server.replies.append(PolicyConformance.tool_call("bash", '{"command": "ls"}', call_id="call_7"))
    agent = EndpointAgent(
        chat_server.base_url + "/", "policy", domain="coding", api_key="k-1", system_prompt="Be brief."
    )
    action = agent("Task: fix the failing test")
    assert action == {"tool": "bash", "params": {"command": "ls"}, "thought": "", "id": "call_7"}
    (request,) = chat_server.requests
    assert request["path"] == "/v1/chat/completions" and request["authorization"] == "Bearer k-1"
    body = request["body"]
    assert body["model"] == "policy" and "bash" in {t["function"]["name"] for t in body["tools"]}
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}


def test_a_conversation_domain_closes_with_respond(chat_server):
    chat_server.replies.append({"content": "Your order shipped yesterday."})
    agent = EndpointAgent(chat_server.base_url, "policy", domain="conversation")
    assert agent.closing_tool == "respond"
    assert agent("Where is my order?") == {
        "tool": "respond",
        "params": {"message": "Your order shipped yesterday."},
        "thought": "",
    }


def test_unreachable_endpoint_is_an_agent_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    agent = EndpointAgent(f"http://127.0.0.1:{port}/v1", "policy", domain="coding", timeout=5)
    with pytest.raises(AgentError, match="policy endpoint"):
        agent("Task: anything")


def test_an_http_error_names_the_server_reason(chat_server):
    agent = EndpointAgent(chat_server.base_url, "policy", domain="coding")  # nothing scripted: HTTP 500
    with pytest.raises(AgentError, match="HTTP 500 .*no reply left"):
        agent("Task: anything")


def test_a_wrong_path_is_an_agent_error(chat_server):
    agent = EndpointAgent(chat_server.base_url.removesuffix("/v1") + "/elsewhere", "policy", domain="coding")
    with pytest.raises(AgentError, match="HTTP 404"):
        agent("Task: anything")


def test_scripted_agent_plays_its_actions_and_rewinds_at_reset():
    agent = ScriptedAgent([{"tool": "bash", "params": {"command": "ls"}}])
    assert agent("obs")["tool"] == "bash"
    with pytest.raises(AgentError, match="only 1 actions"):
        agent("obs")
    agent.reset()
    assert agent("obs")["tool"] == "bash"
