"""SWE-agent ``.traj`` files: text-action and function-calling runs.

A ``.traj`` is one JSON object: ``trajectory`` (one entry per turn: ``action``,
``observation``, ``thought``, ``response``, ``state``, ``execution_time``), ``history`` (the
chat sent to the model; with function calling the assistant messages carry OpenAI
``tool_calls`` and the results come back as ``role: tool``) and ``info`` (``exit_status``,
``submission`` = the patch, ``model_stats`` = tokens and cost).

Function-calling runs are read from ``history`` (the tool calls carry parsed parameters);
text-action runs from ``trajectory`` (the final observation is only there). A text action
such as ``open tests/x.py`` becomes the call ``open {"path": "tests/x.py"}`` with the
parameter names SWE-agent's function-calling tools use, ``edit 4:4\\n...\\nend_of_edit``
becomes ``edit {start_line, end_line, replacement}``, and any other command is ``bash
{"command": ...}``. SWE-agent does not judge its runs, so ``outcome.success`` stays unset.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import ObjectAdapter, StepList
from agentrecorder.adapters.usage import reported_usage
from agentrecorder.errors import FieldError
from agentrecorder.fields import expect, get, parse_arguments, path, text_of
from agentrecorder.outcomes import TRUNCATING_EXITS
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Outcome, Trajectory, Usage

#: SWE-agent's built-in commands and their positional parameters (names as in its tool schemas)
COMMANDS: dict[str, list[str]] = {
    "find_file": ["file_name", "dir"],
    "open": ["path", "line_number"],
    "goto": ["line_number"],
    "scroll_up": [],
    "scroll_down": [],
    "create": ["filename"],
    "search_dir": ["search_term", "dir"],
    "search_file": ["search_term", "file"],
    "submit": [],
}
_INT_PARAMS = {"line_number"}


def parse_text_action(action: str) -> tuple[str, dict[str, Any]]:
    """Map a SWE-agent text command onto ``(tool, parameters)``.

    Example:
        >>> parse_text_action('find_file "missing_colon.py"')
        ('find_file', {'file_name': 'missing_colon.py'})
        >>> parse_text_action("edit 4:4\\ndef f():\\nend_of_edit\\n")
        ('edit', {'start_line': 4, 'end_line': 4, 'replacement': 'def f():'})
        >>> parse_text_action("python tests/x.py")
        ('bash', {'command': 'python tests/x.py'})
    """
    stripped = action.strip()
    if not stripped:
        return "no_action", {}
    first_line, _, body = stripped.partition("\n")
    command = first_line.split(maxsplit=1)[0]
    if command == "edit" and body:
        rng = first_line.split(maxsplit=1)[1] if " " in first_line else ""
        start, _, end = rng.partition(":")
        if start.strip().isdigit() and end.strip().isdigit():
            lines = body.split("\n")
            if lines and lines[-1].strip() == "end_of_edit":
                lines = lines[:-1]
            return "edit", {"start_line": int(start), "end_line": int(end), "replacement": "\n".join(lines)}
    if command in COMMANDS and not body:
        try:
            args = shlex.split(first_line)[1:]
        except ValueError:
            args = first_line.split()[1:]
        names = COMMANDS[command]
        params: dict[str, Any] = {}
        for name, value in zip(names, args):
            params[name] = int(value) if name in _INT_PARAMS and value.lstrip("-").isdigit() else value
        if len(args) > len(names):
            params["args"] = args[len(names) :]
        return command, params
    return "bash", {"command": stripped}


def _model_name(record: dict) -> str:
    config = record.get("replay_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            return ""
    if isinstance(config, dict):
        model = (config.get("agent") or {}).get("model") or {}
        if isinstance(model, dict) and isinstance(model.get("name"), str):
            return model["name"]
    return ""


def _task_text(history: list, where: str) -> str:
    for i, message in enumerate(history):
        if isinstance(message, dict) and message.get("role") == "user" and not message.get("is_demo"):
            return text_of(message.get("content"), path(path(where, i), "content"))
    return ""


def _usage(info: dict, where: str) -> Usage | None:
    stats = get(info, "model_stats", where, dict, None)
    if not stats:
        return None
    where = path(where, "model_stats")
    sent = get(stats, "tokens_sent", where, int, None)
    received = get(stats, "tokens_received", where, int, None)
    cost = get(stats, "instance_cost", where, (int, float), None)
    return reported_usage(sent, received, cost, get(stats, "api_calls", where, int, None))


class SWEAgentAdapter(ObjectAdapter):
    name = "swe-agent"
    description = "SWE-agent .traj: text actions (trajectory[]) or function calling (history with tool_calls)"
    priority = 20

    def check_object(self, record: dict[str, Any]) -> str | None:
        if "question" in record or "conversations" in record:
            return "has 'question'/'conversations', not a .traj"
        trajectory = record.get("trajectory")
        if isinstance(trajectory, list) and trajectory and isinstance(trajectory[0], dict):
            if "action" in trajectory[0] and "observation" in trajectory[0]:
                return None
            return "trajectory[0] has no 'action'/'observation'"
        history = record.get("history")
        if isinstance(history, list) and any(
            isinstance(m, dict) and m.get("role") == "assistant" and ("action" in m or "message_type" in m)
            for m in history
        ):
            return None
        return "no 'trajectory' with actions and no 'history' with SWE-agent assistant actions"

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        record = expect(record, dict, "$")
        info = get(record, "info", "$", dict, {})
        history = get(record, "history", "$", list, [])
        entries = get(record, "trajectory", "$", list, [])
        uses_tools = any(isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls") for m in history)
        steps = StepList()
        if uses_tools or not entries:
            self._from_history(history, steps)
            if len(entries) == len(steps):
                for step, entry in zip(steps.steps, entries):
                    self._timing(step, entry)
        else:
            self._from_trajectory(entries, steps)

        exit_status = get(info, "exit_status", "$.info", str, None)
        if exit_status is None and steps.last is not None and steps.last.tool_call.name == "submit":
            exit_status = "submitted"
        truncated = bool(exit_status) and any(k in exit_status for k in TRUNCATING_EXITS)
        extra_info = {k: v for k, v in info.items() if k not in ("exit_status", "submission", "model_stats")}
        metadata: dict[str, Any] = {"format": "swe-agent", "style": "function_calling" if uses_tools else "text"}
        if isinstance(record.get("environment"), str):
            metadata["environment"] = record["environment"]
        if extra_info:
            metadata["info"] = extra_info
        system = next((m.get("content") for m in history if isinstance(m, dict) and m.get("role") == "system"), None)
        if isinstance(system, str):
            metadata["system_prompt"] = system
        instance_id = info.get("instance_id") if isinstance(info.get("instance_id"), str) else ""
        yield Trajectory(
            id=instance_id,
            task=TaskInfo(id=instance_id, description=_task_text(history, "$.history"), domain="coding"),
            agent="swe-agent",
            model=_model_name(record),
            steps=steps.steps,
            outcome=Outcome(
                exit_status=exit_status,
                patch=get(info, "submission", "$.info", str, None),
                terminated=bool(exit_status) and not truncated,
                truncated=truncated,
            ),
            usage=_usage(info, "$.info"),
            source=source,
            metadata=metadata,
        )

    def _timing(self, step, entry: Any) -> None:
        if not isinstance(entry, dict):
            return
        duration = entry.get("execution_time")
        if isinstance(duration, (int, float)) and not isinstance(duration, bool) and duration >= 0:
            step.duration_s = float(duration)
        state = entry.get("state")
        if isinstance(state, str):
            try:
                state = json.loads(state)
            except json.JSONDecodeError:
                pass
        if state:
            step.metadata["state"] = state

    def _from_trajectory(self, entries: list, steps: StepList) -> None:
        for i, entry in enumerate(entries):
            where = path("$.trajectory", i)
            entry = expect(entry, dict, where)
            action = get(entry, "action", where, str)
            tool, params = parse_text_action(action)
            step = steps.add(
                tool,
                params,
                thought=get(entry, "thought", where, str, ""),
                output=get(entry, "observation", where, str, ""),
                metadata={"action": action, "response": get(entry, "response", where, str, "")},
            )
            self._timing(step, entry)

    def _from_history(self, history: list, steps: StepList) -> None:
        pending: dict[str, Any] = {}  # tool_call id -> step awaiting its result
        current = []  # steps of the latest assistant turn, for results without ids
        for i, message in enumerate(history):
            where = path("$.history", i)
            message = expect(message, dict, where)
            if message.get("is_demo"):
                continue
            role = get(message, "role", where, str)
            if role == "assistant":
                current = self._assistant_steps(message, where, steps, pending)
            elif role in ("tool", "user") and current:
                output = text_of(message.get("content"), path(where, "content"))
                ids = message.get("tool_call_ids") or ([message["tool_call_id"]] if message.get("tool_call_id") else [])
                ids = ids if isinstance(ids, list) else []
                targets = [pending.pop(cid) for cid in ids if isinstance(cid, str) and cid in pending] or current[-1:]
                for step in targets:
                    steps.set_observation(step, output)
                if role == "user":
                    current = []

    def _assistant_steps(self, message: dict, where: str, steps: StepList, pending: dict) -> list:
        thought = get(message, "thought", where, str, "") or text_of(message.get("content"), path(where, "content"))
        calls = get(message, "tool_calls", where, list, [])
        made = []
        for j, call in enumerate(calls):
            cwhere = path(path(where, "tool_calls"), j)
            call = expect(call, dict, cwhere)
            function = get(call, "function", cwhere, dict)
            fwhere = path(cwhere, "function")
            params = parse_arguments(function.get("arguments"), path(fwhere, "arguments"))
            call_id = get(call, "id", cwhere, str, None)
            step = steps.add(
                get(function, "name", fwhere, str),
                params,
                thought=thought if j == 0 else "",
                call_id=call_id,
                metadata={"action": message["action"]} if isinstance(message.get("action"), str) else {},
            )
            if call_id:
                pending[call_id] = step
            made.append(step)
        if not calls:
            action = message.get("action")
            if not isinstance(action, str):
                raise FieldError(
                    path(where, "action"), "assistant message has neither 'tool_calls' nor an 'action' string"
                )
            tool, params = parse_text_action(action)
            made.append(steps.add(tool, params, thought=thought, metadata={"action": action}))
        return made
