"""``knowlyr-trainer serve`` under hostile requests (issue #11, finding 9), run for real
(``ServerProcess`` on 127.0.0.1) and driven over HTTP (httpx, raw sockets for disconnects).

The API key is required, bodies, prompts, ``max_tokens``, JSON nesting and tool schemas are
capped, every field is type-checked (4xx, never 500 nor a silent coercion), a client that
disconnects stops its generation (streaming or not), and the queue is bounded (429). Cancellation
is observed on ``GET /metrics`` (running generations, cancelled ones, the model's forward passes),
polled with a deadline.

    pytest packages/trainer/tests/test_serving_security.py -m integration
"""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from click.testing import CliRunner

from agenttrainer.models import build_tiny_model, save_model
from agenttrainer.serving.background import ServerProcess
from agenttrainer.serving.cli import serve

MODEL = "tiny-guarded"
KEY = "sk-test-7f3a9c"
HELLO = [{"role": "user", "content": "Say hello."}]
LONG = 1900  # tokens a generation may run: the random model never ends a turn, so it runs them all
MAX_PROMPT_TOKENS = 256
LONGEST_TOKEN = 81  # characters of SmolLM2's longest vocabulary entry (a run of 80 spaces after a newline)
DEADLINE_SECONDS = 60.0

pytestmark = pytest.mark.integration  # a real server process on loopback


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # Wide enough that LONG tokens take seconds, so a disconnect always lands mid-generation.
    model, tokenizer = build_tiny_model(hidden_size=128, num_layers=4, seed=0)
    checkpoint = str(save_model(model, tokenizer, tmp_path_factory.mktemp("guarded") / MODEL))
    limits = [
        "--api-key",
        KEY,
        "--max-tokens",
        "16",
        "--max-tokens-limit",
        str(LONG),
        "--max-prompt-tokens",
        str(MAX_PROMPT_TOKENS),
        "--max-body-bytes",
        "65536",
        "--max-json-depth",
        "32",
        "--max-tools-bytes",
        "4096",
        "--max-concurrent",
        "1",
        "--max-queue",
        "1",
    ]
    with ServerProcess(checkpoint, *limits) as server:
        yield server


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as client:
        yield client


def _root(server) -> str:
    return server.base_url.removesuffix("/v1")


def _metrics(http) -> dict[str, int]:
    response = http.get(str(http.base_url).rstrip("/").removesuffix("/v1") + "/metrics")
    assert response.status_code == 200, response.text
    return response.json()


