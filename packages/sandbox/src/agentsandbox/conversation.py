"""``ConversationEnv``: dialog and knowledge-work environments (conversation, engineering,
advisory, discussion).

Tools come from three places, in this order of precedence:

1. callables the user injects (``tools={"query_stats": my_lookup}``): real code, called with
   the action's parameters; a string, a JSON-able value or a ``ToolResult`` comes back;
2. code tools of the domain (engineering's ``read_file``, ``grep``, ``git``, ``bash``): run in a
   sandbox holding the task's repository, started only when first used;
3. data-backed tools built from the task's ``metadata``: ``knowledge_base`` over
   ``knowledge_base``, ``query_stats`` over ``records``, ``web_search`` over ``documents``;
   ``create_note``, ``send_message`` and ``think`` record what they are given.

Terminal tools follow the domain profile (conversation: ``respond``; engineering and advisory:
``submit`` / ``finish``; discussion: ``respond`` / ``submit``). With a ``SimulatedUser``, ``respond``
gets the user's reply instead of ending the episode, until the user stops or has replied
``max_turns`` times. ``max_turns`` counts the simulated user's replies (the conversation's turns),
not the agent's steps: an episode's step budget is ``max_steps`` (``MaxStepsWrapper``, ``collect``).
If the task's metadata has ``expected_answer`` (a string or a list of strings), the final
message must contain each (case-insensitively) for the episode to count as a success.

Example:
    >>> env = ConversationEnv()
    >>> ts = env.reset(task={"description": "Where is order 7?",
    ...                      "records": [{"order": "7", "status": "shipped"}]})
    >>> env.step({"tool": "query_stats", "params": {"query": "7"}}).observation
    '{"order": "7", "status": "shipped"}'
    >>> env.step({"tool": "respond", "params": {"message": "Order 7 has shipped."}}).terminated
    True
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentsandbox.config import SandboxConfig
from agentsandbox.data_tools import query_records, search_entries
from agentsandbox.env import SandboxEnv, timestep_for
from agentsandbox.envkit import episode_over, error_step
from agentsandbox.simulated_user import SimulatedUser
from agentsandbox.tools import SANDBOX_TOOLS
from knowlyrcore.actions import parse_action
from knowlyrcore.domain import get_domain_profile
from knowlyrcore.env import AgentEnv
from knowlyrcore.errors import InvalidActionError
from knowlyrcore.models import TaskInfo, ToolResult
from knowlyrcore.numbers import checked_number
from knowlyrcore.timestep import TimeStep

ToolFunction = Callable[..., Any]


def as_tool_result(value: Any) -> ToolResult:
    """Turn what an injected tool returned into a ``ToolResult``."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(output=value)
    if value is None:
        return ToolResult(output="ok")
    return ToolResult(output=json.dumps(value, ensure_ascii=False, default=str))


def _search(entries: list[Any], params: dict[str, Any], count: str, default: int) -> ToolResult:
    """``search_entries`` with the agent's result count checked: whole (the schema's "integer"
    admits 2.0, which no slice takes), at least 1; more than there are entries means all."""
    try:
        top_k = checked_number(
            params.get(count, default), count, minimum=1, maximum=max(len(entries), 1), clamp=True, integer=True
        )
    except ValueError as exc:
        return ToolResult(error=str(exc))
    return search_entries(entries, params["query"], top_k)


