"""``RetailEnv`` (``knowlyr/retail``): customer service on a real shop database, like tau-bench.

Each episode builds an embedded SQLite database from the task's ``metadata.world`` (users,
orders, items) and lets the agent read and change it with the ``retail`` domain's tools; the
episode ends when the agent calls ``respond`` with its final answer to the customer.

Success is judged like tau-bench: the database's end state must equal the state that the
task's ground-truth solution (``metadata.solution``) produces from the same start, and the
final answer must contain every string in ``metadata.answer_contains`` and none in
``metadata.answer_excludes`` (case-insensitive). The suite puts every wrong value of the asked
fact in the latter (other statuses, counts, reasons, emails, addresses, order ids), so an answer
that lists every candidate fails. Both are computed here from the task record, so nothing the agent says can fake them.

``RetailEnv(reward="partial")`` pays verifiable partial credit for RL, per sub-goal of the
task's ground truth, still computed from the database and the task record alone. An episode's
rewards sum to 1 on success, else to

    credit = (lookups + 2 * changes + answer - wrong changes) / 8, clipped to [0, 0.5]

- ``lookups``: the share of the ground truth's reads (find the customer, list their orders, read
  an order) that the agent made with the same parameters (0 when the truth reads nothing);
- ``changes``: the share of required changes made, where a required change is a field (order
  status, address, cancel reason, item returned) whose value differs between the start and the
  ground truth's end state (0 for a question: touching nothing earns nothing);
- ``answer``: the share of the answer's facts present (0 when it names an excluded one), counted
  only once the end state is right (every required change made, none wrong): an answer claiming
  a change the agent never made earns nothing, so the policy cannot learn to say "cancelled"
  instead of cancelling;
- ``wrong changes``: fields the agent changed to anything but the ground truth's value.

The credit is paid as it accrues: each step's reward is the change in that potential (a correct
read or write earns at once, a write undone gives it back, a read repeated earns nothing), so
the sum never depends on the order of the steps and an episode cut off before ``respond`` keeps
the credit of what it did. A policy whose compositions fail still sees which sub-goals it
reached, which is what RL on a task nobody demonstrated needs. ``reward="outcome"`` (the default)
pays 1 or 0 at ``respond``, as tau-bench does.

Examples:
    >>> from agentsandbox.suites import get_suite
    >>> task = get_suite("retail").generate("test", 1, seed=0)[0]
    >>> env = RetailEnv()
    >>> first = env.reset(task=task)
    >>> for action in task["metadata"]["solution"]:
    ...     ts = env.step(action)
    >>> ts.terminated, ts.info["success"]
    (True, True)
"""

from __future__ import annotations

import json
from typing import Any

from agentsandbox.envkit import episode_over, error_step, register_once
from agentsandbox.retail.db import CANCEL_REASONS, call_tool, clip_message, open_shop, state_facts
from knowlyrcore.actions import parse_action
from knowlyrcore.domain import DomainProfile, OutcomeSpec, ToolCategory, tool_spec
from knowlyrcore.env import AgentEnv
from knowlyrcore.errors import DomainError, InvalidActionError, TaskRequiredError
from knowlyrcore.models import TaskInfo
from knowlyrcore.timestep import TimeStep

_STR = {"type": "string", "minLength": 1}

RETAIL_PROFILE = DomainProfile(
    name="retail",
    display_name="Retail customer service",
    description="Help shop customers with their orders using the shop's database tools (tau-bench style).",
    tools=[
        tool_spec("find_user_by_email", ToolCategory.SEARCH, "Look up a user by email.", ["email"], email=_STR),
        tool_spec(
            "find_user_by_name",
            ToolCategory.SEARCH,
            "Look up users by full name; returns their ids and emails.",
            ["name"],
            name=_STR,
        ),
        tool_spec(
            "get_user",
            ToolCategory.READ,
            "A user's name, email, address on file and order ids.",
            ["user_id"],
            user_id=_STR,
        ),
        tool_spec(
            "list_orders", ToolCategory.READ, "A user's orders with status and total.", ["user_id"], user_id=_STR
        ),
        tool_spec(
            "get_order",
            ToolCategory.READ,
            "An order's status, shipping address and items.",
            ["order_id"],
            order_id=_STR,
        ),
        tool_spec(
            "cancel_order",
            ToolCategory.WRITE,
            "Cancel a pending order; reason is 'no longer needed' or 'ordered by mistake'.",
            ["order_id", "reason"],
            order_id=_STR,
            reason={"type": "string", "enum": list(CANCEL_REASONS)},
        ),
        tool_spec(
            "change_address",
            ToolCategory.WRITE,
            "Change the shipping address of a pending order.",
            ["order_id", "address"],
            order_id=_STR,
            address=_STR,
        ),
        tool_spec(
            "return_items",
            ToolCategory.WRITE,
            "Return items of a delivered order.",
            ["order_id", "item_ids"],
            order_id=_STR,
            item_ids={"type": "array", "items": _STR, "minItems": 1},
        ),
        tool_spec(
            "respond",
            ToolCategory.COMMUNICATE,
            "Give the customer your final answer; ends the conversation.",
            ["message"],
            message={"type": "string"},
        ),
    ],
    terminal_tools=["respond"],
    outcome=OutcomeSpec(method="terminal_tool", description="database end state and final answer match the truth"),
)

