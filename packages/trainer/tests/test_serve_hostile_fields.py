"""``knowlyr-trainer serve`` against hostile field values, run for real (``ServerProcess`` on
127.0.0.1, the tiny random model) and driven over HTTP.

* A lone UTF-16 surrogate (``"\\ud800"`` in the JSON, which the decoder turns into a ``str`` no
  UTF-8 encoder takes) in ``stop``, a tool's name or schema, ``model``, ``user``, a ``logit_bias``
  key or any other string of a request is a 400 naming the field: once it was a 500 out of
  ``inference.complete`` (``stop``) or a stream cut short, while the same character in a message's
  content was already a 400. A streaming request is refused before its stream starts, so the 400
  is an ordinary JSON error body.
* ``top_logprobs`` times ``max_tokens`` is capped (``protocol.MAX_LOGPROB_ENTRIES``): each answer
  token keeps its ``top_logprobs`` alternatives until the whole answer is sent, so 20 x 4096 once
  held ~680 MB for minutes.

Bodies are sent as raw JSON text: httpx's ``json=`` encodes with ``ensure_ascii=False``, which
cannot encode a lone surrogate at all, whereas a client's JSON escape reaches the server intact.

    pytest packages/trainer/tests/test_serve_hostile_fields.py
"""

from __future__ import annotations

import json

import httpx
import pytest

from agenttrainer.serving.background import ServerProcess

MODEL = "tiny-hostile"
HELLO = [{"role": "user", "content": "Say hello."}]
LONE = "\ud800"  # json.dumps writes it as the escape "\ud800", as a hostile client would
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}

pytestmark = pytest.mark.integration  # a real server process on loopback


@pytest.fixture(scope="module")
def server(tiny_path):
    # --max-tokens-limit 4096: the logprob cap, not the max_tokens limit, must refuse 20 x 4096.
    with ServerProcess(tiny_path, "--model-name", MODEL, "--max-tokens", "8", "--max-tokens-limit", "4096") as server:
        yield server


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


def _post(http: httpx.Client, path: str, body: dict) -> httpx.Response:
    """POST ``body`` as JSON text with every non-ASCII character escaped (lone surrogates included)."""
    return http.post(path, content=json.dumps(body).encode("ascii"), headers={"Content-Type": "application/json"})


def _chat(**fields) -> dict:
    return {"model": MODEL, "messages": HELLO, "max_tokens": 4, **fields}


def _refused(response: httpx.Response, field: str) -> dict:
    """A 400 JSON error (never a stream, never a 500) whose param and one-line message name ``field``."""
    assert response.status_code == 400, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json"  # an error body, not a stream
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and error["param"].startswith(field), error
    assert field in error["message"] and "\n" not in error["message"], error
    return error


def _healthy(server) -> None:
    response = httpx.get(server.base_url.removesuffix("/v1") + "/health", timeout=30)
    assert response.status_code == 200, response.text
    assert server.process.poll() is None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("stop", [LONE, [LONE], ["ok", "a" + LONE]], ids=["string", "list", "list-second"])
def test_serve_a_lone_surrogate_in_stop_is_400(server, http, stop, stream):
    _refused(_post(http, "/chat/completions", _chat(stop=stop, stream=stream)), "stop")
    _healthy(server)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_serve_a_lone_surrogate_in_a_tool_name_is_400(server, http, stream):
    tool = {"type": "function", "function": {**TOOL["function"], "name": "look" + LONE}}
    _refused(_post(http, "/chat/completions", _chat(tools=[tool], stream=stream)), "tools[0].function.name")
    _healthy(server)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (
            {"tools": [{"type": "function", "function": {**TOOL["function"], "description": LONE}}]},
            "tools[0].function.description",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            **TOOL["function"],
                            "parameters": {"type": "object", "properties": {"w" + LONE: {"type": "string"}}},
                        },
                    }
                ]
            },
            "tools[0].function.parameters.properties",
        ),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": LONE}}},
            "tool_choice.function.name",
        ),
        ({"model": MODEL + LONE}, "model"),
        ({"user": LONE}, "user"),
        ({"logit_bias": {LONE: 1}}, "logit_bias"),
        ({"messages": [{"role": "user", "content": "hi" + LONE}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": LONE}]}]}, "messages[0].content"),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"function": {"name": "lookup", "arguments": '{"word": "' + LONE + '"}'}}],
                    },
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
    ],
)
def test_serve_a_lone_surrogate_in_any_other_chat_field_is_400(server, http, fields, field):
    _refused(_post(http, "/chat/completions", _chat(**fields)), field)
    _healthy(server)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"prompt": "Say hello." + LONE}, "prompt"),
        ({"prompt": ["Say hello.", LONE]}, "prompt[1]"),
        ({"model": LONE}, "model"),
        ({"user": LONE}, "user"),
    ],
)
def test_serve_a_lone_surrogate_in_a_completions_field_is_400(server, http, fields, field):
    _refused(_post(http, "/completions", {"model": MODEL, "prompt": "Say hello.", "max_tokens": 4, **fields}), field)
    _healthy(server)


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_serve_top_logprobs_times_max_tokens_past_the_cap_is_400(server, http, key):
    body = {"model": MODEL, "messages": HELLO, "logprobs": True, "top_logprobs": 20, key: 4096}
    error = _refused(_post(http, "/chat/completions", body), "top_logprobs")
    from agenttrainer.serving.protocol import MAX_LOGPROB_ENTRIES  # imported here: absent before the cap

    assert key in error["message"] and str(MAX_LOGPROB_ENTRIES) in error["message"], error
    assert error["code"] == "logprobs_too_large"
    _healthy(server)


def test_serve_normal_requests_are_still_200(http):
    # A stop string, tools, non-ASCII text (a real character, not a lone surrogate) and logprobs
    # within the cap: all still answered, whole and streamed.
    fields = {"stop": ["\n\n", "é"], "tools": [TOOL], "user": "user-é", "temperature": 0}
    whole = _post(http, "/chat/completions", _chat(**fields, messages=[{"role": "user", "content": "Grüße 😀"}]))
    assert whole.status_code == 200, whole.text
    assert whole.json()["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")

    streamed = _post(http, "/chat/completions", _chat(**fields, stream=True))
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.text.rstrip().endswith("data: [DONE]")

    logprobs = _post(http, "/chat/completions", _chat(logprobs=True, top_logprobs=20, max_tokens=64))
    assert logprobs.status_code == 200, logprobs.text
    entries = logprobs.json()["choices"][0]["logprobs"]["content"]
    assert entries and all(len(entry["top_logprobs"]) == 20 for entry in entries)

    completion = _post(http, "/completions", {"model": MODEL, "prompt": "Say hello.", "max_tokens": 4})
    assert completion.status_code == 200, completion.text
