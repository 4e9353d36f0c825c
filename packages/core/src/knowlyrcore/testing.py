"""Test helpers: the standard environment and policy suites, a scripted chat server, and
component requirements.

Every environment in every package runs the same suite by subclassing ``EnvConformance``::

    from knowlyrcore.testing import EnvConformance

    class TestMyEnv(EnvConformance):
        task = "fix the bug"
        actions = [{"tool": "bash", "params": {"command": "ls"}}]
        terminal_action = {"tool": "submit", "params": {}}

        def make_env(self):
            return MyEnv()

Every chat-model policy runs ``PolicyConformance`` the same way: ``make_policy`` returns a
fresh policy wired to a scripted model, ``script_replies`` queues the model's next answers (as
OpenAI assistant messages; a text-only model renders them with ``PolicyConformance.hermes_text``)
and ``model_requests`` returns the message lists the model received::

    from knowlyrcore.testing import PolicyConformance

    class TestMyPolicy(PolicyConformance):
        @pytest.fixture(autouse=True)
        def _server(self):
            with ScriptedChatServer() as self.server:
                yield

        def make_policy(self):
            return MyPolicy(self.server.base_url, tools=[BASH, RESPOND])

        def script_replies(self, replies):
            self.server.replies.extend(replies)

        def model_requests(self):
            return [request["body"]["messages"] for request in self.server.requests]

``ScriptedChatServer`` is a real OpenAI-compatible ``/v1/chat/completions`` server on loopback
(stdlib ``http.server`` in a thread), with Anthropic's ``/v1/messages`` beside it, that answers
with scripted assistant messages and keeps every request, for testing endpoint clients without a
model.

``malformed_corpus(folder, good, wrong_types)`` writes the files every file-reading command
must refuse with one ``error:`` line and exit code 2 (empty, truncated, binary, UTF-16,
Latin-1, nested 100,000 deep, a 200 MB line, NaN, wrong types, a bad line 50,000), built around
one good record of the command's own format; ``check_refusal`` checks a command's answer.

``require(available, reason)`` skips a test whose component (Docker, a model) is missing, and
fails it instead when ``KNOWLYR_REQUIRE_COMPONENTS=1`` (CI sets it) so nothing is silently
skipped there. ``require_module(name, reason)`` does the same for an importable component (an
extra the dev install brings: mcp, openai, peft) and returns the module; at a test file's top
it skips or fails the whole file. Optional *sibling* packages, absent when a package is tested
alone, stay with ``pytest.importorskip``.

``real_data(*parts)`` is the path of the published real agent logs (``shared/data/real`` beside
the clone, or ``$KNOWLYR_REAL_DATA``) or of a file in them; a test skips without them, or fails
under ``KNOWLYR_REQUIRE_COMPONENTS=1``, like any missing component.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

from knowlyrcore.actions import parse_action
from knowlyrcore.checker import check_env
from knowlyrcore.env import AgentEnv
from knowlyrcore.models import TaskInfo
from knowlyrcore.policy import Policy, as_batch_policy
from knowlyrcore.timestep import TimeStep
from knowlyrcore.trajectory import Trajectory
from knowlyrcore.wrappers import MaxStepsWrapper, RecorderWrapper

REQUIRE_ENV_VAR = "KNOWLYR_REQUIRE_COMPONENTS"


def require(available: bool, reason: str) -> None:
    """Skip the calling test when ``available`` is false, or fail it under CI's strict mode."""
    if available:
        return
    if os.environ.get(REQUIRE_ENV_VAR, "") not in ("", "0", "false", "no"):
        pytest.fail(f"required component missing ({REQUIRE_ENV_VAR} is set): {reason}")
    pytest.skip(reason, allow_module_level=True)


