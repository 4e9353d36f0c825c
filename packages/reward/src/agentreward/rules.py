"""Layer 1: deterministic rules that score every step in microseconds.

For each step the rules answer five questions from the trajectory alone:
- non_redundancy: was this exact call already made since the state last changed?
- info_utilization: do the call's reference-like parameters (paths, ids, queries) come from
  the task or from earlier observations rather than from nowhere?
- regression: does the step undo an earlier edit, or do fewer tests pass than before?
- failure signals: non-zero exit code, an error, a timeout, an unknown tool, a parse error.
- novelty: did the observation bring information not seen before?
- conversation rules, for consequential actions (a booking, a cancellation, a refund, an
  update: state-changing tools that are not code or file edits) in trajectories with a user:
  ``unconfirmed`` (the user's latest message did not say yes), ``ungrounded`` (an id, number
  or code in the arguments appears in no earlier observation, user message or the task),
  ``repeated_action`` (the same action on the same ids already succeeded), ``after_done`` (the
  user had already closed the conversation), ``needless_transfer`` (handing off to a human
  nobody asked for), ``gave_up`` (the agent's last word is that it cannot help).
They yield scores for the two rule rubrics and heuristic scores for the three model rubrics,
which the LLM judge replaces when it is enabled. Simplifications: tokens are regex words of
three or more characters; only the first and last 4,000 characters of an observation are
read; "state-changing" tools are recognised by name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_./\-]{2,}|\d{3,}")
_OBS_WINDOW = 4000
_REFERENCE_MAX_CHARS = 200  # longer string parameters are content (a file body), not references
_MUTATING = re.compile(
    r"write|edit|create|replace|insert|delete|remove|bash|exec|run|shell|python|command|"
    r"update|book|cancel|send|submit|apply|patch|install|move|click|type|navigate|"
    r"modify|exchange|return|refund|pay|purchase|order_|place|reset|assign|grant|issue"
)
_FAILURE_TEXT = re.compile(
    r"traceback \(most recent call last\)|command not found|no such file or directory|"
    r"exitcode: [1-9]|execution failed|^error[:\s]|\berror:",
    re.IGNORECASE | re.MULTILINE,
)
_TIMEOUT_TEXT = re.compile(r"timed out|timeout expired|time limit exceeded", re.IGNORECASE)
_WRONG_TOOL_TEXT = re.compile(r"unknown tool|not a valid tool|no such tool|unknown command|unknown function", re.I)
_FORMAT_TEXT = re.compile(r"could not parse|invalid action|malformed|format error|invalid json", re.IGNORECASE)
_PASSED = re.compile(r"(\d+) passed")
# Code runs and file edits change state too, but nobody confirms each one; these are the
# actions a service policy asks the user to approve first.
_CODE_OR_FILE = re.compile(
    r"bash|exec|run|shell|python|command|write|edit|create|replace|insert|patch|install|"
    r"click|type|navigate|move|file|code"
)
_HANDOFF = re.compile(r"transfer_to_human|human_agent|escalat|hand_?off")
_RESPOND = "respond"
# "not sure", "isn't correct", "don't proceed": an affirmative word right after a negation is not a yes
_YES = re.compile(
    r"(?<!not )(?<!n't )(?<!no )\b(yes|yeah|yep|confirm(ed)?|proceed|go ahead|please|sure|correct|ok(ay)?|sounds good|"
    r"that works|let'?s do)\b",
    re.IGNORECASE,
)
_ASKS_HUMAN = re.compile(r"\b(human|representative|supervisor|manager|real person|someone else|transfer)\b", re.I)
_CLOSED = re.compile(r"###STOP###|\b(goodbye|bye|that'?s all|that is all|nothing else)\b", re.IGNORECASE)
_CANNOT = re.compile(r"\b(unable to|cannot|can't|can not|not able to|not possible|unfortunately)\b", re.I)
# an id-like token: has a digit (ids, flight numbers, dates, amounts) or is an upper-case code
_ID_LIKE = re.compile(r"[A-Za-z_\-]*\d[A-Za-z0-9_\-:.]*|\b[A-Z]{3,}\b")


@dataclass
class StepSignals:
    """What the rules found about one step (kept in the scored step's metadata)."""

    redundant: bool = False
    near_redundant: bool = False
    failed: bool = False
    timeout: bool = False
    wrong_tool: bool = False
    format_error: bool = False
    regression: bool = False
    unconfirmed: bool = False
    ungrounded: bool = False
    repeated_action: bool = False
    after_done: bool = False
    needless_transfer: bool = False
    gave_up: bool = False
    grounded_fraction: float = 1.0
    novelty: float = 0.0
    flags: list[str] = field(default_factory=list)


#: every yes/no finding is a flag, in field order
_FLAGS = tuple(f.name for f in fields(StepSignals) if f.type == "bool")


def _tokens(text: str) -> set[str]:
    if len(text) > 2 * _OBS_WINDOW:
        text = text[:_OBS_WINDOW] + " " + text[-_OBS_WINDOW:]
    return {t.lower().strip("./-") for t in _TOKEN.findall(text)}


def _reference_tokens(params: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for value in params.values():
        if isinstance(value, str) and len(value) <= _REFERENCE_MAX_CHARS:
            out |= _tokens(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= 100:
            out.add(str(value))
        elif isinstance(value, list):
            out |= _reference_tokens({str(i): v for i, v in enumerate(value)})
    return out


def _call_key(name: str, params: dict[str, Any]) -> str:
    return name + "\x00" + json.dumps(params, sort_keys=True, default=str)


def _ids(value: Any) -> set[str]:
    """Id-like tokens of a value (its JSON text for containers); 1-2 digit numbers are counts,
    not references, and ``55.0`` is ``55``."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    found = set()
    for token in _ID_LIKE.findall(text):
        token = token.strip(".:-").removesuffix(".0")
        if token and not (token.isdigit() and len(token) < 3):
            found.add(token.lower())
    return found


class _Conversation:
    """What the user has said so far, and which consequential actions already happened."""

    def __init__(self, trajectory: dict[str, Any]):
        steps = trajectory.get("steps", [])
        self.active = any(s["tool_call"]["name"] == _RESPOND for s in steps)
        description = str((trajectory.get("task") or {}).get("description", ""))
        self.last_user = description
        self.evidence = _ids(description)
        self.asked_human = bool(_ASKS_HUMAN.search(description))
        self.closed = False
        self.done: set[str] = set()

    @staticmethod
    def consequential(name: str) -> bool:
        lowered = name.lower()
        return bool(_MUTATING.search(lowered)) and not _CODE_OR_FILE.search(lowered) and not _HANDOFF.search(lowered)

    def check(self, name: str, params: dict[str, Any], sig: StepSignals, is_last: bool, output: str) -> None:
        if not self.active:
            return
        if _HANDOFF.search(name.lower()) and not self.asked_human:
            sig.needless_transfer = True
        if name == _RESPOND and is_last and not self.done and _CANNOT.search(str(params.get("message", ""))):
            sig.gave_up = True
        if not self.consequential(name):
            return
        sig.unconfirmed = not _YES.search(self.last_user[-600:])
        sig.ungrounded = bool(_ids(params) - self.evidence)
        sig.after_done = self.closed
        ids = {k: v for k, v in params.items() if "id" in k.lower()} or params
        key = _call_key(name, ids)
        sig.repeated_action = key in self.done
        if not sig.failed:
            self.done.add(key)

    def observe(self, name: str, output: str, user_messages: list[Any]) -> None:
        self.evidence |= _ids(output)
        replies = ([output] if name == _RESPOND and output else []) + [str(m) for m in user_messages]
        for message in replies:
            self.last_user = message
            self.asked_human = self.asked_human or bool(_ASKS_HUMAN.search(message))
            self.closed = self.closed or bool(_CLOSED.search(message))


def analyse(trajectory: dict[str, Any]) -> list[StepSignals]:
    """Run every rule over ``trajectory`` (a dict in the trajectory format); one result per step."""
    task = trajectory.get("task") or {}
    context = _tokens(str(task.get("description", "")))
    seen_calls: dict[str, int] = {}  # call key -> epoch it was made in
    recent_params: list[tuple[str, set[str], int]] = []
    epoch = 0
    edits: list[tuple[str, str, str]] = []  # (path, old, new)
    best_passed = -1
    previous_failure: tuple[str, bool] | None = None
    results: list[StepSignals] = []
    conversation = _Conversation(trajectory)
    steps = trajectory.get("steps", [])

    for position, step in enumerate(steps):
        call = step["tool_call"]
        name, params = call["name"], call.get("parameters") or {}
        obs = step.get("observation") or {}
        output = str(obs.get("output") or "")
        error = obs.get("error")
        exit_code = obs.get("exit_code")
        head = output[:_OBS_WINDOW]
        sig = StepSignals()

        key = _call_key(name, params)
        if seen_calls.get(key) == epoch:
            sig.redundant = True
        ref = _reference_tokens(params)
        if not sig.redundant and ref:
            for other_name, other_ref, other_epoch in recent_params:
                if other_name == name and other_epoch == epoch and other_ref:
                    overlap = len(ref & other_ref) / len(ref | other_ref)
                    if overlap >= 0.8:
                        sig.near_redundant = True
                        break
        if ref:
            sig.grounded_fraction = len(ref & context) / len(ref)

        text = f"{error or ''}\n{head}"
        sig.timeout = bool(_TIMEOUT_TEXT.search(text)) and (error is not None or exit_code not in (None, 0))
        sig.wrong_tool = bool(_WRONG_TOOL_TEXT.search(text[:500]))
        sig.format_error = bool(_FORMAT_TEXT.search(text[:500]))
        sig.failed = (
            error is not None
            or (isinstance(exit_code, int) and exit_code != 0)
            or sig.timeout
            or sig.wrong_tool
            or (exit_code is None and bool(_FAILURE_TEXT.search(head)))
        )

        path = str(params.get("path") or params.get("file") or params.get("filename") or "")
        old = params.get("old_str", params.get("old"))
        new = params.get("new_str", params.get("new"))
        if isinstance(old, str) and isinstance(new, str):
            if any(p == path and o == new and n == old for p, o, n in edits):
                sig.regression = True
            edits.append((path, old, new))
        passed = [int(m) for m in _PASSED.findall(output)]
        if passed:
            if passed[-1] < best_passed:
                sig.regression = True
            best_passed = max(best_passed, passed[-1])

        conversation.check(name, params, sig, position == len(steps) - 1, output)
        conversation.observe(name, output, (step.get("metadata") or {}).get("user_messages") or [])

        obs_tokens = _tokens(output) if output else set()
        sig.novelty = len(obs_tokens - context) / len(obs_tokens) if obs_tokens else 0.0
        if previous_failure == (name, True) and sig.failed:
            sig.flags.append("repeated_failure")
        sig.flags += [f for f in _FLAGS if getattr(sig, f)]

        results.append(sig)
        seen_calls[key] = epoch
        recent_params.append((name, ref, epoch))
        context |= obs_tokens | ref
        previous_failure = (name, sig.failed)
        if _MUTATING.search(name.lower()) and not sig.failed:
            epoch += 1  # the world may have changed: repeating a read is legitimate again
    return results


_CONVERSATION_FLAGS = ("unconfirmed", "ungrounded", "repeated_action", "after_done", "needless_transfer", "gave_up")


def rule_scores(
    trajectory: dict[str, Any], signals: list[StepSignals] | None = None, *, conversation: bool = False
) -> list[dict[str, float]]:
    """Per-step scores in [0, 1] for all five rubrics from the rules alone.

    The conversation rules always flag steps; with ``conversation=True`` their flags also lower
    the rubric scores (off by default: on held-out tau-bench runs that lowered the AUC for
    success, see the package README)."""
    signals = analyse(trajectory) if signals is None else signals
    if not conversation:
        signals = [replace(s, **dict.fromkeys(_CONVERSATION_FLAGS, False)) for s in signals]
    success = (trajectory.get("outcome") or {}).get("success")
    last = len(signals) - 1
    scores: list[dict[str, float]] = []
    for i, sig in enumerate(signals):
        non_redundancy = 0.0 if sig.redundant or sig.repeated_action else 0.5 if sig.near_redundant else 1.0
        info = 0.0 if sig.ungrounded else sig.grounded_fraction
        if sig.wrong_tool or sig.format_error:
            param = 0.0
        elif sig.failed or sig.ungrounded:
            param = 0.3
        else:
            param = 1.0
        tool = 0.0 if sig.wrong_tool else 0.3 if "repeated_failure" in sig.flags or sig.needless_transfer else 1.0
        if i == last and success is not None:
            goal = 1.0 if success else 0.0
        elif sig.regression or sig.redundant or sig.repeated_action:
            goal = 0.0
        elif sig.unconfirmed or sig.after_done or sig.needless_transfer or sig.gave_up:
            goal = 0.1  # against the service policy: the step may do harm even when it works
        elif sig.failed:
            goal = 0.2
        else:
            goal = 0.5 + 0.4 * min(1.0, sig.novelty * 2)
        scores.append(
            {
                "goal_progress": goal,
                "tool_selection": tool,
                "param_correctness": param,
                "info_utilization": info,
                "non_redundancy": non_redundancy,
            }
        )
    return scores


def penalty_counts(signals: list[StepSignals]) -> dict[str, int]:
    """How many steps triggered each trajectory-level penalty."""
    return {
        "wrong_tool": sum(s.wrong_tool for s in signals),
        "redundant_call": sum(s.redundant for s in signals),
        "format_error": sum(s.format_error for s in signals),
        "timeout": sum(s.timeout for s in signals),
        "unconfirmed_action": sum(s.unconfirmed for s in signals),
        "ungrounded_argument": sum(s.ungrounded for s in signals),
        "repeated_action": sum(s.repeated_action for s in signals),
        "action_after_done": sum(s.after_done for s in signals),
        "needless_transfer": sum(s.needless_transfer for s in signals),
        "gave_up": sum(s.gave_up for s in signals),
    }
