"""ATIF, Harbor's Agent Trajectory Interchange Format (v1.x): one trajectory per document.

A document is ``{schema_version: "ATIF-v1.x", session_id, agent: {name, version, model_name,
tool_definitions, extra}, steps: [...], notes, final_metrics, continued_trajectory_ref,
extra}``; each step has a ``source`` (``system``, ``user`` or ``agent``), a ``message`` and,
for agent steps, ``reasoning_content``, ``tool_calls`` [{tool_call_id, function_name,
arguments}], ``observation.results`` [{source_call_id, content, subagent_trajectory_ref}] and
``metrics`` (token counts, cost, ``prompt_token_ids``, ``completion_token_ids``,
``logprobs``).

Each agent step becomes one knowlyr step per tool call (the message is the first call's
thought), or a ``respond {"message"}`` step when it calls no tool; results are attached to the
call their ``source_call_id`` names, and results without one to the calls in order. The
turn's ``completion_token_ids`` and ``logprobs`` (what the policy sampled) go on its first
step's ``token_ids`` / ``logprobs``; ``reasoning_content`` and subagent references go to step
metadata, the other metrics, ``model_name``, ``reasoning_effort``, ``extra`` and ``step_id``
to ``metadata.atif``. The first system step is the system prompt and the first user step the
task; any later system or user step (a context-summarisation handoff, a follow-up question)
is kept verbatim in ``metadata.atif.context_steps``. ``final_metrics`` is the usage.

A ``message`` (and an observation result's ``content``) is a string or, from ATIF-v1.6 on, a
list of content parts (``{"type": "text", "text"}``, ``{"type": "image", "source"}``): the text
parts are joined, the others kept in step metadata (``atif_message.parts``,
``atif_observation``). Some producers write a chat message object instead, ``{role, content,
reasoning, tool_calls}``, or a list of them: each is read in order, its content as text, its
reasoning as reasoning and its tool calls (ATIF's ``{tool_call_id, function_name, arguments}``
or OpenAI's ``{id, type, function: {name, arguments}}``) as tool calls after the step's own
(a call the step already lists under the same id is not read twice); a ``tool`` message in
the list is a result of the call its ``tool_call_id`` names. What such a message holds beyond
that (its role, fields this reader does not know) is kept in ``metadata.atif_message``, the
unknown fields of a tool call in ``metadata.atif_tool_call``; for the first system and user
steps (the system prompt and the task, which are text in knowlyr) the message as it was is
kept in the trajectory's ``metadata.atif_message``.

The ``knowlyr`` blocks ``agentrecorder.interop.to_atif`` writes into ``extra`` are put back
(``agentrecorder.extension``). Every minor version ``ATIF-v1.N`` is read (minor versions only
add optional fields): fields this reader does not know are kept in ``metadata.atif``; another
major version is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import RESPOND, ObjectAdapter, StepList, iso_timestamp
from agentrecorder.adapters.usage import reported_usage
from agentrecorder.errors import FieldError
from agentrecorder.extension import KEY, restore_step, restore_trajectory
from agentrecorder.fields import expect, get, parse_arguments, path, type_name
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Step, Trajectory, Usage

SOURCES = ("system", "user", "agent")
VERSION_PREFIX = "ATIF-v1."
_ROOT_FIELDS = (
    "schema_version",
    "session_id",
    "agent",
    "steps",
    "notes",
    "final_metrics",
    "continued_trajectory_ref",
    "extra",
)
_STEP_FIELDS = (
    "step_id",
    "timestamp",
    "source",
    "model_name",
    "reasoning_effort",
    "message",
    "reasoning_content",
    "tool_calls",
    "observation",
    "metrics",
    "extra",
)
_RESULT_FIELDS = ("source_call_id", "content", "subagent_trajectory_ref")
_SAMPLED = ("completion_token_ids", "logprobs")
#: content-part types whose ``text`` is text (ATIF's ``text``, OpenAI's input and output variants)
_TEXT_PARTS = ("text", "input_text", "output_text")


def _number_list(metrics: dict, key: str, where: str, kind: type | tuple[type, ...]) -> list | None:
    values = get(metrics, key, where, list, None)
    if values is not None and not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
        bad = next(i for i, v in enumerate(values) if not isinstance(v, kind) or isinstance(v, bool))
        expect(values[bad], kind, path(path(where, key), bad))
    return values


def _extra(raw: dict, where: str) -> tuple[dict[str, Any], Any]:
    """``(extra without the knowlyr block, the knowlyr block)``."""
    extra = dict(get(raw, "extra", where, dict, {}))
    return extra, extra.pop(KEY, None)


def _is_part(value: Any) -> bool:
    return isinstance(value, dict) and ("type" in value or "text" in value)


def _is_chat_message(value: Any) -> bool:
    return isinstance(value, dict) and (
        "role" in value or "tool_calls" in value or ("content" in value and "type" not in value)
    )


def _content(value: Any, where: str) -> tuple[str, list[Any]]:
    """``(text, the other parts)`` of a content value: a string, null, a part or a list of parts."""
    if value is None or isinstance(value, str):
        return value or "", []
    parts = value if isinstance(value, list) else [value]
    texts: list[str] = []
    others: list[Any] = []
    for i, part in enumerate(parts):
        pwhere = path(where, i) if isinstance(value, list) else where
        if isinstance(part, str):
            texts.append(part)
        elif _is_part(part) and part.get("type", "text") in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif _is_part(part):
            others.append(part)
        else:
            raise FieldError(pwhere, f"expected a string or a content part {{type, text}}, got {type_name(part)}")
    return "\n".join(texts), others


def _tool_call(call: Any, where: str) -> tuple[str, dict[str, Any], str | None, dict[str, Any]]:
    """``(name, arguments, id, the fields not read)`` of an ATIF tool call ``{tool_call_id,
    function_name, arguments}`` or an OpenAI one ``{id, type: "function", function: {name,
    arguments}}`` (arguments as an object or a JSON string)."""
    call = expect(call, dict, where)
    function = call.get("function")
    if isinstance(function, dict):
        fwhere = path(where, "function")
        name = get(function, "name", fwhere, str)
        arguments = parse_arguments(function.get("arguments"), path(fwhere, "arguments"))
        call_id = get(call, "id", where, str, None)
        rest = {k: v for k, v in call.items() if k not in ("id", "function") and (k, v) != ("type", "function")}
        more = {k: v for k, v in function.items() if k not in ("name", "arguments")}
        if more:
            rest["function"] = more
        return name, arguments, call_id, rest
    name_key = "name" if "function_name" not in call and "name" in call else "function_name"
    id_key = "id" if "tool_call_id" not in call and "id" in call else "tool_call_id"
    name = get(call, name_key, where, str)
    arguments = parse_arguments(call.get("arguments"), path(where, "arguments"))
    call_id = get(call, id_key, where, str, None)
    return name, arguments, call_id, {k: v for k, v in call.items() if k not in (name_key, id_key, "arguments")}


class _Message:
    """A step's ``message``: a string, content parts, a chat message object or a list of them.

    Read in order into ``text``, ``reasoning``, ``calls`` (raw tool calls with their JSON
    path), ``results`` (``tool`` messages: call id, content, path) and ``notes`` (what
    has no place in a knowlyr step: each message object's role and unknown fields, the
    non-text parts)."""

    def __init__(self, value: Any, where: str) -> None:
        self.texts: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[tuple[Any, str]] = []
        self.results: list[tuple[str | None, Any, str]] = []
        self.parts: list[Any] = []
        self.messages: list[dict[str, Any]] = []
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            iwhere = path(where, i) if isinstance(value, list) else where
            if _is_chat_message(item):
                self._chat(item, iwhere)
            elif item is None or isinstance(item, str) or _is_part(item):
                self._add(*_content(item, iwhere))
            else:
                raise FieldError(
                    iwhere,
                    f"expected a string, content parts or a message object {{role, content}}, got {type_name(item)}",
                )

    def _add(self, text: str, others: list[Any]) -> None:
        if text:
            self.texts.append(text)
        self.parts.extend(others)

    def _chat(self, message: dict, where: str) -> None:
        read = {"content"}
        if message.get("role") in ("tool", "function"):  # a tool's answer, in the list after the call
            call_id = get(message, "tool_call_id", where, str, None)
            self.results.append((call_id, message.get("content"), where))
            read.add("tool_call_id")
        else:
            self._add(*_content(message.get("content"), path(where, "content")))
            for key in ("reasoning_content", "reasoning"):
                if isinstance(message.get(key), str):
                    self.reasoning.append(message[key])
                    read.add(key)
            calls = get(message, "tool_calls", where, list, [])
            self.calls.extend((call, path(path(where, "tool_calls"), j)) for j, call in enumerate(calls))
            read.add("tool_calls")
        self.messages.append({k: v for k, v in message.items() if k not in read})

    @property
    def text(self) -> str:
        return "\n".join(self.texts)

    @property
    def notes(self) -> dict[str, Any]:
        notes: dict[str, Any] = {}
        if any(self.messages):
            notes["messages"] = self.messages
        if self.parts:
            notes["parts"] = self.parts
        return notes

    @property
    def only_text(self) -> bool:
        return not (self.notes or self.reasoning or self.calls or self.results)


def message_text(value: Any) -> str:
    """The text of an ATIF ``message`` in any shape this reader reads (else its JSON)."""
    try:
        return _Message(value, "$").text
    except FieldError:
        return json.dumps(value, ensure_ascii=False)


class _Reader:
    """Walks the steps of one document, building knowlyr steps and the context around them."""

    def __init__(self) -> None:
        self.steps = StepList()
        self.task: str | None = None
        self.system: str | None = None
        self.context: list[dict] = []
        self.messages: dict[str, Any] = {}  # the first system / user message, when it was more than text
        self.agent_steps = 0
        self.totals = {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
        self.metered = False

    def read(self, raw: dict, where: str) -> None:
        source = get(raw, "source", where, str)
        if source == "agent":
            self._agent(raw, where)
        elif source == "system" and self.system is None and not len(self.steps) and not raw.get("observation"):
            self.system = self._text(raw, where)
        elif source == "user" and self.task is None and not len(self.steps):
            self.task = self._text(raw, where)
        elif source in SOURCES:
            _Message(raw.get("message"), path(where, "message"))  # a message that cannot be read is refused here
            self.context.append(raw)
        else:
            raise FieldError(path(where, "source"), f"expected 'system', 'user' or 'agent', got {source!r:.40}")

    def _text(self, raw: dict, where: str) -> str:
        message = _Message(raw.get("message"), path(where, "message"))
        if not message.only_text:
            self.messages[raw["source"]] = raw["message"]
        return message.text

    def _agent(self, raw: dict, where: str) -> None:
        self.agent_steps += 1
        message = _Message(raw.get("message"), path(where, "message"))
        stamp = iso_timestamp(raw.get("timestamp"))
        if raw.get("timestamp") is not None and stamp is None:
            raise FieldError(path(where, "timestamp"), f"not an ISO 8601 timestamp: {raw['timestamp']!r:.40}")
        metrics = get(raw, "metrics", where, dict, {})
        sampled = self._sampled(metrics, path(where, "metrics"))
        extra, blocks = _extra(raw, where)
        atif: dict[str, Any] = {"step_id": raw.get("step_id")}
        atif.update({k: raw[k] for k in ("model_name", "reasoning_effort") if raw.get(k) is not None})
        atif.update({k: v for k, v in raw.items() if k not in _STEP_FIELDS})  # newer 1.x fields
        if extra:
            atif["extra"] = extra
        if any(k not in _SAMPLED for k in metrics):
            atif["metrics"] = {k: v for k, v in metrics.items() if k not in _SAMPLED}
        meta: dict[str, Any] = {"atif": atif}
        own = get(raw, "reasoning_content", where, str, None)
        reasoning = "\n\n".join(dict.fromkeys(r for r in (own, *message.reasoning) if r))
        if reasoning or own is not None:
            meta["reasoning_content"] = reasoning
        if message.notes:
            meta["atif_message"] = message.notes
        calls = [(c, path(path(where, "tool_calls"), j)) for j, c in enumerate(get(raw, "tool_calls", where, list, []))]
        read = [_tool_call(call, cwhere) for call, cwhere in calls]
        listed = {call_id for _, _, call_id, _ in read if call_id is not None}
        for call, cwhere in message.calls:  # the message's own calls, unless the step lists them already
            name, arguments, call_id, rest = _tool_call(call, cwhere)
            if call_id is None or call_id not in listed:
                read.append((name, arguments, call_id, rest))
        made = []
        for j, (name, arguments, call_id, rest) in enumerate(read):
            step_meta = meta if j == 0 else {"atif": {"step_id": atif["step_id"]}}
            if rest:
                step_meta = {**step_meta, "atif_tool_call": rest}
            made.append(
                self.steps.add(
                    name,
                    arguments,
                    thought=message.text if j == 0 else "",
                    call_id=call_id,
                    timestamp=stamp,
                    metadata=step_meta,
                )
            )
        if not made:
            made.append(self.steps.add(RESPOND, {"message": message.text}, timestamp=stamp, metadata=meta))
        self._observe(raw, where, made, message)
        self._finish(made, sampled, blocks, path(path(where, "extra"), KEY))

    def _sampled(self, metrics: dict, where: str) -> dict[str, list]:
        """The turn's sampled tokens and log-probs; the token counts and cost go to the totals."""
        token_ids = _number_list(metrics, "completion_token_ids", where, int)
        logprobs = _number_list(metrics, "logprobs", where, (int, float))
        if token_ids is not None and logprobs is not None and len(token_ids) != len(logprobs):
            raise FieldError(
                path(where, "logprobs"), f"{len(logprobs)} log-probs for {len(token_ids)} completion_token_ids"
            )
        for key, kind in (("prompt_tokens", int), ("completion_tokens", int), ("cost_usd", (int, float))):
            value = get(metrics, key, where, kind, None)
            if value is not None:
                self.totals[key] += value
                self.metered = True
        sampled: dict[str, list] = {}
        if token_ids is not None:
            sampled["token_ids"] = token_ids
        if logprobs is not None:
            sampled["logprobs"] = [float(v) for v in logprobs]
        return sampled

    def _observe(self, raw: dict, where: str, made: list[Step], message: _Message) -> None:
        """Attach the observation's results (and the ``tool`` messages of the message list) to
        the calls they answer."""
        results: list[tuple[dict, str | None, str, str]] = []  # (result, call id, its path, path of the id)
        observation = get(raw, "observation", where, dict, None)
        if observation is not None:
            owhere = path(where, "observation")
            for k, result in enumerate(get(observation, "results", owhere, list)):
                rwhere = path(path(owhere, "results"), k)
                result = expect(result, dict, rwhere)
                call_id = get(result, "source_call_id", rwhere, str, None)
                results.append((result, call_id, rwhere, path(rwhere, "source_call_id")))
        for call_id, content, mwhere in message.results:
            results.append(({"content": content}, call_id, mwhere, path(mwhere, "tool_call_id")))
        by_id = {s.tool_call.id: s for s in made if s.tool_call.id}
        unlinked = 0
        for result, call_id, rwhere, id_where in results:
            if call_id is None:
                step = made[min(unlinked, len(made) - 1)]
                unlinked += 1
            elif call_id in by_id:
                step = by_id[call_id]
            else:
                raise FieldError(id_where, f"{call_id!r:.60} is no tool_call_id of this step")
            text, others = _content(result.get("content"), path(rwhere, "content"))
            self.steps.set_observation(step, text)
            unread = {k: v for k, v in result.items() if k not in _RESULT_FIELDS}
            if others:
                unread["content_parts"] = others
            if unread:
                step.metadata.setdefault("atif_observation", []).append(unread)
            refs = get(result, "subagent_trajectory_ref", rwhere, list, None)
            for r, ref in enumerate(refs or []):
                get(
                    expect(ref, dict, path(path(rwhere, "subagent_trajectory_ref"), r)),
                    "session_id",
                    path(path(rwhere, "subagent_trajectory_ref"), r),
                    str,
                )
            if refs:
                step.metadata.setdefault("subagent_trajectory_ref", []).extend(refs)

    def _finish(self, made: list[Step], sampled: dict[str, list], blocks: Any, where: str) -> None:
        """Put the sampled tokens on the turn's first step and the knowlyr blocks back."""
        first = made[0].index
        if sampled:
            self.steps.steps[first] = Step.model_validate({**made[0].model_dump(), **sampled})
        if blocks is None:
            return
        step_blocks = get(expect(blocks, dict, where), "steps", where, list)
        if len(step_blocks) != len(made):
            raise FieldError(path(where, "steps"), f"{len(step_blocks)} blocks for {len(made)} tool calls")
        for k, block in enumerate(step_blocks):
            step = self.steps.steps[first + k]
            self.steps.steps[first + k] = restore_step(step, block, path(path(where, "steps"), k))

    def usage(self, final: dict | None, where: str) -> Usage | None:
        if final is None and not self.metered:
            return None
        if final is None:
            prompt, completion = self.totals["prompt_tokens"], self.totals["completion_tokens"]
            cost: float | None = self.totals["cost_usd"]
        else:
            prompt = get(final, "total_prompt_tokens", where, int, None)
            completion = get(final, "total_completion_tokens", where, int, None)
            cost = get(final, "total_cost_usd", where, (int, float), None)
        return reported_usage(prompt, completion, cost, self.agent_steps or None)