def _wait_for(http, condition, what: str) -> dict[str, int]:
    """Poll /metrics until ``condition(metrics)``; fail after DEADLINE_SECONDS."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        metrics = _metrics(http)
        if condition(metrics):
            return metrics
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {DEADLINE_SECONDS} s; last metrics {metrics}")
        time.sleep(0.02)


def _open_request(server, path: str, body: dict) -> socket.socket:
    """Send a POST on a raw socket and leave it open: closing it is the client disconnecting."""
    url = urlsplit(server.base_url)
    data = json.dumps(body).encode()
    sock = socket.create_connection((url.hostname, url.port))
    head = (
        f"POST {url.path}{path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    return error


def _chat(**fields) -> dict:
    return {"model": MODEL, "messages": HELLO, **fields}


# -- API key -----------------------------------------------------------------------------


def test_security_every_route_but_health_needs_the_api_key(server, http):
    root = _root(server)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}):
        for method, route in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/metrics")):
            response = httpx.request(method, root + route, headers=headers, json=_chat())
            assert response.status_code == 401, (headers, route)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(root + "/health").json()["status"] == "ok"  # readiness probes need no key
    with openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0) as client:
        assert client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2).usage.completion_tokens == 2
    with (
        openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0) as client,
        pytest.raises(openai.AuthenticationError),
    ):
        client.models.list()


def test_security_a_public_host_without_a_key_is_refused_at_startup(monkeypatch):
    monkeypatch.delenv("KNOWLYR_SERVE_API_KEY", raising=False)
    for host in ("0.0.0.0", "::", "192.168.1.10", "myhost.example"):
        result = CliRunner().invoke(serve, ["./no/such/checkpoint", "--host", host, "--port", "0"])
        assert result.exit_code == 1
        (line,) = result.output.strip().splitlines()
        assert line.startswith(f"Error: refusing to serve on {host} without an API key")
        assert "--insecure" in line
    # Past the check (a key, or --insecure), startup goes on to load the model, which is missing here.
    for args, env in ((["--insecure"], {}), ([], {"KNOWLYR_SERVE_API_KEY": KEY}), (["--api-key", KEY], {})):
        result = CliRunner().invoke(serve, ["./no/such/checkpoint", "--host", "0.0.0.0", "--port", "0", *args], env=env)
        assert result.exit_code == 1 and "does not exist" in result.output, (args, result.output)


# -- caps --------------------------------------------------------------------------------


def test_security_a_body_past_the_cap_is_413_before_it_is_read(http):
    too_big = json.dumps(_chat(messages=[{"role": "user", "content": "x" * 70_000}]))
    error = _error(http.post("/chat/completions", content=too_big), 413)
    assert error["code"] == "request_too_large" and "65536 bytes" in error["message"]

    def chunks():  # no Content-Length: the size is counted as the body arrives
        for _ in range(20):
            yield b" " * 4096

    assert _error(http.post("/chat/completions", content=chunks()), 413)["code"] == "request_too_large"
    assert _error(http.post("/completions", content=too_big), 413)["code"] == "request_too_large"


def test_security_a_long_prompt_is_refused_by_its_characters_before_tokenizing(http):
    chars = MAX_PROMPT_TOKENS * LONGEST_TOKEN + 1  # no text this long fits MAX_PROMPT_TOKENS tokens
    error = _error(http.post("/chat/completions", json=_chat(messages=[{"role": "user", "content": "a" * chars}])), 400)
    assert (error["code"], error["param"]) == ("prompt_too_long", "messages")
    assert f"has {chars} characters" in error["message"]
    error = _error(http.post("/completions", json={"model": MODEL, "prompt": ["hi", "a" * chars]}), 400)
    assert (error["code"], error["param"]) == ("prompt_too_long", "prompt[1]")
    assert f"has {chars} characters" in error["message"]


def test_security_a_prompt_past_the_token_cap_is_400(http):
    words = [{"role": "user", "content": "hello " * MAX_PROMPT_TOKENS}]  # few characters, too many tokens
    error = _error(http.post("/chat/completions", json=_chat(messages=words)), 400)
    assert error["code"] == "prompt_too_long" and f"up to {MAX_PROMPT_TOKENS} tokens" in error["message"]
    error = _error(http.post("/completions", json={"model": MODEL, "prompt": [5] * (MAX_PROMPT_TOKENS + 1)}), 400)
    assert (error["code"], error["param"]) == ("prompt_too_long", "prompt")


def test_security_max_tokens_above_the_limit_is_400_not_clamped(http):
    for field in ("max_tokens", "max_completion_tokens"):
        error = _error(http.post("/chat/completions", json=_chat(**{field: 100_000})), 400)
        assert (error["code"], error["param"]) == ("max_tokens_too_large", field)
        assert f"limit of {LONG}" in error["message"]
    error = _error(http.post("/completions", json={"model": MODEL, "prompt": [5], "max_tokens": 100_000}), 400)
    assert (error["code"], error["param"]) == ("max_tokens_too_large", "max_tokens")


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("route", ["/chat/completions", "/completions"])
def test_security_deeply_nested_json_is_400_never_500(http, route):
    # 20000 levels make json.loads raise RecursionError; 33 levels parse but pass the cap of 32.
    for body in (_nested(20_000), f'{{"model": "{MODEL}", "x": {_nested(33)}}}'):
        assert _error(http.post(route, content=body), 400)["code"] == "json_too_deep", route


def test_security_tool_schemas_are_capped_in_depth_and_size(http):
    deep: dict = {"type": "string"}
    for _ in range(30):  # the body nests deeper than 32 levels inside the schema
        deep = {"type": "object", "properties": {"a": deep}}
    tool = {"type": "function", "function": {"name": "f", "parameters": deep}}
    assert _error(http.post("/chat/completions", json=_chat(tools=[tool])), 400)["code"] == "json_too_deep"
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(300)}}
    tool = {"type": "function", "function": {"name": "f", "parameters": wide}}
    error = _error(http.post("/chat/completions", json=_chat(tools=[tool])), 400)
    assert (error["code"], error["param"]) == ("tools_too_large", "tools")


@pytest.mark.parametrize(
    "body",
    [
        "NaN",
        '{"model": "m", "temperature": Infinity}',
        '{"seed": 1' + "0" * 5000 + "}",  # past Python's int-from-string digit limit
        b'{"model": "\xff"}',
        "",
    ],
)
def test_security_malformed_json_is_400(http, body):
    assert "not valid JSON" in _error(http.post("/chat/completions", content=body), 400)["message"]


# -- strict types --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream": "false"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"stream_options": "usage"}, "stream_options"),
        ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        ({"n": True}, "n"),
        ({"n": "1"}, "n"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": 5.0}, "max_tokens"),
        ({"temperature": "0.5"}, "temperature"),
        ({"top_p": [1]}, "top_p"),
        ({"seed": 2**70}, "seed"),
        ({"stop": ["x" * 1000]}, "stop"),
        ({"stop": {"a": 1}}, "stop"),
        ({"tool_choice": 5}, "tool_choice"),
        ({"tool_choice": ["auto"]}, "tool_choice"),
        ({"tool_choice": {"type": "function"}}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "tools"),
        ({"tools": {"type": "function"}}, "tools"),
        ({"model": ["m"]}, "model"),
        ({"messages": {"role": "user"}}, "messages"),
        (
            {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": 5}}]}]},
            "messages[0].tool_calls",
        ),
        ({"messages": [{"role": ["user"], "content": "hi"}]}, "messages[0].role"),
    ],
)
def test_security_chat_fields_have_strict_types(http, fields, param):
    response = http.post("/chat/completions", json=_chat(**fields))
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"] == "application/json"  # an error, not a stream
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream": "false"}, "stream"),
        ({"echo": "false"}, "echo"),
        ({"n": True}, "n"),
        ({"logprobs": "0"}, "logprobs"),
        ({"return_token_ids": "true"}, "return_token_ids"),
        ({"prompt": [[5]] * 257}, "prompt"),
        ({"prompt": {"ids": [5]}}, "prompt"),
        ({"prompt": [5, "6"]}, "prompt"),
    ],
)
def test_security_completion_fields_have_strict_types(http, fields, param):
    response = http.post("/completions", json={"model": MODEL, "prompt": [5], **fields})
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]["param"] == param


def test_security_a_non_object_body_is_400(http):
    for body in ([], "x", 3, None):
        for route in ("/chat/completions", "/completions", "/load_weights"):
            response = http.post(route, json=body)
            assert 400 <= response.status_code < 500, (route, body, response.text)


# -- cancellation and the queue ------------------------------------------------------------

LONG_REQUESTS = {
    "chat": ("/chat/completions", _chat(max_tokens=LONG)),
    "chat-stream": ("/chat/completions", _chat(max_tokens=LONG, stream=True)),
    "chat-stream-tools": (  # nothing is sent while text that may start a tool call is held back
        "/chat/completions",
        _chat(max_tokens=LONG, stream=True, tools=[{"type": "function", "function": {"name": "f"}}]),
    ),
    "completions": ("/completions", {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": LONG}),
}


@pytest.mark.parametrize("kind", list(LONG_REQUESTS))
def test_security_a_client_that_disconnects_stops_its_generation(server, http, kind):
    route, body = LONG_REQUESTS[kind]
    before = _wait_for(http, lambda m: m["generations_running"] == 0, "idle server")
    sock = _open_request(server, route, body)
    _wait_for(
        http,
        lambda m: m["generations_running"] == 1 and m["model_forward_passes"] >= before["model_forward_passes"] + 20,
        "generation under way",
    )
    sock.close()
    after = _wait_for(http, lambda m: m["generations_running"] == 0, "generation stopped")
    assert after["generations_cancelled"] == before["generations_cancelled"] + 1
    # Run to the end, the generation would have taken LONG forward passes.
    assert after["model_forward_passes"] - before["model_forward_passes"] < LONG // 2


def test_security_the_queue_is_bounded_and_refuses_with_429(server, http):
    before = _wait_for(http, lambda m: m["generations_running"] == 0, "idle server")
    route, body = LONG_REQUESTS["chat"]
    running = _open_request(server, route, body)
    _wait_for(http, lambda m: m["generations_running"] == 1, "first generation running")
    waiting = _open_request(server, route, body)
    _wait_for(http, lambda m: m["generations_waiting"] == 1, "second generation queued")
    for route, request in (("/chat/completions", _chat()), ("/completions", {"model": MODEL, "prompt": [5]})):
        response = http.post(route, json=request)
        assert _error(response, 429)["code"] == "server_busy"
        assert int(response.headers["retry-after"]) >= 1
    running.close()
    waiting.close()
    after = _wait_for(
        http, lambda m: m["generations_running"] == 0 and m["generations_waiting"] == 0, "both generations gone"
    )
    assert after["generations_cancelled"] == before["generations_cancelled"] + 2
    assert after["model_forward_passes"] - before["model_forward_passes"] < LONG // 2
    assert http.post("/chat/completions", json=_chat(max_tokens=2)).json()["usage"]["completion_tokens"] == 2
