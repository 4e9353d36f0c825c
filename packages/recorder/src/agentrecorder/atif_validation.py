"""Check a document against ATIF's required fields and types (RFC 0001, v1.5; v1.6's content parts).

``validate_atif(doc)`` returns every problem as ``"<JSON path>: <what is wrong>"`` (an empty
list for a valid document). It checks what the specification makes required or typed: the
root's ``schema_version`` (``ATIF-v1.x``), ``session_id``, ``agent.name`` / ``agent.version``
and ``steps``; each step's ``step_id`` (1, 2, 3... in order), ``source`` (system, user or
agent), ``message`` (a string, possibly empty, or from ATIF-v1.6 on a list of content parts:
``{"type": "text", "text"}`` or ``{"type": "image", "source": {media_type, path}}``) and
``timestamp`` (ISO 8601); that agent-only fields (``model_name``, ``reasoning_effort``,
``reasoning_content``, ``tool_calls``, ``metrics``) sit on agent steps; tool calls
(``tool_call_id``, ``function_name``, ``arguments`` object, ids unique in the step);
observation results (``source_call_id`` naming a tool call of the same step, ``content`` a
string or content parts, subagent references with a ``session_id``); the metric and
final-metric types (non-negative integer counts, integer token ids, numeric log-probs).
Optional fields may be null; fields the specification does not name are allowed (newer 1.x
versions add some).

Example:
    >>> validate_atif({"schema_version": "ATIF-v1.5", "session_id": "s", "agent": {"name": "a", "version": "1"},
    ...                "steps": [{"step_id": 1, "source": "robot", "message": "hi"}]})
    ["$.steps[0].source: must be 'system', 'user' or 'agent', got 'robot'"]
"""

from __future__ import annotations

import os
import re
from typing import Any

from agentrecorder.adapters.base import iso_timestamp
from agentrecorder.errors import ConversionError
from agentrecorder.fields import path, type_name

