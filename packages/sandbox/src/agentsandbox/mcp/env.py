"""``MCPEnv`` (``knowlyr/mcp``): an episode acted out through the tools of an MCP server.

The server is a command line (stdio; started sandboxed by ``server.py``) or the URL of a
running streamable HTTP server. Its tools, with the schemas it gives, are the policy's tools,
plus the closing tool (``respond(message)`` unless ``closing_tool`` says otherwise), which ends
the episode. Each episode's tools form a domain profile registered as ``mcp/<16-hex digest>``
(``env.domain`` names it after ``reset``), as ``agentsandbox.bfcl.env`` does for its functions.

``reset(task)`` shows the task's description verbatim. A task with ``metadata.workspace``
(``{"copy": path}`` or ``{"git": recipe}``, see ``workspace.py``) gets a server started afresh
on its own copy, so no episode sees another's writes; a task without one reuses the running
server unless that one was started for a workspace.

``step(action)``: a call is checked against the tool's schema before it is sent (an unknown
tool, a schema violation, a value JSON cannot carry — a lone surrogate, a 5000-digit integer,
NaN — is an ``[error]`` observation, never an exception); the result's text parts are joined,
other parts described in one line, structured content shown as JSON when there is no text, and
the whole clipped to ``max_observation_chars``. A tool error is an observation starting with
``[error]``; the episode goes on. A server that dies, hangs past ``call_timeout``, floods or
breaks the protocol raises ``InfrastructureError`` (the env kills it; the next reset starts a
fresh one): the episode is the machinery's failure, not the policy's.

At the closing tool the task's checks run (``checks.py``): success is that the answer check and
every state check hold. ``reward="outcome"`` pays 1 or 0; ``reward="partial"`` pays 1 on
success, else half the share of checks that hold (the answer check counting as one). A task
with no check at all (a rubric for a judge) ends with reward 0 and ``success`` None; its
``rubric`` is in ``info``.

Examples:
    >>> env = MCPEnv(server="mcp-server-time --local-timezone UTC")  # doctest: +SKIP
    >>> env.reset(task={"id": "t", "description": "What time is it in Tokyo?"}).observation  # doctest: +SKIP
    'What time is it in Tokyo?'
    >>> env.step({"tool": "get_current_time", "params": {"timezone": "Asia/Tokyo"}}).observation  # doctest: +SKIP
    '{"timezone": "Asia/Tokyo", "datetime": "...", ...}'
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from agentsandbox.envkit import episode_over, error_step, register_once
from agentsandbox.mcp import sdk
from agentsandbox.mcp.checks import answer_verdict, check_metadata, has_answer_check, state_verdict
from agentsandbox.mcp.client import MCPClient, MCPServerConfig, one_line, result_text, tool_record
from agentsandbox.mcp.workspace import check_spec
from knowlyrcore.actions import parse_action
from knowlyrcore.domain import (
    DomainProfile,
    OutcomeSpec,
    ToolCategory,
    ToolSpec,
    get_domain_profile,
    register_domain_profile,
    tool_spec,
)
from knowlyrcore.env import AgentEnv
from knowlyrcore.errors import InfrastructureError, InputError, InvalidActionError
from knowlyrcore.models import TaskInfo
from knowlyrcore.timestep import TimeStep

REWARD_MODES = ("outcome", "partial")
#: The tools each server (``MCPEnv._listing_key``) listed last in this process.
_LISTED: dict[str, list[dict[str, Any]]] = {}
_LISTED_LOCK = threading.Lock()

MCP_PROFILE = DomainProfile(
    name="mcp",
    display_name="An MCP server's tools",
    description="Act through the tools of an MCP server, then answer; each episode brings the server's tools.",
    terminal_tools=["respond"],
    tools=[],
    outcome=OutcomeSpec(method="terminal_tool", description="the answer and the server's state pass the task's checks"),
)
register_once(MCP_PROFILE)

#: What a value that passed the schema but cannot be sent raises: ``UnicodeEncodeError`` (a lone
#: surrogate), ``ValueError`` (an integer past Python's digit limit, NaN), ``RecursionError``.
_UNSENDABLE = (ValueError, RecursionError)


def _shown(tool: str) -> str:
    """A policy's tool name as an observation or ``info`` shows it (it may be any length)."""
    return one_line(tool, 100)


