"""OpenHands: the event stream (a JSON list of events) and evaluation ``output.jsonl`` records.

An event is an *action* (``{"action": "run"|"edit"|"message"|"finish"|..., "args", "source",
"tool_call_metadata"}``) or an *observation* (``{"observation": ..., "content", "extras",
"cause": <action id>}``). Agent actions are steps: with ``tool_call_metadata`` the tool is
the LLM's function (``str_replace_editor``, ``execute_bash``, ``finish``) with the parsed
arguments of the matching tool call in ``model_response``; without it the tool is the action
type with its ``args``. The observation whose ``cause`` is the action's id is the step's
observation (``extras.exit_code`` or ``extras.metadata.exit_code`` → ``exit_code``; an
``error`` observation → ``error``), and the time between them is the step's duration. An
agent ``message`` is a ``respond`` step; the first user message is the task; bookkeeping
events (agent state changes, recalls, the system prompt) are not steps.

Token usage is summed over the distinct ``model_response`` ids (one LLM response can emit
several tool calls). An ``output.jsonl`` record wraps the same history with ``instruction``,
``instance_id``, ``metrics`` (accumulated cost and token usage) and
``test_result.git_patch``. Older histories of ``[action, observation]`` pairs are flattened.
A UI export is the bare event list; a feedback export (what the UI's thumbs up/down shares)
is ``{trajectory: [events], polarity, feedback, permissions, version, email, session_id}``,
whose rating lands in ``metadata.feedback`` (the e-mail address is left out). An
observation's ``success`` flag is kept in its step's metadata.

Exports that flatten every event into one record shape (the rows of the published feedback
data set: ``{action, observation, content, extras, id, message, source, timestamp}``) carry
``"action": null`` on observations and ``"observation": null`` on actions; such a null counts
as absent. There ``extras`` may be a JSON string, an action without ``args`` takes its
arguments from ``extras`` and keeps its ``message`` in step metadata, and an observation that
names no ``cause`` answers the agent action just before it. An event that is neither an action
nor an observation is skipped and counted in ``metadata.skipped_events``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import RESPOND, Adapter, StepList, iso_timestamp
from agentrecorder.errors import FieldError
from agentrecorder.fields import expect, get, parse_arguments, path, text_of
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Outcome, Step, Trajectory, Usage

#: agent actions that are bookkeeping, not decisions
SKIP_ACTIONS = {"system", "recall", "change_agent_state", "null", "condensation", "condensation_request"}
#: what a feedback export says about the rating (its e-mail address is left out)
FEEDBACK_KEYS = ("polarity", "feedback", "permissions", "version", "timestamp")
#: args that describe how OpenHands ran an action rather than what the agent asked for
RUNTIME_ARGS = {
    "thought",
    "impl_source",
    "translated_ipython_code",
    "security_risk",
    "confirmation_state",
    "is_confirmed",
    "hidden",
    "blocking",
    "is_input",
    "image_urls",
    "wait_for_response",
}


def _count(value: Any) -> int:
    """A token count, or 0 for anything that is not a non-negative integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _extras(event: dict, where: str) -> dict[str, Any]:
    """``event["extras"]`` as an object (``{}`` when absent or null); flattened exports hold it as JSON text."""
    value = event.get("extras")
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except json.JSONDecodeError as exc:
            raise FieldError(path(where, "extras"), f"not valid JSON: {exc.msg} (char {exc.pos})") from None
    return {} if value is None else expect(value, dict, path(where, "extras"))


def _or(value: Any, fallback: Any) -> Any:
    """``value``, or ``fallback`` when it is absent or null."""
    return fallback if value is None else value


def _is_event(value: Any) -> bool:
    # chat messages (SWE-agent's history carries "action" too) have a "role"; events do not
    return (
        isinstance(value, dict)
        and ("action" in value or "observation" in value)
        and ("source" in value or "id" in value)
        and "role" not in value
    )


def _events(history: list) -> list[tuple[str, Any]]:
    """Flatten ``[action, observation]`` pairs; return ``(json_path_suffix, event)``."""
    out = []
    for i, item in enumerate(history):
        if isinstance(item, list):
            out.extend((f"[{i}][{j}]", e) for j, e in enumerate(item))
        else:
            out.append((f"[{i}]", item))
    return out