register_once(RETAIL_PROFILE)

#: A compact system prompt naming every tool with its parameters (short prompts keep a small
#: model's context and the rollout cost low).
SYSTEM_PROMPT = (
    "You are a shop's customer service agent. Use one tool per turn; finish with respond.\n"
    "Tools: " + "; ".join(f"{t.name}({', '.join(t.parameters['properties'])})" for t in RETAIL_PROFILE.tools) + "."
)


REWARD_MODES = ("outcome", "partial")
_READ_TOOLS = frozenset(t.name for t in RETAIL_PROFILE.tools if t.category in (ToolCategory.READ, ToolCategory.SEARCH))


def _answer_matches(message: str, required: list[str], forbidden: list[str]) -> bool:
    return _answer_fraction(message, required, forbidden) == 1.0


def _answer_fraction(message: str, required: list[str], forbidden: list[str]) -> float:
    """The share of required facts the answer states; 0 when it states an excluded one."""
    text = message.casefold()
    if any(str(p).casefold() in text for p in forbidden):
        return 0.0
    return sum(str(p).casefold() in text for p in required) / len(required) if required else 1.0


def _read_key(tool: str, params: dict[str, Any]) -> tuple[str, str]:
    """A read call's identity: the tool and its parameters, case and surrounding space ignored."""
    canonical = {k: v.strip().casefold() if isinstance(v, str) else v for k, v in params.items()}
    return tool, json.dumps(canonical, sort_keys=True)


