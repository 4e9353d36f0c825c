"""ShareGPT conversations: ``{"conversations": [{"from", "value"}], "system"?, "tools"?}``.

Turns come from ``human``/``user``, ``gpt``/``assistant``, ``system``, and in the
tool-calling dialect (LLaMA-Factory) ``function_call`` (value: JSON ``{"name",
"arguments"}``) and ``observation`` (the tool result). A ``gpt`` turn is a ``respond`` step
answered by the next ``human`` turn; a ``function_call`` turn is a tool step answered by the
next ``observation``; a ``gpt`` turn directly before a ``function_call`` is that call's
thought. The first ``human`` turn is the task. A JSON list of records yields one trajectory
per record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import RESPOND, Adapter, StepList
from agentrecorder.errors import FieldError
from agentrecorder.fields import expect, get, parse_arguments, path
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Outcome, Trajectory

HUMAN = {"human", "user"}
GPT = {"gpt", "assistant", "chatgpt", "bing", "bard"}
CALL = {"function_call", "tool_call"}
RESULT = {"observation", "tool", "function_response", "tool_response"}


def _is_record(value: Any) -> bool:
    turns = value.get("conversations") if isinstance(value, dict) else None
    return isinstance(turns, list) and all(isinstance(t, dict) and "from" in t for t in turns)


class ShareGPTAdapter(Adapter):
    name = "sharegpt"
    description = "ShareGPT {conversations: [{from, value}]} incl. function_call/observation turns"
    priority = 50

    def check(self, record: Any) -> str | None:
        if _is_record(record):
            return None
        if isinstance(record, list) and record and all(_is_record(r) for r in record):
            return None
        return "no 'conversations' list of {from, value} turns"

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        if isinstance(record, list):
            for i, item in enumerate(record):
                yield self._one(expect(item, dict, path("$", i)), path("$", i), source)
        else:
            yield self._one(expect(record, dict, "$"), "$", source)

    def _one(self, record: dict, where: str, source: str) -> Trajectory:
        turns = get(record, "conversations", where, list)
        steps = StepList()
        task, system = "", get(record, "system", where, str, None)
        thought = ""  # gpt text waiting to see whether a function_call follows
        for i, turn in enumerate(turns):
            twhere = path(path(where, "conversations"), i)
            turn = expect(turn, dict, twhere)
            speaker = get(turn, "from", twhere, str).lower()
            value = get(turn, "value", twhere, str, "")
            if speaker == "system":
                system = value
            elif speaker in HUMAN:
                if thought:
                    steps.add(RESPOND, {"message": thought})
                    thought = ""
                if not task and not len(steps):
                    task = value
                elif steps.last is not None and steps.last.tool_call.name == RESPOND:
                    steps.set_observation(steps.last, value)
            elif speaker in GPT:
                if thought:
                    steps.add(RESPOND, {"message": thought})
                thought = value
            elif speaker in CALL:
                vwhere = path(twhere, "value")
                try:
                    call = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise FieldError(vwhere, f"function_call value is not JSON: {exc.msg} (char {exc.pos})") from None
                call = expect(call, dict, vwhere)
                steps.add(
                    get(call, "name", vwhere, str),
                    parse_arguments(call.get("arguments", call.get("parameters")), path(vwhere, "arguments")),
                    thought=thought,
                )
                thought = ""
            elif speaker in RESULT:
                if steps.last is not None:
                    steps.set_observation(steps.last, value)
            else:
                raise FieldError(path(twhere, "from"), f"unknown speaker {speaker!r}")
        if thought:
            steps.add(RESPOND, {"message": thought})
        metadata: dict[str, Any] = {"format": "sharegpt"}
        if system is not None:
            metadata["system_prompt"] = system
        if "tools" in record:
            metadata["tools"] = record["tools"]
        record_id = str(record.get("id", ""))
        return Trajectory(
            id=record_id,
            task=TaskInfo(id=record_id, description=task),
            steps=steps.steps,
            outcome=Outcome(),
            source=source,
            metadata=metadata,
        )