def _history_key(record: dict) -> str | None:
    """``history`` (an output.jsonl record) or ``trajectory`` (a feedback export) holding events."""
    for key in ("history", "trajectory"):
        events = record.get(key)
        if isinstance(events, list) and any(_is_event(e) for _, e in _events(events)):
            return key
    return None


def _tool_arguments(metadata: dict, where: str) -> dict[str, Any] | None:
    """Parsed arguments of the tool call ``metadata`` refers to, from its ``model_response``."""
    response = metadata.get("model_response")
    choices = response.get("choices") if isinstance(response, dict) else None
    for c, choice in enumerate(choices if isinstance(choices, list) else []):
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for t, call in enumerate(calls if isinstance(calls, list) else []):
            if isinstance(call, dict) and call.get("id") == metadata.get("tool_call_id"):
                function = call.get("function") if isinstance(call.get("function"), dict) else {}
                cwhere = f"{where}.model_response.choices[{c}].message.tool_calls[{t}].function.arguments"
                return parse_arguments(function.get("arguments"), cwhere)
    return None


class OpenHandsAdapter(Adapter):
    name = "openhands"
    description = "OpenHands event stream (actions/observations/tool_call_metadata) and eval output.jsonl records"
    priority = 20

    def check(self, record: Any) -> str | None:
        if isinstance(record, list):
            events = [e for _, e in _events(record)]
            if events and all(isinstance(e, dict) for e in events) and any(_is_event(e) for e in events):
                return None
            return "not a list of OpenHands events ({action|observation, source, id})"
        if isinstance(record, dict):
            if _history_key(record) is not None:
                return None
            return "no 'history' (output.jsonl) or 'trajectory' (feedback export) of OpenHands events"
        return "not an event list, an output.jsonl record or a feedback export"

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        if isinstance(record, list):
            yield self._convert(record, "$", {}, source)
        else:
            record = expect(record, dict, "$")
            key = _history_key(record) or "history"
            yield self._convert(get(record, key, "$", list), f"$.{key}", record, source)

    def _convert(self, history: list, base: str, record: dict, source: str) -> Trajectory:
        steps = StepList()
        by_id: dict[Any, Step] = {}
        task = ""
        final_state = None
        responses: dict[str, dict] = {}
        model = ""
        last_reply: Step | None = None
        unanswered: Step | None = None  # the last agent action, until an observation answers it
        skipped = 0
        for suffix, event in _events(history):
            where = base + suffix
            event = expect(event, dict, where)
            if event.get("action") is not None:
                kind = get(event, "action", where, str)
                args = get(event, "args", where, dict, {}) if "args" in event else _extras(event, where)
                said = _or(args.get("content"), event.get("message"))  # what a message action says
                if event.get("source") == "user":
                    text = text_of(said, path(path(where, "args"), "content"))
                    if kind == "message" and not task and not len(steps):
                        task = text
                    elif kind == "message" and last_reply is not None:
                        steps.set_observation(last_reply, text)
                    continue
                if kind in SKIP_ACTIONS:
                    continue
                tcm = get(event, "tool_call_metadata", where, dict, None)
                if tcm is not None:
                    response = tcm.get("model_response")
                    if isinstance(response, dict) and isinstance(response.get("id"), str):
                        responses.setdefault(response["id"], response)
                        model = model or str(response.get("model") or "")
                thought = args.get("thought") if isinstance(args.get("thought"), str) else ""
                meta = {"action": kind, "event_id": event.get("id")}
                stamp = iso_timestamp(event.get("timestamp"))
                if kind == "message" and tcm is None:
                    content = text_of(said, path(path(where, "args"), "content"))
                    step = steps.add(RESPOND, {"message": content}, thought=thought, timestamp=stamp, metadata=meta)
                    last_reply = step
                    unanswered = None
                else:
                    params = _tool_arguments(tcm, path(where, "tool_call_metadata")) if tcm else None
                    if params is None:
                        params = {k: v for k, v in args.items() if k not in RUNTIME_ARGS}
                    name = get(tcm, "function_name", path(where, "tool_call_metadata"), str) if tcm else kind
                    if "args" not in event and isinstance(event.get("message"), str):
                        meta["message"] = event["message"]  # a flattened row's own account of the action
                    step = steps.add(
                        name,
                        params,
                        thought=thought,
                        call_id=tcm.get("tool_call_id") if tcm else None,
                        timestamp=stamp,
                        metadata=meta,
                    )
                    unanswered = step
                if isinstance(event.get("id"), (int, str)):
                    by_id[event["id"]] = step
            elif event.get("observation") is not None:
                kind = get(event, "observation", where, str)
                extras = _extras(event, where)
                if kind == "agent_state_changed":
                    final_state = extras.get("agent_state", final_state)
                    continue
                cause = event.get("cause")
                if isinstance(cause, (int, str)):
                    step = by_id.get(cause)
                else:  # a flattened row names no cause: it answers the action before it
                    step = unanswered if "cause" not in event and kind != "null" else None
                if step is None:
                    continue
                unanswered = None
                exit_code = extras.get("exit_code")
                if exit_code is None and isinstance(extras.get("metadata"), dict):
                    exit_code = extras["metadata"].get("exit_code")
                content = text_of(_or(event.get("content"), event.get("message")), path(where, "content"))
                steps.set_observation(
                    step,
                    content,
                    exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
                    error=content if kind == "error" else None,
                )
                if isinstance(event.get("success"), bool):
                    step.metadata["success"] = event["success"]
                stamp = iso_timestamp(event.get("timestamp"))
                if stamp is not None and step.timestamp is not None and stamp >= step.timestamp:
                    step.duration_s = round(stamp - step.timestamp, 6)
            else:
                skipped += 1  # neither an action nor an observation: nothing to read
        trajectory = self._trajectory(steps, task, final_state, responses, model, record, source)
        if skipped:
            trajectory.metadata["skipped_events"] = skipped
        return trajectory

    def _trajectory(self, steps, task, final_state, responses, model, record, source) -> Trajectory:
        finished = steps.last is not None and steps.last.metadata.get("action") == "finish"
        error = record.get("error") if isinstance(record.get("error"), str) else None
        exit_status = "error" if error or final_state == "error" else "finished" if finished else final_state
        test_result = record.get("test_result") if isinstance(record.get("test_result"), dict) else {}
        report = record.get("report") if isinstance(record.get("report"), dict) else {}
        resolved = test_result.get("resolved", report.get("resolved"))
        metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
        usage = self._usage(responses, metrics)
        run_meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        llm = run_meta.get("llm_config") if isinstance(run_meta.get("llm_config"), dict) else {}
        instance_id = str(record.get("instance_id", record.get("session_id", "")))
        metadata: dict[str, Any] = {"format": "openhands"}
        feedback = {k: record[k] for k in FEEDBACK_KEYS if k in record}
        if feedback:
            metadata["feedback"] = feedback
        if final_state is not None:
            metadata["final_agent_state"] = final_state
        if error:
            metadata["error"] = error
        if run_meta:
            metadata["run"] = run_meta
        return Trajectory(
            id=instance_id,
            task=TaskInfo(
                id=instance_id,
                description=str(record.get("instruction") or task),
                domain="coding",
            ),
            agent=str(run_meta.get("agent_class") or "openhands"),
            model=str(llm.get("model") or model),
            steps=steps.steps,
            outcome=Outcome(
                success=resolved if isinstance(resolved, bool) else None,
                score=float(resolved) if isinstance(resolved, bool) else None,
                exit_status=exit_status,
                patch=test_result.get("git_patch") if isinstance(test_result.get("git_patch"), str) else None,
                terminated=finished,
            ),
            usage=usage,
            source=source,
            metadata=metadata,
        )

    def _usage(self, responses: dict[str, dict], metrics: dict) -> Usage | None:
        totals = metrics.get("accumulated_token_usage")
        cost = metrics.get("accumulated_cost")
        if isinstance(totals, dict):
            prompt, completion = totals.get("prompt_tokens"), totals.get("completion_tokens")
        else:
            usages = [r.get("usage") for r in responses.values() if isinstance(r.get("usage"), dict)]
            if not usages and cost is None:
                return None
            prompt = sum(_count(u.get("prompt_tokens")) for u in usages) if usages else None
            completion = sum(_count(u.get("completion_tokens")) for u in usages) if usages else None
        total = prompt + completion if isinstance(prompt, int) and isinstance(completion, int) else None
        return Usage(
            prompt_tokens=prompt if isinstance(prompt, int) else None,
            completion_tokens=completion if isinstance(completion, int) else None,
            total_tokens=total,
            cost_usd=float(cost) if isinstance(cost, (int, float)) and cost >= 0 else None,
            api_calls=len(responses) or None,
        )
