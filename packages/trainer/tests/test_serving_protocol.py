"""Unit tier for the server: request validation and response shapes (pure functions), and the
``serve`` command's startup errors (no server is started).

    pytest packages/trainer/tests/test_serving_protocol.py
"""

from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner

from agenttrainer.acting.inference import Completion
from agenttrainer.serving.cli import serve
from agenttrainer.serving.protocol import (
    RequestError,
    chunk_json,
    completion_json,
    parse_chat_request,
    sse,
)
from knowlyrcore.tool_parsing import FunctionCall

TOOL = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}


def _request(**fields):
    return parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}, "m")


def test_defaults():
    chat = _request()
    assert chat.messages == [{"role": "user", "content": "hi"}]
    assert (chat.tools, chat.max_tokens, chat.temperature, chat.top_p, chat.stop, chat.seed) == (
        None,
        None,
        None,
        None,
        [],
        None,
    )
    assert (chat.stream, chat.include_usage) == (False, False)


def test_messages_are_normalised_for_the_chat_template():
    chat = _request(
        messages=[
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "1", "function": {"name": "ls", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "1", "content": "x.py"},
        ]
    )
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "tool"]
    assert chat.messages[1]["content"] == "ab"
    assert chat.messages[2]["tool_calls"][0]["function"]["name"] == "ls"


def test_options():
    chat = _request(
        tools=[TOOL],
        max_tokens=5,
        max_completion_tokens=7,
        temperature=0.7,
        top_p=0.9,
        stop="END",
        seed=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert chat.tools == [TOOL]
    assert chat.max_tokens == 7  # the newer field wins
    assert (chat.temperature, chat.top_p, chat.stop, chat.seed) == (0.7, 0.9, ["END"], 3)
    assert (chat.stream, chat.include_usage) == (True, True)
    assert _request(tools=[TOOL], tool_choice="none").tools is None


@pytest.mark.parametrize(
    ("fields", "param", "status"),
    [
        ({"model": "other"}, "model", 404),
        ({"messages": "hi"}, "messages", 400),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content", 400),
        ({"tools": [{"type": "function"}]}, "tools", 400),
        ({"n": 3}, "n", 400),
        ({"max_tokens": -1}, "max_tokens", 400),
        ({"top_p": 1.5}, "top_p", 400),
        ({"temperature": True}, "temperature", 400),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", 400),
        ({"seed": "x"}, "seed", 400),
    ],
)
def test_invalid_fields_are_named(fields, param, status):
    with pytest.raises(RequestError) as info:
        _request(**fields)
    assert (info.value.param, info.value.status) == (param, status)
    body = info.value.body()["error"]
    assert body["param"] == param and body["message"] and body["type"] == "invalid_request_error"


def test_completion_with_tool_calls():
    completion = Completion("ignored", prompt_tokens=10, completion_tokens=4, finish_reason="stop")
    body = completion_json("chatcmpl-1", "m", completion, "", [FunctionCall("ls", {"path": "."})])
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "ls", "arguments": '{"path": "."}'}
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}


def test_stream_chunks_and_sse_framing():
    usage_only = chunk_json("c", "m", None, usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
    assert usage_only["choices"] == [] and usage_only["object"] == "chat.completion.chunk"
    event = sse(chunk_json("c", "m", {"content": "hé"}))
    assert event.startswith("data: ") and event.endswith("\n\n")
    assert json.loads(event[len("data: ") :])["choices"][0]["delta"] == {"content": "hé"}
    assert sse("[DONE]") == "data: [DONE]\n\n"


def test_busy_port_fails_before_loading_the_model():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = CliRunner().invoke(serve, ["./does-not-matter", "--port", str(busy.getsockname()[1])])
    assert result.exit_code != 0
    assert "cannot listen on 127.0.0.1:" in result.output


def test_missing_checkpoint_is_a_one_line_error():
    result = CliRunner().invoke(serve, ["./no/such/checkpoint", "--port", "0"])
    assert result.exit_code != 0
    assert "does not exist" in result.output
