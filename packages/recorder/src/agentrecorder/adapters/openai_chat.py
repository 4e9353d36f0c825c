"""OpenAI chat transcripts with tool calls: bare message lists, ``{"messages": [...]}``
records and tau-bench result records (``{task_id, reward, info, traj, trial}``).

Each assistant tool call is a step (name, parsed JSON arguments, the id) whose observation is
the ``role: tool`` message answering that id; the assistant's text in the same message is the
thought of its first call. An assistant message with text and no tool call is a reply to the
user: a ``respond {"message": ...}`` step whose observation is the user's next message. The
first user message is the task; the system prompt goes to metadata.

A record's ``reward`` becomes ``outcome.score`` and ``outcome.success`` is ``reward >= 1``
(tau-bench gives 1.0 exactly when the task is solved). A SWE data-set row (SWE-Gym's
``{instance_id, run_id, resolved, messages, tools, test_result}``) takes its outcome from
``resolved`` / ``test_result`` (``agentrecorder.outcomes``: the patch, the pytest counts of
the test output) and is a ``coding`` task named by ``instance_id``. A JSON list of records
yields one trajectory per record.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import RESPOND, Adapter, StepList
from agentrecorder.fields import expect, get, parse_arguments, path, text_of
from agentrecorder.outcomes import OUTCOME_KEYS, swe_outcome
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Outcome, Step, Trajectory, Usage

_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and str(m.get("role")) in _ROLES for m in value)
    )


def _messages_key(record: dict) -> str | None:
    for key in ("messages", "traj"):
        if _is_messages(record.get(key)):
            return key
    return None


def convert_messages(messages: list, where: str) -> tuple[list[Step], str, str | None]:
    """Map an OpenAI message list onto steps; return ``(steps, task, system_prompt)``."""
    steps = StepList()
    pending: dict[str, Step] = {}
    task, system = "", None
    last_reply: Step | None = None
    for i, message in enumerate(messages):
        mwhere = path(where, i)
        message = expect(message, dict, mwhere)
        role = get(message, "role", mwhere, str)
        content = text_of(message.get("content"), path(mwhere, "content"))
        if role in ("system", "developer"):
            system = content if system is None else f"{system}\n{content}"
        elif role == "user":
            if not task and not len(steps):
                task = content
            elif last_reply is not None and not last_reply.observation.output:
                steps.set_observation(last_reply, content)
            elif steps.last is not None:
                steps.last.metadata.setdefault("user_messages", []).append(content)
        elif role == "assistant":
            calls = get(message, "tool_calls", mwhere, list, [])
            legacy = get(message, "function_call", mwhere, dict, None)
            if legacy is not None and not calls:
                calls = [{"function": legacy}]
            for j, call in enumerate(calls):
                cwhere = path(path(mwhere, "tool_calls"), j)
                call = expect(call, dict, cwhere)
                function = get(call, "function", cwhere, dict)
                fwhere = path(cwhere, "function")
                call_id = get(call, "id", cwhere, str, None)
                step = steps.add(
                    get(function, "name", fwhere, str),
                    parse_arguments(function.get("arguments"), path(fwhere, "arguments")),
                    thought=content if j == 0 else "",
                    call_id=call_id,
                )
                pending[call_id or f"#{len(steps)}"] = step
            if not calls:
                last_reply = steps.add(RESPOND, {"message": content})
        elif role in ("tool", "function"):
            call_id = message.get("tool_call_id")
            step = pending.pop(call_id, None) if isinstance(call_id, str) else None
            if step is None:
                name = message.get("name")
                step = next(
                    (s for s in pending.values() if name is None or s.tool_call.name == name),
                    steps.last,
                )
                pending = {k: v for k, v in pending.items() if v is not step}
            if step is not None:
                steps.set_observation(step, content)
    return steps.steps, task, system


class OpenAIChatAdapter(Adapter):
    name = "openai-chat"
    description = "OpenAI chat messages with tool_calls / role tool; {messages} records; tau-bench {traj, reward}"
    priority = 60

    def check(self, record: Any) -> str | None:
        if _is_messages(record):
            return None
        if isinstance(record, dict):
            return None if _messages_key(record) else "no 'messages' or 'traj' list of {role, content} messages"
        if isinstance(record, list) and record and all(isinstance(r, dict) and _messages_key(r) for r in record):
            return None
        return "not a list of chat messages nor records holding one"

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        if _is_messages(record):
            yield self._one({"messages": record}, "$", "messages", source, bare=True)
        elif isinstance(record, dict):
            yield self._one(record, "$", _messages_key(record) or "messages", source)
        else:
            for i, item in enumerate(expect(record, list, "$")):
                where = path("$", i)
                item = expect(item, dict, where)
                yield self._one(item, where, _messages_key(item) or "messages", source)

    def _one(self, record: dict, where: str, key: str, source: str, bare: bool = False) -> Trajectory:
        messages = get(record, key, where, list)
        steps, task_text, system = convert_messages(messages, "$" if bare else path(where, key))
        reward = get(record, "reward", where, (int, float), None)
        success = get(record, "success", where, bool, None)
        if success is None and reward is not None:
            success = reward >= 1.0
        swe = any(k in record for k in OUTCOME_KEYS)  # a SWE data-set row (SWE-Gym): resolved, test_result
        outcome, test_rest = swe_outcome(record, where) if swe else (Outcome(), {})
        if success is not None or reward is not None:
            outcome.success = success
            outcome.score = float(reward) if reward is not None else None
        task_id = record.get("task_id", record.get("id", record.get("instance_id", "")))
        info = get(record, "info", where, dict, {})
        tau_task = info.get("task") if isinstance(info.get("task"), dict) else None
        task_meta: dict[str, Any] = {}
        if tau_task is not None:
            task_meta = {k: v for k, v in tau_task.items() if k in ("instruction", "user_id", "outputs")}
            if "actions" in tau_task:
                task_meta["expected_actions"] = tau_task["actions"]
        metadata: dict[str, Any] = {"format": "openai-chat"}
        if system is not None:
            metadata["system_prompt"] = system
        for k in ("trial", "tools", "run_id"):
            if k in record:
                metadata[k] = record[k]
        if test_rest:
            metadata["test_result"] = test_rest
        for k, v in info.items():
            if k != "task":
                metadata[k] = v
        trial = record.get("trial")
        traj_id = f"{task_id}-trial{trial}" if task_id != "" and trial is not None else str(task_id)
        usage = get(record, "usage", where, dict, None)
        return Trajectory(
            id=traj_id,
            task=TaskInfo(
                id=str(task_id), description=task_text, domain="coding" if swe else "conversation", metadata=task_meta
            ),
            agent=str(record.get("agent") or ("tau-bench" if tau_task is not None else "")),
            model=str(record.get("model") or ""),
            steps=steps,
            outcome=outcome,
            usage=Usage.model_validate({k: v for k, v in usage.items() if k in Usage.model_fields}) if usage else None,
            source=source,
            metadata=metadata,
        )