class ConversationEnv(AgentEnv):
    """Dialog / knowledge-work environment; ``domain`` picks the tool set (see module docstring).

    Args:
        domain: The domain profile whose tools and terminal tools the environment offers.
        tools: Injected tools by name (a callable's return value becomes the observation).
        user: A simulated user who answers each ``respond``; without one ``respond`` ends the episode
            where the domain makes it terminal.
        max_turns: How many replies the simulated user gives before the conversation ends; it counts
            user replies, not agent steps (those are capped by ``max_steps``, e.g. ``MaxStepsWrapper``).
        backend: Sandbox backend of the code tools (``auto``, ``docker``, ...).
        config: Sandbox configuration of the code tools.
    """

    domain = "conversation"

    def __init__(
        self,
        domain: str | None = None,
        *,
        tools: dict[str, ToolFunction] | None = None,
        user: SimulatedUser | None = None,
        max_turns: int = 10,
        backend: str = "auto",
        config: SandboxConfig | None = None,
    ):
        if domain is not None:
            self.domain = domain
        self.profile = get_domain_profile(self.domain)
        self.tools = dict(tools or {})
        self.user = user
        self.max_turns = max_turns
        self.backend = backend
        self.config = config
        self._code: SandboxEnv | None = None
        self._code_ready = False
        self._task: TaskInfo | None = None
        self._done = False
        self.transcript: list[dict[str, str]] = []
        self.notes: list[dict[str, str]] = []
        self.sent: list[dict[str, str]] = []

    @property
    def available_tools(self) -> list[str]:
        names = self.profile.tool_names
        return names + [n for n in self.tools if n not in names]

    def reset(self, *, task: TaskInfo | dict | str | None = None, seed: int | None = None) -> TimeStep:
        self._task = TaskInfo.coerce(task)
        self._done = False
        self._code_ready = False
        self.transcript, self.notes, self.sent = [], [], []
        lines = [self._task.description or "(no task description)"]
        if self.user is not None:
            opening = self.user.start(str(self._task.metadata.get("user_instructions") or self._task.description))
            self.transcript.append({"role": "user", "content": opening})
            lines += ["", f"User: {opening}"]
        lines.append(f"Tools: {', '.join(self.available_tools)}")
        return TimeStep(observation="\n".join(lines), info={"task_id": self._task.id})

    def step(self, action: Any) -> TimeStep:
        tool, params = parse_action(action)
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return episode_over(tool)
        if tool not in self.available_tools:
            error = f"unknown tool {tool!r}; available: {', '.join(self.available_tools)}"
            return error_step(error, tool=tool)
        if tool in self.profile.tool_names:
            try:
                self.profile.get_tool(tool).validate_params(params)
            except InvalidActionError as exc:
                return error_step(str(exc), tool=tool)
        if tool in self.tools:
            try:
                result = as_tool_result(self.tools[tool](**params))
            except Exception as exc:  # the tool is user code: report, do not crash the rollout
                result = ToolResult(error=f"tool {tool} raised {type(exc).__name__}: {exc}")
            return timestep_for(result, tool)
        if tool == "respond":
            return self._respond(params["message"])
        if tool in self.profile.terminal_tools:
            text = params.get("answer") or params.get("summary") or params.get("message") or ""
            return self._end(tool, str(text))
        if tool in SANDBOX_TOOLS or tool == "run_tests":
            return self._code_step(tool, params)
        return timestep_for(self._data_tool(tool, params), tool)

    def _respond(self, message: str) -> TimeStep:
        self.transcript.append({"role": "assistant", "content": message})
        terminal = "respond" in self.profile.terminal_tools
        if self.user is None:
            if terminal:
                return self._end("respond", message)
            return TimeStep(observation="message delivered", info={"tool": "respond"})
        turns = sum(1 for m in self.transcript if m["role"] == "assistant")
        reply = self.user.reply(message)
        self.transcript.append({"role": "user", "content": reply})
        if SimulatedUser.is_stop(reply) or turns >= self.max_turns:
            step = self._end("respond", message)
            step.observation = f"User: {reply}\n{step.observation}"
            return step
        return TimeStep(observation=f"User: {reply}", info={"tool": "respond"})

    def _end(self, tool: str, text: str) -> TimeStep:
        self._done = True
        info: dict[str, Any] = {
            "tool": tool,
            "exit_status": "submitted" if tool == "submit" else "finished",
            "answer": text,
            "transcript": list(self.transcript),
        }
        reward = 0.0
        expected = self._task.metadata.get("expected_answer")
        if expected is not None:
            wanted = [expected] if isinstance(expected, str) else list(expected)
            found = [w for w in wanted if str(w).lower() in text.lower()]
            info["score"] = len(found) / len(wanted) if wanted else 1.0
            info["success"] = len(found) == len(wanted)
            reward = info["score"]
        return TimeStep(observation=f"Episode ended ({tool}).", reward=reward, terminated=True, info=info)

    def _code_step(self, tool: str, params: dict[str, Any]) -> TimeStep:
        if self._code is None:
            self._code = SandboxEnv(self.backend, self.config, domain="coding")
        if not self._code_ready:
            self._code.reset(task=self._task.model_copy(update={"domain": "coding"}))
            self._code_ready = True
        step = self._code.step({"tool": tool, "params": params})
        return step

    def _data_tool(self, tool: str, params: dict[str, Any]) -> ToolResult:
        meta = self._task.metadata
        if tool == "knowledge_base":
            entries = meta.get("knowledge_base") or []
            if not entries:
                return ToolResult(error="this task has no knowledge base (metadata.knowledge_base)")
            return _search(entries, params, "top_k", 3)
        if tool == "web_search":
            corpus = meta.get("documents") or []
            if not corpus:
                return ToolResult(
                    error="no search corpus: give the task metadata.documents or inject a web_search tool"
                )
            return _search(corpus, params, "max_results", 5)
        if tool == "query_stats":
            records = meta.get("records")
            if not isinstance(records, list) or not records:
                return ToolResult(error="this task has no records to query (metadata.records)")
            return query_records(records, params["query"], params.get("filters"))
        if tool == "create_note":
            self.notes.append({"title": params.get("title", ""), "content": params["content"]})
            return ToolResult(output=f"note {len(self.notes)} saved")
        if tool == "send_message":
            self.sent.append({"recipient": params["recipient"], "message": params["message"]})
            return ToolResult(output=f"message sent to {params['recipient']}")
        if tool == "think":
            return ToolResult(output="ok")
        return ToolResult(error=f"tool {tool!r} has no implementation here; inject one with tools={{{tool!r}: fn}}")

    def close(self) -> None:
        if self._code is not None:
            self._code.close()
            self._code = None


class EngineeringEnv(ConversationEnv):
    """``knowlyr/engineering``: code review and design questions over a repository and a knowledge base."""

    domain = "engineering"


class AdvisoryEnv(ConversationEnv):
    """``knowlyr/advisory``: expert consultation grounded in a knowledge base."""

    domain = "advisory"


class DiscussionEnv(ConversationEnv):
    """``knowlyr/discussion``: multi-turn discussion drawing on a knowledge base."""

    domain = "discussion"
