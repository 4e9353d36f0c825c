"""The policy suite itself: a minimal chat policy built from the core pieces passes it, and
policies with the classic defects (history kept across reset, exceptions on bad arguments, a
stale closing tool) fail the matching checks; the scripted loopback chat server."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request

import pytest

from knowlyrcore import ChatTranscript, action_from_message
from knowlyrcore.testing import PolicyConformance, ScriptedChatServer


class ScriptedModel:
    """Answers each chat request with the next scripted assistant message and keeps the requests."""

    def __init__(self):
        self.replies: list[dict] = []
        self.requests: list[list[dict]] = []

    def chat(self, messages):
        self.requests.append(copy.deepcopy(messages))
        return self.replies.pop(0)


class MinimalChatPolicy:
    def __init__(self, model, tools):
        self.model, self.tools = model, tools
        self.transcript = ChatTranscript("You are an agent.")

    def reset(self, task=None):
        self.transcript.reset()

    def __call__(self, observation):
        self.transcript.add_observation(observation)
        message = self.model.chat(self.transcript.messages)
        action = action_from_message(message, self.tools)
        self.transcript.add_reply(message, action)
        return action


class TestMinimalChatPolicyConforms(PolicyConformance):
    closing_tool, closing_param = "submit", "answer"

    @pytest.fixture(autouse=True)
    def _model(self):
        self.model = ScriptedModel()

    def make_policy(self):
        return MinimalChatPolicy(self.model, ["bash", "submit", "respond"])

    def script_replies(self, replies):
        self.model.replies.extend(replies)

    def model_requests(self):
        return self.model.requests


class KeepsHistory(MinimalChatPolicy):
    def reset(self, task=None):
        pass


class RaisesOnBadArguments(MinimalChatPolicy):
    def __call__(self, observation):
        action = super().__call__(observation)
        if "format_error" in action:
            raise ValueError(action["format_error"])
        return action


class AlwaysResponds(MinimalChatPolicy):
    def __call__(self, observation):
        action = super().__call__(observation)
        if action["tool"] == "submit":
            return {"tool": "respond", "params": {"message": action["params"]["answer"]}}
        return action


class NoTaskInReset(MinimalChatPolicy):
    def reset(self):
        self.transcript.reset()


@pytest.mark.parametrize(
    ("policy_cls", "check", "error"),
    [
        (KeepsHistory, "test_reset_clears_the_history", AssertionError),
        (RaisesOnBadArguments, "test_malformed_arguments_name_the_tool_with_a_format_error", ValueError),
        (AlwaysResponds, "test_reply_without_tool_call_becomes_the_closing_tool", AssertionError),
        (NoTaskInReset, "test_is_a_policy_with_reset_task", AssertionError),
    ],
)
def test_the_suite_catches_defective_policies(policy_cls, check, error):
    suite = TestMinimalChatPolicyConforms()
    suite.model = ScriptedModel()
    suite.make_policy = lambda: policy_cls(suite.model, ["bash", "submit", "respond"])
    with pytest.raises(error):
        getattr(suite, check)()


def test_hermes_text_renders_calls_as_blocks():
    reply = PolicyConformance.tool_call("bash", '{"command": "ls"}', content="Look.")
    assert PolicyConformance.hermes_text(reply) == (
        'Look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    )
    broken = PolicyConformance.tool_call("bash", '{"command": ')
    assert PolicyConformance.hermes_text(broken) == (
        '<tool_call>\n{"name": "bash", "arguments": "{\\"command\\": "}\n</tool_call>'
    )


def _post(url, body, token="t"):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_scripted_chat_server_answers_in_order_and_records_requests():
    call = PolicyConformance.tool_call("bash", "{}")
    with ScriptedChatServer() as server:
        server.replies += [call, {"content": "bye"}]
        url = server.base_url + "/chat/completions"
        first, second, third = (_post(url, {"model": "m", "n": i}) for i in range(3))
        missing = _post(server.base_url + "/completions", {})
    assert first[0] == 200 and first[1]["choices"][0]["finish_reason"] == "tool_calls"
    assert first[1]["choices"][0]["message"] == {"role": "assistant", **call} and first[1]["model"] == "m"
    assert second[1]["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": "bye"},
        "finish_reason": "stop",
    }
    assert third == (500, {"error": {"message": "the scripted server has no reply left"}})
    assert missing[0] == 404
    assert [(r["path"], r["authorization"], r["body"]["n"]) for r in server.requests] == [
        ("/v1/chat/completions", "Bearer t", i) for i in range(3)
    ]
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url
