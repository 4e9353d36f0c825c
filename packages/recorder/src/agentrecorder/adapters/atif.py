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

The ``knowlyr`` blocks ``agentrecorder.interop.to_atif`` writes into ``extra`` are put back
(``agentrecorder.extension``). Newer 1.x fields this reader does not know are kept in
``metadata.atif``; another major version is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import RESPOND, Adapter, StepList, iso_timestamp
from agentrecorder.errors import FieldError
from agentrecorder.extension import KEY, restore_step, restore_trajectory
from agentrecorder.fields import expect, get, parse_arguments, path, text_of
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Step, Trajectory, Usage

SOURCES = ("system", "user", "agent")
VERSION_PREFIX = "ATIF-v1."
_ROOT_FIELDS = ("schema_version", "session_id", "agent", "steps", "notes", "final_metrics",
                "continued_trajectory_ref", "extra")  # fmt: skip
_STEP_FIELDS = ("step_id", "timestamp", "source", "model_name", "reasoning_effort", "message",
                "reasoning_content", "tool_calls", "observation", "metrics", "extra")  # fmt: skip
_SAMPLED = ("completion_token_ids", "logprobs")


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


class _Reader:
    """Walks the steps of one document, building knowlyr steps and the context around them."""

    def __init__(self) -> None:
        self.steps = StepList()
        self.task: str | None = None
        self.system: str | None = None
        self.context: list[dict] = []
        self.agent_steps = 0
        self.totals = {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
        self.metered = False

    def read(self, raw: dict, where: str) -> None:
        source = get(raw, "source", where, str)
        if source == "agent":
            self._agent(raw, where)
        elif source == "system" and self.system is None and not len(self.steps) and not raw.get("observation"):
            self.system = text_of(raw.get("message"), path(where, "message"))
        elif source == "user" and self.task is None and not len(self.steps):
            self.task = text_of(raw.get("message"), path(where, "message"))
        elif source in SOURCES:
            self.context.append(raw)
        else:
            raise FieldError(path(where, "source"), f"expected 'system', 'user' or 'agent', got {source!r:.40}")

    def _agent(self, raw: dict, where: str) -> None:
        self.agent_steps += 1
        message = text_of(raw.get("message"), path(where, "message"))
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
        reasoning = get(raw, "reasoning_content", where, str, None)
        if reasoning is not None:
            meta["reasoning_content"] = reasoning
        made = []
        for j, call in enumerate(get(raw, "tool_calls", where, list, [])):
            cwhere = path(path(where, "tool_calls"), j)
            call = expect(call, dict, cwhere)
            made.append(self.steps.add(
                get(call, "function_name", cwhere, str),
                parse_arguments(call.get("arguments"), path(cwhere, "arguments")),
                thought=message if j == 0 else "",
                call_id=get(call, "tool_call_id", cwhere, str, None),
                timestamp=stamp,
                metadata=meta if j == 0 else {"atif": {"step_id": atif["step_id"]}},
            ))  # fmt: skip
        if not made:
            made.append(self.steps.add(RESPOND, {"message": message}, timestamp=stamp, metadata=meta))
        self._observe(raw, where, made)
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

    def _observe(self, raw: dict, where: str, made: list[Step]) -> None:
        observation = get(raw, "observation", where, dict, None)
        if observation is None:
            return
        owhere = path(where, "observation")
        by_id = {s.tool_call.id: s for s in made if s.tool_call.id}
        unlinked = 0
        for k, result in enumerate(get(observation, "results", owhere, list)):
            rwhere = path(path(owhere, "results"), k)
            result = expect(result, dict, rwhere)
            call_id = get(result, "source_call_id", rwhere, str, None)
            if call_id is None:
                step = made[min(unlinked, len(made) - 1)]
                unlinked += 1
            elif call_id in by_id:
                step = by_id[call_id]
            else:
                raise FieldError(path(rwhere, "source_call_id"), f"{call_id!r:.60} is no tool_call_id of this step")
            self.steps.set_observation(step, text_of(result.get("content"), path(rwhere, "content")))
            refs = get(result, "subagent_trajectory_ref", rwhere, list, None)
            for r, ref in enumerate(refs or []):
                get(expect(ref, dict, path(path(rwhere, "subagent_trajectory_ref"), r)), "session_id",
                    path(path(rwhere, "subagent_trajectory_ref"), r), str)  # fmt: skip
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
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion if prompt is not None and completion is not None else None,
            cost_usd=float(cost) if cost is not None else None,
            api_calls=self.agent_steps or None,
        )


class ATIFAdapter(Adapter):
    name = "atif"
    description = "ATIF v1.x (Harbor's trajectory interchange format): {schema_version: ATIF-v1.x, session_id, steps}"
    priority = 5

    def check(self, record: Any) -> str | None:
        if not isinstance(record, dict):
            return "not a JSON object"
        version = record.get("schema_version")
        if not isinstance(version, str) or not version.startswith("ATIF-"):
            return "no schema_version 'ATIF-v1.x'"
        if not isinstance(record.get("steps"), list):
            return "no 'steps' list"
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