def closing_spec(name: str) -> ToolSpec:
    """The closing tool: ``name(message)``, which ends the episode."""
    return tool_spec(
        name,
        ToolCategory.COMMUNICATE,
        "Give your final answer; ends the episode.",
        ["message"],
        message={"type": "string"},
    )


#: A tool's category from its ``read_only`` (the server's ``readOnlyHint``; None: it does not say).
_CATEGORIES = {True: ToolCategory.READ, False: ToolCategory.WRITE, None: ToolCategory.OTHER}


def _server_spec(tool: dict[str, Any]) -> ToolSpec:
    """A server's tool (a ``tool_record``) as the episode's ``ToolSpec``."""
    spec = {"name": tool["name"], "description": tool["description"], "category": _CATEGORIES[tool.get("read_only")]}
    try:
        return ToolSpec(**spec, parameters=tool["input_schema"])
    except ValidationError:  # a schema the checker cannot use: let the server judge the arguments
        return ToolSpec(**spec, parameters={"type": "object"})


@functools.lru_cache(maxsize=256)
def _episode_profile(tools_json: str, closing_tool: str) -> DomainProfile:
    tools = [_server_spec(tool) for tool in json.loads(tools_json)]
    digest = hashlib.sha256(f"{tools_json}\n{closing_tool}".encode()).hexdigest()[:16]
    profile = MCP_PROFILE.model_copy(
        update={
            "name": f"mcp/{digest}",
            "tools": [*tools, closing_spec(closing_tool)],
            "terminal_tools": [closing_tool],
        }
    )
    register_domain_profile(profile, replace=True)
    return profile


def episode_profile(tools: Sequence[dict[str, Any]], closing_tool: str = "respond") -> DomainProfile:
    """The registered domain profile of an episode on ``tools`` (``client.tool_record``s, the
    first of each name kept) and the closing tool. A tool's category is READ when the server
    annotates it read-only, WRITE when it says it is not, OTHER when it does not say; the
    profile's name is a digest of all of it, categories included."""
    unique = {tool["name"]: tool for tool in reversed(tools)}
    ordered = [unique[name] for name in dict.fromkeys(tool["name"] for tool in tools)]
    return _episode_profile(json.dumps(ordered), closing_tool)  # key order kept: it is the server's


def _signature(name: str, schema: dict[str, Any]) -> str:
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    return f"{name}({', '.join(p if p in required else p + '?' for p in properties)})"


def system_prompt_for(tools: Sequence[dict[str, Any] | ToolSpec], closing_tool: str = "respond") -> str:
    """A compact system prompt: one line per tool, ``tool(param, optional?)``, then the closing tool.

    Small models do better with short prompts; the full schemas still go with the tool list.

    >>> print(system_prompt_for([{"name": "git_log", "input_schema": {"type": "object",
    ...     "properties": {"repo_path": {}, "max_count": {}}, "required": ["repo_path"]}}]))
    Act through the tools below, one call per turn; finish with respond(message), your answer.
    git_log(repo_path, max_count?)
    respond(message)
    """
    lines = [f"Act through the tools below, one call per turn; finish with {closing_tool}(message), your answer."]
    for tool in tools:
        if isinstance(tool, ToolSpec):
            lines.append(_signature(tool.name, tool.parameters))
        elif tool["name"] != closing_tool:
            lines.append(_signature(tool["name"], tool.get("input_schema") or {}))
    if not any(isinstance(t, ToolSpec) and t.name == closing_tool for t in tools):
        lines.append(f"{closing_tool}(message)")
    return "\n".join(lines)


def _invalid(exc: BaseException, tool: str) -> TimeStep:
    """The observation of a call refused before it was sent: the policy's error, never an exception."""
    if isinstance(exc, InvalidActionError):
        message = one_line(str(exc), 400)
    else:
        message = f"tool {_shown(tool)!r}: invalid parameters: a value JSON cannot carry (a lone surrogate, an integer too long, NaN)"
    return error_step(message, tool=_shown(tool))


