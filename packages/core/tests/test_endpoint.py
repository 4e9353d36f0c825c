"""``EndpointPolicy`` and its transport against real HTTP servers on loopback: knowlyr-core's
policy suite over OpenAI-compatible chat completions and over Anthropic's Messages API, the
request each API gets, retries, clear errors when the endpoint is down or answers nonsense, and
hostile replies (not JSON, oversized, the wrong shape, lone surrogates) that never end a run."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from knowlyrcore import AgentEnv, TimeStep, write_trajectories
from knowlyrcore.domain import get_domain_profile, tool_schemas
from knowlyrcore.endpoint import MAX_REPLY_BYTES, EndpointError, EndpointPolicy
from knowlyrcore.policy import as_batch_policy
from knowlyrcore.rollout import play_episodes, wrap_episode_env
from knowlyrcore.testing import PolicyConformance, ScriptedChatServer

TOOLS = [t.to_openai_tool() for t in get_domain_profile("engineering").tools]  # bash, ..., submit, finish


@pytest.fixture
def chat_server():
    with ScriptedChatServer() as server:
        yield server


def openai_view(body):
    """The OpenAI-style messages a Messages API request ``body`` was made from."""
    messages = [{"role": "system", "content": body["system"]}] if "system" in body else []
    for turn in body["messages"]:
        content = turn["content"]
        if isinstance(content, str):
            messages.append({"role": turn["role"], "content": content})
            continue
        for block in content:
            if block["type"] == "tool_result":
                messages.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": block["content"]})
        if turn["role"] == "assistant":
            text = "".join(block["text"] for block in content if block["type"] == "text")
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
                }
                for b in content
                if b["type"] == "tool_use"
            ]
            messages.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
    return messages


class TestEndpointPolicyConforms(PolicyConformance):
    closing_tool, closing_param = "finish", "message"

    @pytest.fixture(autouse=True)
    def _server(self, chat_server):
        self.server = chat_server

    def make_policy(self):
        return EndpointPolicy(self.server.base_url, "policy", tools=TOOLS, system_prompt="You are an engineer.")

    def script_replies(self, replies):
        self.server.replies.extend(replies)

    def model_requests(self):
        return [request["body"]["messages"] for request in self.server.requests]


class TestEndpointPolicyConformsOverAnthropic(TestEndpointPolicyConforms):
    def make_policy(self):
        return EndpointPolicy(
            self.server.base_url, "claude", api="anthropic", tools=TOOLS, system_prompt="You are an engineer."
        )

    def model_requests(self):
        assert {request["path"] for request in self.server.requests} == {"/v1/messages"}
        return [openai_view(request["body"]) for request in self.server.requests]


# -- what each API is sent --------------------------------------------------------------------------


def test_an_openai_request_carries_model_key_options_and_tools(chat_server):
    chat_server.replies.append(PolicyConformance.tool_call("bash", '{"command": "ls"}', call_id="call_7"))
    policy = EndpointPolicy(
        chat_server.base_url + "/",
        "m-1",
        api_key="k-1",
        system_prompt="Be brief.",
        tools=TOOLS,
        temperature=0.5,
        max_tokens=32,
    )
    action = policy("Task: fix the failing test")
    assert action == {"tool": "bash", "params": {"command": "ls"}, "thought": "", "id": "call_7"}
    (request,) = chat_server.requests
    assert request["path"] == "/v1/chat/completions" and request["authorization"] == "Bearer k-1"
    body = request["body"]
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("m-1", 0.5, 32)
    assert body["tools"] == TOOLS
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Task: fix the failing test"},
    ]


def test_without_tools_or_key_the_request_has_neither(chat_server):
    chat_server.replies.append({"content": "hi"})
    policy = EndpointPolicy(chat_server.base_url, "m")
    assert policy("hello") == {"tool": "respond", "params": {"message": "hi"}, "thought": ""}
    (request,) = chat_server.requests
    assert request["authorization"] is None
    assert "tools" not in request["body"] and request["body"]["messages"] == [{"role": "user", "content": "hello"}]


def test_an_anthropic_request_speaks_the_messages_api(chat_server):
    chat_server.replies += [
        PolicyConformance.tool_call("bash", '{"command": "ls"}', content="Look first.", call_id="toolu_1"),
        {"content": "Two files."},
    ]
    policy = EndpointPolicy(
        chat_server.base_url, "claude", api="anthropic", api_key="sk-ant", system_prompt="Be brief."
    )
    policy.set_tools(tool_schemas(["bash", "finish"], "coding"))
    assert policy("list the files") == {
        "tool": "bash",
        "params": {"command": "ls"},
        "thought": "Look first.",
        "id": "toolu_1",
    }
    assert policy("a.py\nb.py") == {"tool": "finish", "params": {"message": "Two files."}, "thought": ""}
    first, second = chat_server.requests
    assert first["path"] == "/v1/messages" and first["authorization"] is None
    assert first["headers"]["x-api-key"] == "sk-ant" and first["headers"]["anthropic-version"] == "2023-06-01"
    body = second["body"]
    assert "temperature" not in body and body["max_tokens"] == 1024 and body["system"] == "Be brief."
    assert body["tools"][0] == {
        "name": "bash",
        "description": get_domain_profile("coding").get_tool("bash").description,
        "input_schema": get_domain_profile("coding").get_tool("bash").parameters,
    }
    assert body["messages"] == [
        {"role": "user", "content": "list the files"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Look first."},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py\nb.py"}]},
    ]


def test_an_anthropic_url_picks_the_messages_api():
    assert EndpointPolicy("https://api.anthropic.com/v1", "claude").api == "anthropic"
    assert EndpointPolicy("http://127.0.0.1:8000/v1", "m").api == "openai"
    with pytest.raises(ValueError, match="api must be one of openai, anthropic"):
        EndpointPolicy("http://127.0.0.1:8000/v1", "m", api="gemini")


def test_an_empty_anthropic_reply_is_left_out_of_the_next_request(chat_server):
    """The Messages API refuses empty content; the user turns around the empty reply merge."""
    chat_server.replies += [{"content": ""}, {"content": "ok"}]
    policy = EndpointPolicy(chat_server.base_url, "claude", api="anthropic")
    assert policy("hello")["params"] == {"message": ""}
    policy("anyone there?")
    assert chat_server.requests[1]["body"]["messages"] == [
        {"role": "user", "content": "hello"},
        {"role": "user", "content": "anyone there?"},
    ]


# -- tools and the closing action ---------------------------------------------------------------------


def test_the_closing_tool_is_the_domains_or_the_one_given(chat_server):
    chat_server.replies += [{"content": "Your order shipped yesterday."}, {"content": "42"}]
    conversation = tool_schemas(get_domain_profile("conversation").tool_names, "conversation")
    assert EndpointPolicy(chat_server.base_url, "m", tools=conversation)("Where is my order?") == {
        "tool": "respond",
        "params": {"message": "Your order shipped yesterday."},
        "thought": "",
    }
    policy = EndpointPolicy(chat_server.base_url, "m", tools=TOOLS, closing_tool="submit")
    assert policy("what is 6*7?")["params"] == {"answer": "42"}


def test_tools_set_for_an_episode_last_until_reset(chat_server):
    chat_server.replies += [{"content": "a"}, {"content": "b"}]
    policy = EndpointPolicy(chat_server.base_url, "m", tools=TOOLS)
    policy.set_tools([{"type": "function", "function": {"name": "mine"}}])
    policy("first")
    policy.reset()
    policy("second")
    offered = [[t["function"]["name"] for t in request["body"]["tools"]] for request in chat_server.requests]
    assert offered[0] == ["mine"] and offered[1] == [t["function"]["name"] for t in TOOLS]


def test_without_include_tools_requests_carry_none_and_replies_still_use_them(chat_server):
    chat_server.replies.append({"content": "done"})
    policy = EndpointPolicy(chat_server.base_url, "m", tools=TOOLS, include_tools=False)
    assert policy("go")["tool"] == "finish"
    assert "tools" not in chat_server.requests[0]["body"]


# -- failures and retries -------------------------------------------------------------------------------


class RawServer:
    """A loopback server answering each POST with the next scripted ``(status, headers, body bytes)``."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.count = 0

    def __enter__(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.count += 1
                status, headers, body = owner.answers.pop(0)
                self.send_response(status)
                for name, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(content):
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


def test_an_unreachable_endpoint_is_retried_then_an_endpoint_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    policy = EndpointPolicy(f"http://127.0.0.1:{port}/v1", "m", timeout=5, max_retries=1)
    with pytest.raises(
        EndpointError, match=r"policy endpoint http://127.0.0.1:\d+/v1 failed: unreachable .*2 attempts"
    ):
        policy("Task: anything")


def test_an_http_error_names_the_server_reason(chat_server):
    policy = EndpointPolicy(chat_server.base_url, "m", max_retries=0)  # nothing scripted: HTTP 500
    with pytest.raises(EndpointError, match="HTTP 500 .*no reply left"):
        policy("Task: anything")


def test_a_wrong_path_is_an_endpoint_error_at_once(chat_server):
    policy = EndpointPolicy(chat_server.base_url.removesuffix("/v1") + "/elsewhere", "m")
    with pytest.raises(EndpointError, match="HTTP 404") as raised:
        policy("Task: anything")
    assert "attempts" not in str(raised.value)  # a client error is not retried


def test_rate_limits_and_server_errors_are_retried_after_the_time_asked():
    now = {"Retry-After": "0"}
    nonsense = {"Retry-After": "nan"}  # no number: the backoff's own 0.5 s
    with RawServer((429, now, b"slow down"), (503, nonsense, b"busy"), (200, {}, completion("hi"))) as server:
        assert EndpointPolicy(server.base_url, "m")("hello")["params"] == {"message": "hi"}
        assert server.count == 3
    failing = RawServer((500, now, b"down"), (502, now, b"still down"))
    with failing, pytest.raises(EndpointError, match=r"HTTP 502 .*still down \(2 attempts\)"):
        EndpointPolicy(failing.base_url, "m", max_retries=1)("hello")


@pytest.mark.parametrize(
    ("api", "body", "problem"),
    [
        ("openai", b"<html>gateway</html>", "the reply is not JSON"),
        ("openai", b"\xff\xfe{}", "the reply is not JSON"),
        ("openai", b"[" * 100_000 + b"]" * 100_000, "the reply is not JSON"),
        ("openai", b"1" * 5000, "the reply is not JSON"),  # an integer past Python's 4300 digits
        ("openai", b" " * (MAX_REPLY_BYTES + 1), f"over {MAX_REPLY_BYTES} bytes"),
        ("openai", b"{}", "not a chat completion"),
        ("openai", b'{"choices": []}', "not a chat completion"),
        ("openai", b'{"choices": [{"message": "hi"}]}', "not a chat completion"),
        ("openai", b'{"choices": [{"message": {"content": 7}}]}', "not a chat completion"),
        ("openai", b'{"choices": [{"message": {"content": "", "tool_calls": "bash"}}]}', "not a chat completion"),
        ("anthropic", b'{"content": "hi"}', "not a chat completion"),
        ("anthropic", b'{"content": [{"type": "text", "text": 7}]}', "not a chat completion"),
    ],
)
def test_hostile_a_reply_that_is_no_chat_completion_is_an_endpoint_error(api, body, problem):
    with RawServer((200, {}, body)) as server:
        with pytest.raises(EndpointError, match=problem):
            EndpointPolicy(server.base_url, "m", api=api)("hello")
        assert server.count == 1  # an answer, if a bad one: asking again would not mend it


def test_hostile_anthropic_blocks_of_other_kinds_are_skipped():
    reply = {
        "content": [
            "junk",
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "Done."},
            {"type": "tool_use", "id": "t1", "name": "bash", "input": "not an object"},
        ]
    }
    with RawServer((200, {}, json.dumps(reply).encode())) as server:
        action = EndpointPolicy(server.base_url, "m", api="anthropic", tools=TOOLS)("hello")
    assert (action["tool"], action["params"], action["thought"], action["id"]) == ("bash", {}, "Done.", "t1")
    assert "format_error" in action


# -- through the acting loop ------------------------------------------------------------------------------


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


NOTE_TOOLS = [{"type": "function", "function": {"name": name}} for name in ("note", "finish")]


def play(server):
    policy = as_batch_policy(lambda: EndpointPolicy(server.base_url, "m", tools=NOTE_TOOLS))
    (episode,) = play_episodes([wrap_episode_env(NoteEnv())], policy, [None])
    return episode.trajectory


def test_the_recorded_steps_keep_the_call_ids_and_format_errors(chat_server):
    chat_server.replies += [
        PolicyConformance.tool_call("note", '{"text": "a"}', call_id="call_1"),
        PolicyConformance.tool_call("note", "not json", call_id="call_2"),
        {"content": "Done."},
    ]
    trajectory = play(chat_server)
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
    trajectory = play(chat_server)
    assert [s.tool_call.parameters for s in trajectory.steps] == [{"text": "a\ufffd"}, {"message": "Done \ufffd."}]
    assert chat_server.requests[1]["body"]["messages"][-1]["content"] == "noted {'text': 'a\ufffd'}"
    write_trajectories(tmp_path / "out.jsonl", [trajectory])