def require_module(name: str, reason: str) -> ModuleType:
    """Import and return module ``name``; when it cannot be imported, ``require(False, reason)``.

    Called at a test file's top level it skips (or, under strict mode, fails) the whole file.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        require(False, f"{reason} ({exc})")
        raise  # unreachable: require skipped or failed


def import_file(path: str | os.PathLike[str], name: str | None = None) -> ModuleType:
    """Import the Python file at ``path`` as a module (a script or example that is not a package)."""

    spec = importlib.util.spec_from_file_location(name or Path(path).stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The folder of the published real agent logs. The repository's root conftest.py sets it to
#: ``shared/data/real`` beside the clone when it is unset: this module may be installed in
#: site-packages (the isolated per-package runs), from where the clone cannot be found.
REAL_DATA_ENV_VAR = "KNOWLYR_REAL_DATA"


def real_data(*parts: str) -> Path:
    """The real agent logs' folder (``$KNOWLYR_REAL_DATA``), or the file ``parts`` in it.

    When it does not exist, ``require(False, ...)``: the calling test skips, or fails under
    ``KNOWLYR_REQUIRE_COMPONENTS=1``.
    """
    folder = os.environ.get(REAL_DATA_ENV_VAR, "")
    require(bool(folder), f"{REAL_DATA_ENV_VAR} is not set: run pytest in the knowlyr clone or set it")
    path = Path(folder).joinpath(*parts)
    require(
        path.exists(), f"real agent logs not found: {path} (shared/data/real beside the clone, or {REAL_DATA_ENV_VAR})"
    )
    return path


class _ChatHandler(BaseHTTPRequestHandler):
    server: Any  # the ThreadingHTTPServer, whose ``owner`` is the ScriptedChatServer

    def do_POST(self) -> None:
        owner: ScriptedChatServer = self.server.owner
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        if self.path not in ("/v1/chat/completions", "/v1/messages"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        with owner.lock:
            owner.requests.append(
                {
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "headers": {name.lower(): value for name, value in self.headers.items()},
                    "body": body,
                }
            )
            reply = owner.replies.pop(0) if owner.replies else None
        if reply is None:
            self._send(500, {"error": {"message": "the scripted server has no reply left"}})
            return
        message = {"role": "assistant", "content": None, **reply}
        if self.path == "/v1/messages":
            self._send(200, _anthropic_reply(message, (body or {}).get("model", ""), len(owner.requests)))
            return
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
        }
        self._send(
            200,
            {
                "id": f"chatcmpl-{len(owner.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": (body or {}).get("model", ""),
                "choices": [choice],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            },
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


def _anthropic_reply(message: dict[str, Any], model: str, number: int) -> dict[str, Any]:
    """The scripted OpenAI-style ``message`` as a Messages API reply. A call's arguments that are
    not JSON go as the raw string (the API itself always sends an object), so a client's handling
    of unusable arguments is tested over this API too."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message["content"]}] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        function = call["function"]
        try:
            given = json.loads(function["arguments"])
        except json.JSONDecodeError:
            given = function["arguments"]
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": function["name"], "input": given})
    return {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": "tool_use" if message.get("tool_calls") else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }


class ScriptedChatServer:
    """A chat server on ``127.0.0.1`` answering from a script: OpenAI-compatible chat completions,
    and Anthropic's Messages API.

    Append assistant messages (``{"content", "tool_calls"}``) to ``replies``; each POST to
    ``{base_url}/chat/completions`` (or ``{base_url}/messages``, answered in the Messages API's
    form) pops one (HTTP 500 when none is left) and is recorded in ``requests`` as ``{"path",
    "authorization", "headers" (lower-case names), "body"}``. Use it as a context manager.

    Examples:
        >>> import urllib.request
        >>> with ScriptedChatServer() as server:
        ...     server.replies.append({"content": "hi"})
        ...     request = urllib.request.Request(server.base_url + "/chat/completions", data=b'{"model": "m"}')
        ...     reply = json.loads(urllib.request.urlopen(request).read())
        >>> reply["choices"][0]["message"], server.requests[0]["body"]
        ({'role': 'assistant', 'content': 'hi'}, {'model': 'm'})
    """

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not running: use it as a context manager")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> ScriptedChatServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self  # type: ignore[attr-defined]
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class EnvConformance:
    """The protocol suite every ``AgentEnv`` implementation passes. Subclass and set ``make_env``."""

    #: task passed to reset()
    task: ClassVar[Any] = None
    #: non-terminal actions that must succeed after reset()
    actions: ClassVar[list[dict[str, Any]]] = []
    #: an action that ends the episode (terminated=True), or None if the env has none
    terminal_action: ClassVar[dict[str, Any] | None] = None
    #: whether reset() with the same seed must give the same first observation
    deterministic_reset: ClassVar[bool] = True

    def make_env(self) -> AgentEnv:
        raise NotImplementedError("subclasses return a fresh environment")

    @pytest.fixture
    def env(self):
        env = self.make_env()
        try:
            yield env
        finally:
            env.close()

    def test_check_env_passes(self, env):
        check_env(
            env,
            task=self.task,
            actions=self.actions or None,
            check_determinism=self.deterministic_reset,
            make_env=self.make_env,
        )

    def test_reset_returns_fresh_timestep(self, env):
        ts = env.reset(task=self.task, seed=0)
        assert isinstance(ts, TimeStep)
        assert not ts.done

    def test_available_tools_are_names(self, env):
        tools = env.available_tools
        assert isinstance(tools, list) and all(isinstance(t, str) and t for t in tools)
        for action in self.actions + ([self.terminal_action] if self.terminal_action else []):
            assert action["tool"] in tools, f"test action uses {action['tool']!r}, not in available_tools"

    def test_actions_step_without_ending(self, env):
        env.reset(task=self.task, seed=0)
        for action in self.actions:
            ts = env.step(action)
            assert isinstance(ts, TimeStep)
            assert not ts.terminated, f"non-terminal action {action} terminated the episode"

    def test_terminal_action_terminates(self, env):
        if self.terminal_action is None:
            pytest.skip("environment declares no terminal action")
        env.reset(task=self.task, seed=0)
        ts = env.step(self.terminal_action)
        assert ts.terminated and ts.done

    def test_recorded_trajectory_validates_and_round_trips(self, env):
        recorded = RecorderWrapper(env, agent_name="conformance")
        recorded.reset(task=self.task, seed=0)
        steps = [*self.actions, *([self.terminal_action] if self.terminal_action else [])]
        for action in steps:
            if recorded.step(action).done:
                break
        trajectory = recorded.get_trajectory()
        assert len(trajectory.steps) == len(steps)
        assert [s.tool_call.name for s in trajectory.steps] == [a["tool"] for a in steps]
        again = Trajectory.model_validate(json.loads(trajectory.model_dump_json()))
        assert again == trajectory

    def test_max_steps_wrapper_truncates(self, env):
        if not self.actions:
            pytest.skip("needs a non-terminal action")
        limited = MaxStepsWrapper(env, max_steps=1)
        limited.reset(task=self.task, seed=0)
        ts = limited.step(self.actions[0])
        assert ts.done

    def test_context_manager_and_double_close(self):
        with self.make_env() as env:
            env.reset(task=self.task, seed=0)
        env.close()


class PolicyConformance:
    """The protocol suite every chat-model ``Policy`` passes. Subclass and implement the hooks.

    The policy must offer ``call_tool`` and, when it knows the domain's tools, have
    ``closing_tool`` as the first of ``finish``/``submit``/``respond`` among them.
    """

    #: the task passed to reset()
    task: ClassVar[Any] = TaskInfo(id="conformance", description="List the files.")
    #: the first observation of an episode
    observation: ClassVar[str] = "Task: list the files in the working directory."
    #: a tool the policy offers, and parameters for it
    call_tool: ClassVar[str] = "bash"
    call_params: ClassVar[dict[str, Any]] = {"command": "ls"}
    #: what a reply without a tool call must become: the closing tool and its text parameter
    closing_tool: ClassVar[str] = "respond"
    closing_param: ClassVar[str] = "message"

    # -- hooks ---------------------------------------------------------------------------------

    def make_policy(self) -> Policy:
        raise NotImplementedError("subclasses return a fresh policy wired to the scripted model")

    def script_replies(self, replies: list[dict[str, Any]]) -> None:
        """Queue the model's next answers, one per model call, as OpenAI assistant messages."""
        raise NotImplementedError("subclasses make the model answer with these replies")

    def model_requests(self) -> list[list[dict[str, Any]]]:
        """The messages the model received on each call so far (copies, oldest first)."""
        raise NotImplementedError("subclasses return what the model was sent")

    # -- helpers for subclasses and tests ------------------------------------------------------

    @staticmethod
    def tool_call(name: str, arguments: str, *, content: str = "", call_id: str = "call_1") -> dict[str, Any]:
        """An assistant message making one native call with raw ``arguments`` (a JSON string)."""
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        return {"role": "assistant", "content": content, "tool_calls": [call]}

    @staticmethod
    def hermes_text(reply: dict[str, Any]) -> str:
        """``reply`` as a text-only model writes it: content, then one ``<tool_call>`` block per call.

        Arguments that are valid JSON are embedded as JSON; others as a JSON string, which the
        parser then reports as unparseable arguments, like a native call's.
        """
        parts = [reply.get("content") or ""]
        for call in reply.get("tool_calls") or []:
            function = call["function"]
            try:
                arguments = json.loads(function["arguments"])
            except json.JSONDecodeError:
                arguments = function["arguments"]
            parts.append(
                "<tool_call>\n" + json.dumps({"name": function["name"], "arguments": arguments}) + "\n</tool_call>"
            )
        return "\n".join(p for p in parts if p)

    def assert_well_formed(self, action: Any) -> None:
        """An action any environment can parse, with a string thought and a non-empty format_error."""
        parse_action(action)
        assert isinstance(action.get("thought", ""), str), f"thought must be a string: {action!r}"
        if "format_error" in action:
            assert isinstance(action["format_error"], str) and action["format_error"], action

    def _start(self) -> Policy:
        policy = self.make_policy()
        policy.reset(self.task)
        return policy

    # -- the suite ------------------------------------------------------------------------------

    def test_is_a_policy_with_reset_task(self):
        policy = self.make_policy()
        assert isinstance(policy, Policy)
        task = inspect.signature(policy.reset).parameters.get("task")
        assert task is not None and task.default is None, "reset must be reset(task=None)"

    def test_native_tool_call_becomes_the_action(self):
        self.script_replies([self.tool_call(self.call_tool, json.dumps(self.call_params), content="Look first.")])
        action = self._start()(self.observation)
        self.assert_well_formed(action)
        assert (action["tool"], action["params"], action["thought"]) == (
            self.call_tool,
            self.call_params,
            "Look first.",
        )
        assert "format_error" not in action
        (request,) = self.model_requests()
        assert request[-1] == {"role": "user", "content": self.observation}

    def test_reply_without_tool_call_becomes_the_closing_tool(self):
        self.script_replies([{"role": "assistant", "content": "All done: two files."}])
        action = self._start()(self.observation)
        self.assert_well_formed(action)
        assert action["tool"] == self.closing_tool
        assert action["params"] == {self.closing_param: "All done: two files."}
        assert "format_error" not in action

    def test_malformed_arguments_name_the_tool_with_a_format_error(self):
        self.script_replies(
            [self.tool_call(self.call_tool, '{"command": "ls'), self.tool_call(self.call_tool, "[1, 2]")]
        )
        policy = self._start()
        for observation in (self.observation, "error: the call could not be parsed"):
            action = policy(observation)
            self.assert_well_formed(action)
            assert (action["tool"], action["params"]) == (self.call_tool, {})
            assert "format_error" in action

    def test_text_action_follows_the_shared_rules(self):
        params = json.dumps(self.call_params)
        self.script_replies(
            [{"role": "assistant", "content": f"Thought: check first\nAction: {self.call_tool} {params}"}]
        )
        action = self._start()(self.observation)
        self.assert_well_formed(action)
        assert (action["tool"], action["params"], action["thought"]) == (
            self.call_tool,
            self.call_params,
            "check first",
        )

    def test_broken_tool_call_block_is_a_format_error(self):
        text = f'<tool_call>{{"name": "{self.call_tool}", "arguments": </tool_call>'
        self.script_replies([{"role": "assistant", "content": text}])
        action = self._start()(self.observation)
        self.assert_well_formed(action)
        assert action["tool"] == self.closing_tool and "format_error" in action

    def test_tool_result_is_threaded_into_the_next_request(self):
        self.script_replies(
            [self.tool_call(self.call_tool, json.dumps(self.call_params)), {"role": "assistant", "content": "Done."}]
        )
        policy = self._start()
        policy(self.observation)
        policy("file1.py\nfile2.py")
        first, second = self.model_requests()
        assert second[: len(first)] == first, "the second request must extend the first"
        assistant, result = second[len(first) :]
        assert assistant["role"] == "assistant"
        calls = assistant.get("tool_calls") or []
        assert calls and calls[0]["function"]["name"] == self.call_tool, "the assistant turn must keep its call"
        assert result["role"] in ("tool", "user") and result["content"] == "file1.py\nfile2.py"
        if "tool_call_id" in result:
            assert result["tool_call_id"] == calls[0]["id"]

    def test_structured_observation_is_sent_as_json(self):
        self.script_replies([{"role": "assistant", "content": "ok"}])
        observation = {"output": "a.py", "exit_code": 0}
        self._start()(observation)
        (request,) = self.model_requests()
        assert json.loads(request[-1]["content"]) == observation

    def test_reset_clears_the_history(self):
        call = self.tool_call(self.call_tool, json.dumps(self.call_params))
        self.script_replies([call, {"role": "assistant", "content": "Done."}, call])
        policy = self._start()
        policy(self.observation)
        policy("file1.py")
        policy.reset(self.task)
        policy(self.observation)
        first, _, again = self.model_requests()
        assert again == first

    def test_reset_without_a_task(self):
        self.script_replies([{"role": "assistant", "content": "hello"}])
        policy = self.make_policy()
        policy.reset()
        self.assert_well_formed(policy(self.observation))

    def test_runs_as_a_batch_policy(self):
        call = self.tool_call(self.call_tool, json.dumps(self.call_params))
        self.script_replies([call, call])
        batch = as_batch_policy(self.make_policy)
        batch.reset_batch([self.task, self.task, None])
        actions = batch.act_batch([self.observation, None, self.observation])
        assert actions[1] is None
        for action in (actions[0], actions[2]):
            self.assert_well_formed(action)
            assert action["tool"] == self.call_tool


# ------------------------------------------------------------------------------ malformed input

#: name -> what the file holds; every file-reading knowlyr command refuses each one
MALFORMED_KINDS = {
    "empty": "no bytes at all",
    "truncated": "a record cut off mid-way",
    "binary": "bytes that are no text (NUL, 0xff, ...)",
    "utf16": "a good record written as UTF-16",
    "latin1": "a good record with a Latin-1 (not UTF-8) character",
    "deep": "JSON nested 100,000 levels deep",
    "long_line": "one 200 MB line",
    "nan": "a good record with a NaN number",
    "wrong_types": "a record whose fields have the wrong types",
    "bad_line": "good records, then a broken line (line 50,000 unless ``bad_line`` says otherwise)",
}


def malformed_corpus(
    folder: str | os.PathLike,
    good: dict[str, Any],
    wrong_types: dict[str, Any],
    *,
    suffix: str = ".jsonl",
    kinds: Any = None,
    long_line_mb: int = 200,
    bad_line: int = 50_000,
) -> dict[str, Any]:
    """Write one file per ``MALFORMED_KINDS`` entry (or per name in ``kinds``) into ``folder``;
    return ``{kind: Path}``.

    ``good`` is one valid record of the command's format, ``wrong_types`` one that parses as JSON
    but breaks the format. The long line is written in chunks (never held in memory). The
    ``bad_line`` kind breaks line ``bad_line``: any line past the first shows that the error names
    the line a reader got to; a table of many commands can use a few thousand, one scale check
    per reader the default 50,000.
    """
    from pathlib import Path

    if bad_line < 2:
        raise ValueError(f"bad_line must be 2 or more (a good line first), got {bad_line}")

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    line = json.dumps(good)
    latin = dict(good, metadata={"note": "caf\u00e9"}) if "metadata" not in good else {**good, "note": "caf\u00e9"}
    contents: dict[str, bytes] = {
        "empty": b"",
        "truncated": line[: len(line) // 2].encode(),
        "binary": bytes(range(256)) * 16,
        "utf16": (line + "\n").encode("utf-16"),
        "latin1": (json.dumps(latin, ensure_ascii=False) + "\n").encode("latin-1"),
        "deep": b'{"metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        "nan": (line[:-1] + ', "reward": NaN}\n').encode(),
        "wrong_types": (json.dumps(wrong_types) + "\n").encode(),
        "bad_line": ((line + "\n") * (bad_line - 1) + '{"broken\n').encode(),
    }
    wanted = set(MALFORMED_KINDS if kinds is None else kinds)
    paths = {}
    for kind, data in contents.items():
        if kind in wanted:
            paths[kind] = folder / f"{kind}{suffix}"
            paths[kind].write_bytes(data)
    if "long_line" not in wanted:
        return paths
    paths["long_line"] = folder / f"long_line{suffix}"
    chunk = b"x" * (1 << 20)
    with open(paths["long_line"], "wb") as out:
        out.write(b'{"metadata": "')
        for _ in range(long_line_mb):
            out.write(chunk)
        out.write(b'"}\n')
    return paths


def check_refusal(
    code: int, stdout: str, stderr: str, path: str | os.PathLike, *, outputs: dict[Any, bytes] | None = None
) -> str:
    """Assert a command refused a malformed ``path`` the knowlyr way; return the error line.

    Exit code 2, exactly one ``error:`` line on stderr naming the file, no traceback, nothing on
    stdout, and every file in ``outputs`` (path -> bytes before the run) unchanged.
    """
    from pathlib import Path

    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, f"expected one error line, got:\n{stderr[-3000:]}"
    assert str(path) in errors[0] or Path(path).name in errors[0], f"the error does not name {path}: {errors[0]}"
    assert code == 2, f"exit code {code} (want 2): {errors[0]}"
    assert stdout.strip() == "", f"stdout not empty: {stdout[:500]}"
    for out, before in (outputs or {}).items():
        assert Path(out).read_bytes() == before, f"{out} was changed"
    return errors[0]


# ------------------------------------------------------------------------------ MCP tool results


def mcp_is_error(result: Any) -> bool:
    """Whether an MCP ``CallToolResult`` is an error (``is_error`` on mcp 2.x, ``isError`` on 1.x)."""
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


def check_mcp_path_refusals(refused: list[Any], outside: int, secret: str) -> list[str]:
    """Assert the path guard's answers: every result in ``refused`` is an error, the first
    ``outside`` name a path outside the allowed roots, the rest a file the server did not write,
    and none echoes ``secret`` (content of the host file it was pointed at). Returns the messages."""
    messages = [r.content[0].text for r in refused]
    assert all(mcp_is_error(r) for r in refused), messages
    assert all("outside the allowed roots" in m for m in messages[:outside]), messages
    assert all("not written by this server" in m for m in messages[outside:]), messages
    assert not any(secret in m for m in messages), messages
    return messages


async def mcp_session_calls(
    command: tuple[str, ...] | list[str], calls: list[tuple[str, dict[str, Any]]], roots: Any = ()
) -> tuple[set[str], list[Any]]:
    """Start ``python <command> --root R ...`` (one ``--root`` per entry of ``roots``) as an MCP
    server over stdio, drive it with the official client and make ``calls`` (``(tool, arguments)``
    in order); returns the names of the tools it lists and the ``CallToolResult`` of each call.
    Needs the ``mcp`` package (check it with ``require_module`` first)."""
    import sys

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    roots_args = [a for root in roots for a in ("--root", str(root))]
    params = StdioServerParameters(command=sys.executable, args=[*command, *roots_args])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        return tools, [await session.call_tool(name, arguments) for name, arguments in calls]