class MCPEnv(AgentEnv):
    """Episodes through an MCP server's tools; see the module docstring (and docs/mcp-env.md)."""

    domain = "mcp"

    def __init__(
        self,
        server: str | list[str] | None = None,
        url: str | None = None,
        sandbox: str = "auto",
        binds: list[str] | None = None,
        env: dict[str, str] | None = None,
        reward: str = "outcome",
        call_timeout: float = 30.0,
        startup_timeout: float = 30.0,
        memory_mb: int = 1024,
        max_message_bytes: int = 1 << 20,
        max_observation_chars: int = 4000,
        closing_tool: str = "respond",
    ) -> None:
        if reward not in REWARD_MODES:
            raise InputError(f"reward must be one of {', '.join(REWARD_MODES)}, got {reward!r}")
        self.config = MCPServerConfig(
            server=server,
            url=url,
            sandbox=sandbox,
            binds=list(binds or []),
            env=dict(env or {}),
            call_timeout=call_timeout,
            startup_timeout=startup_timeout,
            memory_mb=memory_mb,
            max_message_bytes=max_message_bytes,
        )
        self.reward_mode = reward
        self.max_observation_chars = max_observation_chars
        self.closing_tool = closing_tool
        self._client: MCPClient | None = None
        self._client_has_workspace = False
        self._task: TaskInfo | None = None
        self._specs: dict[str, ToolSpec] = {}
        self._done = False

    # -- the server -----------------------------------------------------------------------------

    @property
    def client(self) -> MCPClient | None:
        """The client of the running server (None before the first reset and after a failure)."""
        return self._client

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _server_for(self, workspace: dict[str, Any] | None) -> MCPClient:
        reusable = self._client is not None and self._client.dead is None and not self._client_has_workspace
        if workspace is None and reusable:
            assert self._client is not None
            return self._client
        self._close_client()
        self._client = MCPClient(self.config, workspace)
        self._client_has_workspace = workspace is not None
        return self._client

    # -- the episode ----------------------------------------------------------------------------

    def reset(self, *, task: TaskInfo | dict | str | None = None, seed: int | None = None) -> TimeStep:
        info = TaskInfo.coerce(task)
        metadata = info.metadata
        workspace = metadata.get("workspace")
        if workspace is not None:
            check_spec(workspace, f"task {info.id!r}: metadata.workspace")
        check_metadata(metadata, info.id)
        if self.config.url is not None and any("command" in c for c in metadata.get("state_checks") or []):
            raise InputError(f"task {info.id!r}: a command state check needs a server the env launches, not a url")
        self._task, self._done = None, False
        self._offer(self._server_for(workspace))
        self._task = info
        return TimeStep(observation=info.description, info={"task_id": info.id})

    def _offer(self, client: MCPClient) -> None:
        """Make ``client``'s tools (and the closing tool) this episode's profile."""
        tools = [tool_record(tool) for tool in client.tools]
        if any(tool["name"] == self.closing_tool for tool in tools):
            self._close_client()
            raise InputError(
                f"MCP server {client.name!r} offers a tool named {self.closing_tool!r}, the env's closing tool; "
                "choose another closing_tool"
            )
        with _LISTED_LOCK:
            _LISTED[self._listing_key] = tools
        profile = episode_profile(tools, self.closing_tool)
        self.domain = profile.name
        self._specs = {spec.name: spec for spec in profile.tools}

    @property
    def _listing_key(self) -> str:
        """What makes two envs' servers the same server: its command or URL, environment and binds."""
        c = self.config
        return json.dumps([c.argv, c.url, c.sandbox, c.binds, c.env], sort_keys=True)

    @property
    def available_tools(self) -> list[str]:
        """The tools of the episode. Before the first reset, those the same server listed last in
        this process, else those of a server started without a workspace (kept for the next task
        that has none). A rollout reads them from every env it builds, before any reset: without
        the listing kept, each episode would start its server twice. Each reset offers the tools
        its own server lists, so a server whose tools changed since is still seen as it is."""
        if not self._specs:
            with _LISTED_LOCK:
                listed = _LISTED.get(self._listing_key)
            if listed is None:
                self._offer(self._server_for(None))
            else:
                profile = episode_profile(listed, self.closing_tool)
                self.domain, self._specs = profile.name, {spec.name: spec for spec in profile.tools}
        return get_domain_profile(self.domain).tool_names

    @property
    def system_prompt(self) -> str:
        """``system_prompt_for`` the tools of the current episode (see ``available_tools``)."""
        self.available_tools  # noqa: B018 -- lists the server's tools when no episode has yet
        return system_prompt_for(get_domain_profile(self.domain).tools, self.closing_tool)

    def _clip(self, text: str) -> str:
        cut = len(text) - self.max_observation_chars
        if cut <= 0:
            return text
        return text[: self.max_observation_chars] + f"\n[... {cut} more characters cut]"

    def _check_call(self, tool: str, params: dict[str, Any]) -> None:
        """Refuse ``params`` that break ``tool``'s schema or cannot be sent (``InvalidActionError``, ``_UNSENDABLE``)."""
        self._specs[tool].validate_params(params)
        size = len(json.dumps(params, ensure_ascii=False, allow_nan=False).encode("utf-8"))
        if size > self.config.max_message_bytes:
            raise InvalidActionError(
                f"tool {tool!r}: the arguments are {size} bytes, over the {self.config.max_message_bytes}-byte message cap"
            )

    def step(self, action: Any) -> TimeStep:
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        try:
            tool, params = parse_action(action)
        except (InvalidActionError, *_UNSENDABLE) as exc:
            return error_step(one_line(str(exc), 400) if isinstance(exc, InvalidActionError) else "invalid action")
        if self._done:
            return episode_over(_shown(tool))
        if action.get("format_error"):
            error = f"the arguments of {_shown(tool)!r} did not parse, so nothing ran; call it again"
            return error_step(error, tool=_shown(tool))
        if tool not in self._specs:
            error = f"unknown tool {_shown(tool)!r}; the tools are {', '.join(self._specs)}"
            return error_step(error, tool=_shown(tool))
        try:
            self._check_call(tool, params)
        except (InvalidActionError, *_UNSENDABLE) as exc:
            return _invalid(exc, tool)
        if tool == self.closing_tool:
            return self._finish(params["message"])
        if self._client is None:
            raise InfrastructureError("the MCP server failed earlier in this episode; call reset()")
        try:
            result = self._client.call_tool(tool, params)
        except InfrastructureError:
            self._close_client()
            raise
        text = self._clip(result_text(result))
        if sdk.field(result, "is_error"):
            return error_step(text, tool=tool)
        return TimeStep(observation=text, info={"tool": tool})

    def _finish(self, message: str) -> TimeStep:
        assert self._task is not None
        if self._client is None:
            raise InfrastructureError("the MCP server failed earlier in this episode; call reset()")
        self._done = True
        metadata = self._task.metadata
        verdicts = [answer_verdict(message, metadata)] if has_answer_check(metadata) else []
        try:
            for check in metadata.get("state_checks") or []:
                verdicts.append(state_verdict(check, self._client, timeout=self.config.call_timeout))
        except InfrastructureError:
            self._close_client()
            raise
        answer = [v["ok"] for v in verdicts if v["check"] == "answer"]
        state = [v["ok"] for v in verdicts if v["check"] != "answer"]
        success = all(answer + state) if verdicts else None
        info: dict[str, Any] = {
            "tool": self.closing_tool,
            "success": success,
            "score": 1.0 if success else 0.0,
            "exit_status": "responded",
            "answer_ok": all(answer) if answer else None,
            "state_ok": all(state) if state else None,
            "checks": verdicts,
        }
        if "rubric" in metadata:
            info["rubric"] = metadata["rubric"]
        reward = info["score"]
        if self.reward_mode == "partial" and verdicts and not success:
            reward = 0.5 * sum(v["ok"] for v in verdicts) / len(verdicts)
        return TimeStep(observation="Answer recorded.", reward=reward, terminated=True, info=info)

    def close(self) -> None:
        self._close_client()