_VERSION = re.compile(r"ATIF-v1\.\d+")
_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")
_COUNTS = ("prompt_tokens", "completion_tokens", "cached_tokens")
_TOTALS = ("total_prompt_tokens", "total_completion_tokens", "total_cached_tokens", "total_steps")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, where: str, problem: str) -> None:
        self.problems.append(f"{where}: {problem}")

    def field(self, obj: dict, key: str, where: str, kind: type | tuple, wanted: str, *, required: bool = False) -> Any:
        """``obj[key]`` when it is of ``kind``; a missing required field or a wrong type is a problem."""
        value = obj.get(key)
        if value is None:
            if required:
                self.fail(
                    path(where, key), "missing required field" if key not in obj else f"must be {wanted}, got null"
                )
            return None
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            self.fail(path(where, key), f"must be {wanted}, got {type_name(value)}")
            return None
        return value

    def numbers(self, obj: dict, key: str, where: str, check: Any, wanted: str) -> None:
        values = self.field(obj, key, where, list, "an array")
        bad = next((i for i, v in enumerate(values or []) if not check(v)), None)
        if bad is not None:
            self.fail(path(path(where, key), bad), f"must be {wanted}, got {type_name(values[bad])}")

    def counts(self, obj: dict, keys: tuple[str, ...], where: str) -> None:
        for key in keys:
            value = self.field(obj, key, where, int, "an integer")
            if value is not None and value < 0:
                self.fail(path(where, key), f"must not be negative, got {value}")

    def content(self, obj: dict, key: str, where: str, *, required: bool = False) -> None:
        """A string, or (ATIF-v1.6) a list of content parts."""
        if isinstance(obj.get(key), list):
            self.parts(obj[key], path(where, key))
        else:
            self.field(obj, key, where, str, "a string or a list of content parts", required=required)

    def parts(self, parts: Any, where: str) -> None:
        if not isinstance(parts, list):
            self.fail(where, f"must be a list of content parts, got {type_name(parts)}")
            return
        for i, part in enumerate(parts):
            pwhere = path(where, i)
            if not isinstance(part, dict):
                self.fail(pwhere, f"a content part is an object, got {type_name(part)}")
            elif "type" not in part:
                self.fail(path(pwhere, "type"), "missing required field")
            elif part.get("type") == "text":
                self.field(part, "text", pwhere, str, "a string", required=True)
            elif part.get("type") == "image":
                source = self.field(part, "source", pwhere, dict, "an object", required=True)
                if source is not None:
                    self.field(source, "media_type", path(pwhere, "source"), str, "a string", required=True)
                    self.field(source, "path", path(pwhere, "source"), str, "a string", required=True)
            else:
                self.fail(path(pwhere, "type"), f"must be 'text' or 'image', got {part.get('type')!r:.40}")

    def root(self, doc: Any) -> None:
        if not isinstance(doc, dict):
            self.fail("$", f"an ATIF document is a JSON object, got {type_name(doc)}")
            return
        version = self.field(doc, "schema_version", "$", str, "a string", required=True)
        if version is not None and not _VERSION.fullmatch(version):
            self.fail("$.schema_version", f"must be 'ATIF-v1.<minor>', got {version!r:.40}")
        self.field(doc, "session_id", "$", str, "a string", required=True)
        agent = self.field(doc, "agent", "$", dict, "an object", required=True)
        if agent is not None:
            self.field(agent, "name", "$.agent", str, "a string", required=True)
            self.field(agent, "version", "$.agent", str, "a string", required=True)
            self.field(agent, "model_name", "$.agent", str, "a string")
            tools = self.field(agent, "tool_definitions", "$.agent", list, "an array") or []
            for i, tool in enumerate(tools):
                if not isinstance(tool, dict):
                    self.fail(path("$.agent.tool_definitions", i), f"must be an object, got {type_name(tool)}")
            self.field(agent, "extra", "$.agent", dict, "an object")
        for key in ("notes", "continued_trajectory_ref"):
            self.field(doc, key, "$", str, "a string")
        self.field(doc, "extra", "$", dict, "an object")
        final = self.field(doc, "final_metrics", "$", dict, "an object")
        if final is not None:
            self.counts(final, _TOTALS, "$.final_metrics")
            self.field(final, "total_cost_usd", "$.final_metrics", (int, float), "a number")
            self.field(final, "extra", "$.final_metrics", dict, "an object")
        steps = self.field(doc, "steps", "$", list, "an array", required=True) or []
        for i, step in enumerate(steps):
            self.step(step, i, path("$.steps", i))

    def step(self, step: Any, position: int, where: str) -> None:
        if not isinstance(step, dict):
            self.fail(where, f"a step is an object, got {type_name(step)}")
            return
        step_id = self.field(step, "step_id", where, int, "an integer", required=True)
        if step_id is not None and step_id != position + 1:
            self.fail(
                path(where, "step_id"), f"must be {position + 1} (step ids count 1, 2, 3... in order), got {step_id}"
            )
        source = self.field(step, "source", where, str, "a string", required=True)
        if source is not None and source not in ("system", "user", "agent"):
            self.fail(path(where, "source"), f"must be 'system', 'user' or 'agent', got {source!r:.40}")
        self.content(step, "message", where, required=True)
        stamp = self.field(step, "timestamp", where, str, "a string")
        if stamp is not None and iso_timestamp(stamp) is None:
            self.fail(path(where, "timestamp"), f"must be an ISO 8601 timestamp, got {stamp!r:.40}")
        if source in ("system", "user"):
            for key in _AGENT_ONLY:
                if step.get(key) is not None:
                    self.fail(path(where, key), f"only agent steps may have it (this step's source is {source!r})")
        self.field(step, "model_name", where, str, "a string")
        self.field(step, "reasoning_effort", where, (str, int, float), "a string or a number")
        self.field(step, "reasoning_content", where, str, "a string")
        self.field(step, "extra", where, dict, "an object")
        call_ids = self.tool_calls(step, where)
        self.observation(step, where, call_ids)
        metrics = self.field(step, "metrics", where, dict, "an object")
        if metrics is not None:
            mwhere = path(where, "metrics")
            self.counts(metrics, _COUNTS, mwhere)
            self.field(metrics, "cost_usd", mwhere, (int, float), "a number")
            self.numbers(metrics, "prompt_token_ids", mwhere, _is_int, "an integer token id")
            self.numbers(metrics, "completion_token_ids", mwhere, _is_int, "an integer token id")
            self.numbers(metrics, "logprobs", mwhere, _is_number, "a number")
            self.field(metrics, "extra", mwhere, dict, "an object")

    def tool_calls(self, step: dict, where: str) -> set[str]:
        ids: set[str] = set()
        for j, call in enumerate(self.field(step, "tool_calls", where, list, "an array") or []):
            cwhere = path(path(where, "tool_calls"), j)
            if not isinstance(call, dict):
                self.fail(cwhere, f"a tool call is an object, got {type_name(call)}")
                continue
            call_id = self.field(call, "tool_call_id", cwhere, str, "a string", required=True)
            if call_id in ids:
                self.fail(path(cwhere, "tool_call_id"), f"{call_id!r:.40} is used twice in this step")
            if call_id is not None:
                ids.add(call_id)
            self.field(call, "function_name", cwhere, str, "a string", required=True)
            self.field(call, "arguments", cwhere, dict, "an object", required=True)
        return ids

    def observation(self, step: dict, where: str, call_ids: set[str]) -> None:
        observation = self.field(step, "observation", where, dict, "an object")
        if observation is None:
            return
        owhere = path(where, "observation")
        for k, result in enumerate(self.field(observation, "results", owhere, list, "an array", required=True) or []):
            rwhere = path(path(owhere, "results"), k)
            if not isinstance(result, dict):
                self.fail(rwhere, f"a result is an object, got {type_name(result)}")
                continue
            source_call = self.field(result, "source_call_id", rwhere, str, "a string")
            if source_call is not None and source_call not in call_ids:
                self.fail(path(rwhere, "source_call_id"), f"{source_call!r:.40} is no tool_call_id of this step")
            self.content(result, "content", rwhere)
            refs = self.field(result, "subagent_trajectory_ref", rwhere, list, "an array") or []
            for r, ref in enumerate(refs):
                refwhere = path(path(rwhere, "subagent_trajectory_ref"), r)
                if not isinstance(ref, dict):
                    self.fail(refwhere, f"a subagent reference is an object, got {type_name(ref)}")
                    continue
                self.field(ref, "session_id", refwhere, str, "a string", required=True)
                self.field(ref, "trajectory_path", refwhere, str, "a string")
                self.field(ref, "extra", refwhere, dict, "an object")


def validate_atif(doc: Any) -> list[str]:
    """Every way ``doc`` breaks ATIF's required fields and types, as ``"<JSON path>: <problem>"``."""
    checker = _Checker()
    checker.root(doc)
    return checker.problems


def content_parts_problem(value: Any) -> str | None:
    """``None`` when ``value`` is a list of ATIF content parts, else the first thing wrong with it."""
    checker = _Checker()
    checker.parts(value, "$")
    return checker.problems[0] if checker.problems else None


def check_atif_file(path_: str | os.PathLike) -> int:
    """Validate every ATIF document in a file (a JSON document, a JSON array or JSONL); return
    how many there were. The first invalid one raises ``ConversionError`` (file, line, problem)."""
    from agentrecorder.convert import iter_records
    from agentrecorder.registry import get_adapter

    count = 0
    for line, where, doc in iter_records(path_, get_adapter("atif")):
        problems = validate_atif(doc)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            first = where + problems[0].removeprefix("$")
            raise ConversionError(str(path_), line, f"not valid ATIF: {first}{more}")
        count += 1
    return count