def _solution_reads(solution: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The ground truth's read calls (the lookup sub-goals of partial credit)."""
    reads = set()
    for action in solution:
        try:
            tool, params = parse_action(action)
        except InvalidActionError:
            continue  # a malformed solution step is the task's fault; it just adds no sub-goal
        if tool in _READ_TOOLS:
            reads.add(_read_key(tool, params))
    return reads


#: What building the error message of a hostile value raises (the schema check prints the value):
#: an int of more than 4300 digits (ValueError), nesting deeper than Python's stack (RecursionError).
_UNPRINTABLE = (ValueError, RecursionError)


def _invalid(exc: Exception, tool: str | None = None) -> TimeStep:
    """The error observation of an action that is not a valid call: the policy's failure, which
    it can read and recover from, never an exception out of ``step``."""
    if isinstance(exc, InvalidActionError | DomainError):
        message = clip_message(str(exc))
    else:
        message = "invalid action: a value too large or too deeply nested to check"
        message = message if tool is None else f"tool {clip_message(tool)!r}: {message}"
    return error_step(message) if tool is None else error_step(message, tool=clip_message(tool))


def _check_text(tool: str, params: dict[str, Any]) -> None:
    """Refuse a string that is not Unicode text: a JSON decoder turns ``"\\ud800"`` into a lone
    surrogate, which SQLite cannot store. ``params`` already match the tool's schema (strings,
    or a list of strings)."""
    for key, value in params.items():
        for text in value if isinstance(value, list) else [value]:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidActionError(
                    f"tool {tool!r}: invalid parameters at {key!r}: not Unicode text "
                    f"(a lone surrogate at position {exc.start})"
                ) from None


class RetailEnv(AgentEnv):
    """A shop database per episode; ``respond`` ends it and the end state decides success."""

    domain = "retail"

    def __init__(self, reward: str = "outcome") -> None:
        if reward not in REWARD_MODES:
            raise ValueError(f"reward must be one of {', '.join(REWARD_MODES)}, got {reward!r}")
        self.reward_mode = reward
        self._db = None
        self._task: TaskInfo | None = None
        self._start: dict[tuple[str, str], Any] = {}
        self._expected: dict[tuple[str, str], Any] | None = None
        self._paid = 0.0  # partial credit paid so far in this episode
        self._reads: set[tuple[str, str]] = set()  # the ground truth's reads, the lookup sub-goals
        self._reads_made: set[tuple[str, str]] = set()
        self._done = False

    def reset(self, *, task: TaskInfo | dict | str | None = None, seed: int | None = None) -> TimeStep:
        info = TaskInfo.coerce(task)
        world = info.metadata.get("world")
        if not isinstance(world, dict):
            raise TaskRequiredError(
                f"retail task {info.id!r} has no metadata.world (generate tasks with the retail suite)"
            )
        self.close()
        self._task = info
        self._expected = self._replay_solution(world, info.metadata.get("solution") or [])
        self._db = open_shop(world)
        self._start = state_facts(self._db)
        self._reads = _solution_reads(info.metadata.get("solution") or [])
        self._reads_made = set()
        self._paid = 0.0
        self._done = False
        return TimeStep(observation=info.description, info={"task_id": info.id})

    @staticmethod
    def _replay_solution(world: dict[str, Any], solution: list[dict[str, Any]]) -> dict[tuple[str, str], Any] | None:
        """The ground truth's end state, field by field, or None when the task has no solution."""
        if not solution:
            return None
        db = open_shop(world)
        try:
            for action in solution:
                tool, params = parse_action(action)
                if tool not in RETAIL_PROFILE.terminal_tools:
                    call_tool(db, tool, params)
            return state_facts(db)
        finally:
            db.close()

    def partial_credit(self, message: str | None = None) -> float:
        """The episode's credit so far (see the module docstring); ``message`` is the final answer."""
        assert self._db is not None and self._task is not None
        now = state_facts(self._db)
        expected = self._expected if self._expected is not None else self._start
        required = [k for k, v in expected.items() if self._start.get(k) != v]
        made = sum(now.get(k) == expected[k] for k in required)
        wrong = sum(1 for k, v in now.items() if v != self._start.get(k) and v != expected.get(k))
        changes = made / len(required) if required else 0.0  # a question: no credit for touching nothing
        lookups = len(self._reads_made) / len(self._reads) if self._reads else 0.0
        answer = 0.0
        if message is not None and made == len(required) and not wrong:
            metadata = self._task.metadata
            answer = _answer_fraction(
                message, list(metadata.get("answer_contains") or []), list(metadata.get("answer_excludes") or [])
            )
        return min(max((lookups + 2 * changes + answer - wrong) / 8, 0.0), 0.5)

    def _note_read(self, tool: str, params: dict[str, Any]) -> None:
        """Count a read of the ground truth's (same tool, same parameters) as a reached sub-goal."""
        key = _read_key(tool, params)
        if key in self._reads:
            self._reads_made.add(key)

    def _pay(self, total: float) -> float:
        """This step's reward under partial credit: the change in the episode's total."""
        reward, self._paid = total - self._paid, total
        return reward

    def step(self, action: Any) -> TimeStep:
        if self._task is None or self._db is None:
            raise RuntimeError("call reset() before step()")
        try:
            tool, params = parse_action(action)
        except (InvalidActionError, *_UNPRINTABLE) as exc:
            return _invalid(exc)
        if self._done:
            return episode_over(clip_message(tool))
        try:
            RETAIL_PROFILE.get_tool(tool).validate_params(params)
            _check_text(tool, params)
        except (InvalidActionError, DomainError, *_UNPRINTABLE) as exc:
            return _invalid(exc, tool)
        if tool == "respond":
            return self._finish(params["message"])
        result = call_tool(self._db, tool, params)
        if self.reward_mode == "partial" and not result.error:  # outcome mode never reads the sub-goals
            self._note_read(tool, params)
        reward = self._pay(self.partial_credit()) if self.reward_mode == "partial" else 0.0
        return TimeStep(observation=result.to_observation(), reward=reward, info={"tool": tool, "error": result.error})

    def _finish(self, message: str) -> TimeStep:
        self._done = True
        metadata = self._task.metadata
        state_ok = self._expected is None or state_facts(self._db) == self._expected
        answer_ok = _answer_matches(
            message, list(metadata.get("answer_contains") or []), list(metadata.get("answer_excludes") or [])
        )
        success = state_ok and answer_ok
        info = {
            "tool": "respond",
            "success": success,
            "score": 1.0 if success else 0.0,
            "exit_status": "responded",
            "state_ok": state_ok,
            "answer_ok": answer_ok,
        }
        reward = info["score"]
        if self.reward_mode == "partial":
            info["partial_credit"] = 1.0 if success else self.partial_credit(message)
            reward = self._pay(info["partial_credit"])
        return TimeStep(observation="Conversation ended.", reward=reward, terminated=True, info=info)

    @property
    def available_tools(self) -> list[str]:
        return RETAIL_PROFILE.tool_names

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