class ATIFAdapter(ObjectAdapter):
    name = "atif"
    description = "ATIF v1.x (Harbor's trajectory interchange format): {schema_version: ATIF-v1.x, session_id, steps}"
    priority = 5

    def check_object(self, record: dict[str, Any]) -> str | None:
        version = record.get("schema_version")
        if not isinstance(version, str) or not version.startswith("ATIF-"):
            return "no schema_version 'ATIF-v1.x'"
        if not isinstance(record.get("steps"), list) and version.startswith(VERSION_PREFIX):
            return "no 'steps' list"  # another major version is taken, for convert to refuse by name
        return None

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        record = expect(record, dict, "$")
        version = get(record, "schema_version", "$", str)
        if not version.startswith(VERSION_PREFIX):
            raise FieldError("$.schema_version", f"unsupported version {version!r:.30} (this reader reads ATIF-v1.x)")
        agent = get(record, "agent", "$", dict, {})
        reader = _Reader()
        for i, raw in enumerate(get(record, "steps", "$", list)):
            reader.read(expect(raw, dict, path("$.steps", i)), path("$.steps", i))
        extra, block = _extra(record, "$")
        final = get(record, "final_metrics", "$", dict, None)
        atif: dict[str, Any] = {"schema_version": version}
        agent_rest = {k: v for k, v in agent.items() if k not in ("name", "model_name", "tool_definitions")}
        if agent_rest:
            atif["agent"] = agent_rest
        atif.update({k: record[k] for k in ("notes", "final_metrics") if record.get(k) is not None})
        atif.update({k: v for k, v in record.items() if k not in _ROOT_FIELDS})  # newer 1.x fields
        if extra:
            atif["extra"] = extra
        if reader.context:
            atif["context_steps"] = reader.context
        metadata: dict[str, Any] = {"format": "atif", "atif": atif}
        if reader.messages:
            metadata["atif_message"] = reader.messages
        if reader.system is not None:
            metadata["system_prompt"] = reader.system
        tools = get(agent, "tool_definitions", "$.agent", list, None)
        if tools is not None:
            metadata["tools"] = tools
        continued = get(record, "continued_trajectory_ref", "$", str, None)
        if continued is not None:
            metadata["continued_trajectory_ref"] = continued
        fields = {
            "id": get(record, "session_id", "$", str, ""),
            "task": TaskInfo(description=reader.task or ""),
            "agent": get(agent, "name", "$.agent", str, ""),
            "model": get(agent, "model_name", "$.agent", str, ""),
            "steps": reader.steps.steps,
            "usage": reader.usage(final, "$.final_metrics"),
            "source": source,
            "metadata": metadata,
        }
        yield Trajectory(**restore_trajectory(fields, block, path(path("$", "extra"), KEY)))
