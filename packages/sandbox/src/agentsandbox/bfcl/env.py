"""``BFCLEnv`` (``knowlyr/bfcl``): one BFCL single-turn entry per episode, judged by BFCL's AST rules.

``reset(task)`` shows the entry's question and offers its functions as tools, plus ``respond``.
The protocol, one action per step as every knowlyr policy acts:

* each call of an offered function (or of any other name: a made-up function is a wrong call)
  is recorded and answered with a neutral observation; nothing is executed, as in BFCL's AST
  categories. Several calls in a row make a parallel answer;
* ``respond`` (what a reply in plain text becomes) ends the episode, and the recorded calls are
  judged against ``metadata.possible_answer`` (``agentsandbox.bfcl.checker``). An irrelevance
  entry is solved by answering without any call.

A call whose arguments did not parse (an action with ``format_error``) is recorded as a call that
matches nothing. An action that is not a call at all (no tool name) gets an error observation
and is not recorded.

The tools of an episode come from the task, so each episode has its own domain profile,
registered as ``bfcl/<digest of the functions>``, and ``env.domain`` names it after ``reset``:
``tool_schemas(env.available_tools, env.domain)`` gives the OpenAI schemas of exactly the
offered tools. BFCL's parameter types become JSON Schema (``dict`` → ``object``, ``float`` →
``number``, ``tuple`` → ``array``, ``any`` → no type).

``reward="outcome"`` (the default) pays 1 or 0 at ``respond``. ``reward="partial"`` pays the
checker's partial credit as it accrues: the potential ``(name_score + param_score) / 4`` of the
calls made so far (at most 0.5), then 1 at ``respond`` on success; the rewards of an episode sum
to its final credit however it was reached.

Examples:
    >>> fn = {"name": "math.factorial", "description": "n!", "parameters": {"type": "dict",
    ...       "properties": {"number": {"type": "integer"}}, "required": ["number"]}}
    >>> task = {"id": "t", "description": "What is 5!?", "metadata": {"functions": [fn],
    ...         "possible_answer": [{"math.factorial": {"number": [5]}}]}}
    >>> env = BFCLEnv()
    >>> env.reset(task=task).observation, env.available_tools
    ('What is 5!?', ['math.factorial', 'respond'])
    >>> env.step({"tool": "math.factorial", "params": {"number": 5}}).observation
    'ok: math.factorial call recorded (calls are not executed); make any other call, or reply in text when done'
    >>> ts = env.step({"tool": "respond", "params": {"message": "Done."}})
    >>> ts.terminated, ts.reward, ts.info["success"]
    (True, 1.0, True)
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from agentsandbox.bfcl.checker import check, show_value
from agentsandbox.bfcl.data import data_dir
from agentsandbox.envkit import episode_over, error_step, register_once
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
from knowlyrcore.errors import InvalidActionError, TaskRequiredError
from knowlyrcore.models import TaskInfo
from knowlyrcore.timestep import TimeStep
from knowlyrcore.tool_parsing import CLOSING_TOOLS

RESPOND = tool_spec(
    "respond",
    ToolCategory.COMMUNICATE,
    "Answer in plain text; ends the turn (say so when no function fits the request).",
    ["message"],
    message={"type": "string"},
)

BFCL_PROFILE = DomainProfile(
    name="bfcl",
    display_name="Berkeley Function Calling Leaderboard (single turn)",
    description="Call the right functions with the right arguments for one request; each task brings its functions.",
    tools=[RESPOND],
    terminal_tools=["respond"],
    outcome=OutcomeSpec(method="terminal_tool", description="the calls made match BFCL's possible answers"),
)

register_once(BFCL_PROFILE)

SYSTEM_PROMPT = (
    "You can call the functions offered as tools. Make the calls the request needs, one per turn; "
    "calls are recorded, not executed. When done, or when no function fits the request, reply in plain text."
)

REWARD_MODES = ("outcome", "partial")

#: BFCL type -> JSON Schema type (``any`` has none).
JSON_TYPES = {
    "string": "string",
    "integer": "integer",
    "float": "number",
    "boolean": "boolean",
    "array": "array",
    "tuple": "array",
    "dict": "object",
}
#: The keywords of BFCL's parameter documents that JSON Schema knows, kept as they are.
_KEPT = ("description", "enum", "default", "format", "minimum", "maximum", "minItems", "maxItems")

_NAME_CHARS = 100  # a policy's tool name in info: it may be any length


def printable_name(text: str) -> str:
    """A policy's tool name as ``info`` shows it: cut to ``_NAME_CHARS``, lone surrogates escaped."""
    return text[:_NAME_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")


_RECORDED = "ok: {} call recorded (calls are not executed); make any other call, or reply in text when done"


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter document as JSON Schema.

    >>> json_schema({"type": "tuple", "items": {"type": "float"}, "optional": True})
    {'type': 'array', 'items': {'type': 'number'}}
    """
    out: dict[str, Any] = {}
    if schema.get("type") in JSON_TYPES:
        out["type"] = JSON_TYPES[schema["type"]]
    out.update((k, schema[k]) for k in _KEPT if k in schema)
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {name: json_schema(inner) for name, inner in schema["properties"].items()}
    if isinstance(schema.get("required"), list):
        out["required"] = list(schema["required"])
    if isinstance(schema.get("items"), dict):
        out["items"] = json_schema(schema["items"])
    return out


@functools.lru_cache(maxsize=8192)
def _tool_spec(function_json: str) -> ToolSpec:
    # cached: checking a JSON Schema costs milliseconds, and live tasks share their functions
    function = json.loads(function_json)
    return ToolSpec(
        name=function["name"],
        description=function.get("description", ""),
        parameters=json_schema(function["parameters"]),
        category=ToolCategory.OTHER,
    )


def tool_specs(functions: list[dict[str, Any]]) -> list[ToolSpec]:
    """The ``ToolSpec`` of each BFCL function document (its name as given, dots and all)."""
    return [_tool_spec(json.dumps(f, sort_keys=True)) for f in functions]


@functools.lru_cache(maxsize=4096)
def _episode_profile(functions_json: str) -> DomainProfile:
    functions = json.loads(functions_json)
    digest = hashlib.sha256(functions_json.encode()).hexdigest()[:16]
    profile = BFCL_PROFILE.model_copy(update={"name": f"bfcl/{digest}", "tools": [*tool_specs(functions), RESPOND]})
    register_domain_profile(profile, replace=True)
    return profile


def episode_profile(functions: list[dict[str, Any]]) -> DomainProfile:
    """The domain profile of an episode on ``functions`` (registered; the same functions give the same one)."""
    return _episode_profile(json.dumps(functions, sort_keys=True))


class BFCLEnv(AgentEnv):
    """One BFCL entry per episode; ``respond`` ends it and the recorded calls decide success."""

    domain = "bfcl"

    def __init__(self, reward: str = "outcome") -> None:
        if reward not in REWARD_MODES:
            raise ValueError(f"reward must be one of {', '.join(REWARD_MODES)}, got {reward!r}")
        self.reward_mode = reward
        self._task: TaskInfo | None = None
        self._functions: list[dict[str, Any]] = []
        self._answer: list[dict[str, Any]] = []
        self._calls: list[dict[str, Any]] = []
        self._paid = 0.0
        self._done = False

    def reset(self, *, task: TaskInfo | dict | str | None = None, seed: int | None = None) -> TimeStep:
        data_dir()  # the tasks are BFCL's: without bfcl-eval, one line naming the install step
        info = TaskInfo.coerce(task)
        functions, answer = info.metadata.get("functions"), info.metadata.get("possible_answer")
        if not isinstance(functions, list) or not isinstance(answer, list):
            raise TaskRequiredError(
                f"BFCL task {info.id!r} has no metadata.functions and metadata.possible_answer "
                "(generate tasks with the bfcl suite)"
            )
        if clash := sorted(CLOSING_TOOLS.keys() & {f.get("name") for f in functions}):
            raise ValueError(
                f"BFCL task {info.id!r} documents a function named {clash[0]!r}, the tool a reply in plain text becomes"
            )
        profile = episode_profile(functions)
        self.domain = profile.name
        self._task, self._functions, self._answer = info, functions, answer
        self._calls, self._paid, self._done = [], 0.0, False
        return TimeStep(observation=info.description, info={"task_id": info.id})

    @property
    def available_tools(self) -> list[str]:
        return get_domain_profile(self.domain).tool_names

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The calls recorded so far in this episode (``{"tool", "params"}``, in order)."""
        return list(self._calls)

    def _pay(self, total: float) -> float:
        reward, self._paid = total - self._paid, total
        return reward

    def step(self, action: Any) -> TimeStep:
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        try:
            tool, params = parse_action(action)
        except InvalidActionError as exc:
            return error_step(str(exc))
        if self._done:
            return episode_over(printable_name(tool))
        if tool == "respond":
            return self._finish()
        call = {"tool": tool, "params": params}
        if action.get("format_error"):
            call["format_error"] = str(action["format_error"])
        self._calls.append(call)
        reward = 0.0
        if self.reward_mode == "partial":
            verdict = check(self._calls, self._answer, self._functions)
            reward = self._pay((verdict.name_score + verdict.param_score) / 4)
        if tool in self.available_tools:
            return TimeStep(observation=_RECORDED.format(tool), reward=reward, info={"tool": tool})
        error = f"unknown function {show_value(tool)} (the call is recorded and counts as a wrong call)"
        return TimeStep(
            observation=f"[error] {error}", reward=reward, info={"tool": printable_name(tool), "error": error}
        )

    def _finish(self) -> TimeStep:
        self._done = True
        verdict = check(self._calls, self._answer, self._functions)
        info = {
            "tool": "respond",
            "success": verdict.success,
            "score": 1.0 if verdict.success else 0.0,
            "exit_status": "responded",
            "reason": verdict.reason,
            "calls": len(self._calls),
            "name_score": verdict.name_score,
            "param_score": verdict.param_score,
        }
        reward = info["score"]
        if self.reward_mode == "partial":
            info["partial_credit"] = verdict.partial_credit
            reward = self._pay(verdict.partial_credit)
        return TimeStep(observation="Answer recorded.", reward=reward, terminated=True, info=info)
