"""Write knowlyr trajectories in the ecosystem's standards: ATIF documents and ADP rows.

``to_atif(trajectory)`` and ``to_adp(trajectory)`` return plain dicts; ``export_file`` turns
logs, data sets or trajectory JSONL into a file of them (``knowlyr-recorder export``). What a
standard has no field for (task id and domain, outcome, rewards, exit codes, the
trajectory's metadata) goes into its extension field under ``knowlyr``
(``agentrecorder.extension``), so reading the file back with the ``atif`` / ``adp`` adapter
gives the same trajectory: token ids and log-probs of online RL rollouts included.

ATIF: the system prompt and the task are the first ``system`` and ``user`` steps; each knowlyr
step is an ``agent`` step (thought → ``message``, the call → ``tool_calls``, the output →
``observation.results`` with ``source_call_id``, ``token_ids`` / ``logprobs`` →
``metrics.completion_token_ids`` / ``logprobs``), except that steps read from one ATIF step
(several tool calls of one turn) are written as one again, between the context steps they
came with; a ``respond {"message"}`` step is an agent step with that message and no tool call.
Root and step fields a read document had that this writer does not know (``metadata.atif``)
are written back where they were; a message that was a chat message object is written as its
text, which is what ATIF allows.
ADP: the task is the first ``text_observation``, a ``bash {"command"}`` step a ``code_action``,
a reply a ``message_action``, any other call an ``api_action``, each output a
``text_observation``.

Example:
    >>> from knowlyrcore.trajectory import Trajectory, Step, ToolCall, Observation
    >>> from knowlyrcore.models import TaskInfo
    >>> t = Trajectory(id="t1", task=TaskInfo(description="list files"), agent="demo",
    ...                steps=[Step(index=0, tool_call=ToolCall(name="bash", parameters={"command": "ls"}, id="c1"),
    ...                            observation=Observation(output="a.py"), token_ids=[5, 6], logprobs=[-0.1, -0.2])])
    >>> doc = to_atif(t)
    >>> [s["source"] for s in doc["steps"]], doc["steps"][1]["metrics"]["completion_token_ids"]
    (['user', 'agent'], [5, 6])
    >>> [item["class_"] for item in to_adp(t)["content"]]
    ['text_observation', 'code_action', 'text_observation']
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentrecorder.adapters.base import RESPOND, iso_timestamp
from agentrecorder.atif_validation import content_parts_problem
from agentrecorder.errors import ConversionError
from agentrecorder.extension import KEY, step_block, trajectory_block
from knowlyrcore.trajectory import Step, Trajectory

ATIF_VERSION = "ATIF-v1.5"
#: step metadata the ATIF writer maps onto ATIF fields
_ATIF_STEP_METADATA = ("atif", "reasoning_content", "subagent_trajectory_ref")
#: trajectory metadata the ATIF writer maps onto ATIF fields (``format`` is the reader's to set)
_ATIF_METADATA = ("format", "atif", "system_prompt", "tools", "continued_trajectory_ref")
_ATIF_AGENT_FIELDS = ("step_id", "model_name", "reasoning_effort", "metrics", "extra")
#: keys of trajectory ``metadata.atif`` the ATIF writer maps onto ATIF fields (the rest are root fields it came with)
_ATIF_ROOT_METADATA = ("schema_version", "agent", "notes", "final_metrics", "extra", "context_steps")
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat().replace("+00:00", "Z")


def _atif_meta(step: Step) -> dict[str, Any]:
    meta = step.metadata.get("atif")
    return meta if isinstance(meta, dict) else {}


def _turns(steps: list[Step]) -> Iterator[list[Step]]:
    """Consecutive steps read from one ATIF step (same ``metadata.atif.step_id``), else one each."""
    turn: list[Step] = []
    for step in steps:
        step_id = _atif_meta(step).get("step_id")
        if turn and (step_id is None or step_id != _atif_meta(turn[0]).get("step_id") or _is_reply(step)):
            yield turn
            turn = []
        turn.append(step)
    if turn:
        yield turn


def _is_reply(step: Step) -> bool:
    """A ``respond {"message": text}`` step: an agent message without a tool call."""
    params = step.tool_call.parameters
    return step.tool_call.name == RESPOND and list(params) == ["message"] and isinstance(params["message"], str)


def _agent_step(turn: list[Step]) -> dict[str, Any]:
    first = turn[0]
    meta = _atif_meta(first)
    reply = len(turn) == 1 and _is_reply(first)
    out: dict[str, Any] = {"step_id": 0, "source": "agent"}
    if first.timestamp is not None:
        out["timestamp"] = _iso(first.timestamp)
    out.update({k: meta[k] for k in ("model_name", "reasoning_effort") if k in meta})
    out["message"] = first.tool_call.parameters["message"] if reply else first.thought
    if isinstance(first.metadata.get("reasoning_content"), str):
        out["reasoning_content"] = first.metadata["reasoning_content"]
    call_ids = [s.tool_call.id or f"call_{s.index}" for s in turn]
    if not reply:
        out["tool_calls"] = [
            {"tool_call_id": call_id, "function_name": s.tool_call.name, "arguments": s.tool_call.parameters}
            for call_id, s in zip(call_ids, turn)
        ]
    results = []
    for call_id, step in zip(call_ids, turn):
        refs = step.metadata.get("subagent_trajectory_ref")
        if step.observation.output or refs:
            result: dict[str, Any] = {} if reply else {"source_call_id": call_id}
            result["content"] = step.observation.output
            if refs:
                result["subagent_trajectory_ref"] = refs
            results.append(result)
    if results:
        out["observation"] = {"results": results}
    metrics = dict(meta.get("metrics") or {})
    if first.token_ids is not None:
        metrics["completion_token_ids"] = first.token_ids
    if first.logprobs is not None:
        metrics["logprobs"] = first.logprobs
    if metrics:
        out["metrics"] = metrics
    out.update({k: v for k, v in meta.items() if k not in _ATIF_AGENT_FIELDS})  # newer 1.x fields it came with
    extra = dict(meta.get("extra") or {})
    blocks = [_atif_step_block(step, k, reply, first) for k, step in enumerate(turn)]
    if any(blocks):
        extra[KEY] = {"steps": blocks}
    if extra:
        out["extra"] = extra
    return out


def _atif_step_block(step: Step, position: int, reply: bool, first: Step) -> dict[str, Any]:
    carried = ["tool_call.name", "tool_call.parameters", "observation.output"]
    if not reply:
        carried.append("tool_call.id")
    if position == 0:
        carried += ["token_ids", "logprobs"] if reply else ["thought", "token_ids", "logprobs"]
    if step.timestamp == first.timestamp and (
        step.timestamp is None or iso_timestamp(_iso(step.timestamp)) == step.timestamp
    ):
        carried.append("timestamp")  # else the exact float goes in the block
    block = step_block(step, carried, _ATIF_STEP_METADATA)
    if not reply and step.tool_call.id is None:  # the writer named the call; reading back un-names it
        block["tool_call"] = {"id": None}
    return block


def to_atif(trajectory: Trajectory) -> dict[str, Any]:
    """``trajectory`` as an ATIF document (a dict; ``validate_atif`` finds nothing wrong with it)."""
    meta = trajectory.metadata.get("atif") if isinstance(trajectory.metadata.get("atif"), dict) else {}
    steps: list[dict[str, Any]] = []
    if isinstance(trajectory.metadata.get("system_prompt"), str):
        steps.append({"step_id": 0, "source": "system", "message": trajectory.metadata["system_prompt"]})
    if trajectory.task.description:
        steps.append({"step_id": 0, "source": "user", "message": trajectory.task.description})
    context = [_context_step(s) for s in meta.get("context_steps") or [] if isinstance(s, dict)]
    for turn in _turns(trajectory.steps):
        step_id = _atif_meta(turn[0]).get("step_id")
        while context and isinstance(step_id, int) and _before(context[0], step_id):
            steps.append(context.pop(0))
        steps.append(_agent_step(turn))
    steps.extend(context)
    agent: dict[str, Any] = {"name": trajectory.agent or "unknown", "version": "unknown"}
    agent.update(meta.get("agent") or {})
    if trajectory.model:
        agent["model_name"] = trajectory.model
    if isinstance(trajectory.metadata.get("tools"), list):
        agent["tool_definitions"] = trajectory.metadata["tools"]
    version = meta.get("schema_version")
    doc: dict[str, Any] = {
        "schema_version": version if isinstance(version, str) and version.startswith("ATIF-v1.") else ATIF_VERSION,
        "session_id": trajectory.id or trajectory.task.id or "unnamed",
        "agent": agent,
        "steps": [{**s, "step_id": n} for n, s in enumerate(steps, start=1)],
    }
    doc.update({k: meta[k] for k in ("notes", "final_metrics") if k in meta})
    doc.update({k: v for k, v in meta.items() if k not in _ATIF_ROOT_METADATA and k not in doc})  # newer 1.x fields
    if "final_metrics" not in doc and trajectory.usage is not None:
        doc["final_metrics"] = _final_metrics(trajectory)
    if isinstance(trajectory.metadata.get("continued_trajectory_ref"), str):
        doc["continued_trajectory_ref"] = trajectory.metadata["continued_trajectory_ref"]
    block = trajectory_block(trajectory, _ATIF_METADATA)
    if not trajectory.agent:
        block["agent"] = ""
    doc["extra"] = {**(meta.get("extra") or {}), KEY: block}
    return doc


def _context_step(step: dict) -> dict:
    """A later system or user step as it was read, its message as text when it was neither a
    string nor ATIF content parts (the shape is kept in the trajectory's metadata)."""
    message = step.get("message")
    if isinstance(message, str) or content_parts_problem(message) is None:
        return dict(step)
    from agentrecorder.adapters.atif import message_text  # adapters load on use (see registry)

    return {**step, "message": message_text(message)}


def _before(context_step: dict, step_id: int) -> bool:
    position = context_step.get("step_id")
    return isinstance(position, int) and position < step_id


def _final_metrics(trajectory: Trajectory) -> dict[str, Any]:
    usage = trajectory.usage
    totals = {
        "total_prompt_tokens": usage.prompt_tokens,
        "total_completion_tokens": usage.completion_tokens,
        "total_cost_usd": usage.cost_usd,
    }
    return {k: v for k, v in totals.items() if v is not None}


def to_adp(trajectory: Trajectory) -> dict[str, Any]:
    """``trajectory`` as an ADP standardized row ``{id, content, details}``."""
    from agentrecorder.adapters.adp import DEFAULT_SOURCE  # adapters load on use (see registry)

    content: list[dict[str, Any]] = []
    if trajectory.task.description:
        content.append(_text_observation(trajectory.task.description, "user", None))
    blocks: dict[str, Any] = {}
    for step in trajectory.steps:
        content.append(_adp_action(step))
        if step.observation.output:
            default = DEFAULT_SOURCE.get(step.tool_call.name, "environment")
            observed_from = step.metadata.get("observation_source", default)
            content.append(
                _text_observation(step.observation.output, observed_from, step.metadata.get("observation_name"))
            )
        carried = ("thought", "tool_call.name", "tool_call.parameters", "observation.output")
        block = step_block(step, carried, ("observation_source", "observation_name"))
        if block:
            blocks[str(step.index)] = block
    details: dict[str, Any] = {}
    if trajectory.model:
        details["model_name"] = trajectory.model
    block = trajectory_block(trajectory, ("format",))
    block["agent"] = trajectory.agent
    if blocks:
        block["steps"] = blocks
    details[KEY] = block
    return {"id": trajectory.id or trajectory.task.id, "content": content, "details": details}


def _text_observation(text: str, source: Any, name: Any) -> dict[str, Any]:
    return {"class_": "text_observation", "content": text, "name": name, "source": source}


def _adp_action(step: Step) -> dict[str, Any]:
    name, params = step.tool_call.name, step.tool_call.parameters
    if _is_reply(step):
        return {"class_": "message_action", "content": params["message"], "description": step.thought}
    if name == "bash" and list(params) == ["command"] and isinstance(params["command"], str):
        return {"class_": "code_action", "language": "bash", "content": params["command"], "description": step.thought}
    blocks = params.get("code_blocks") if name == "execute_code" and list(params) == ["code_blocks"] else None
    if (
        isinstance(blocks, list)
        and len(blocks) == 1
        and isinstance(blocks[0], dict)
        and set(blocks[0]) == {"language", "code"}
    ):
        code = blocks[0]
        if (
            isinstance(code["language"], str)
            and isinstance(code["code"], str)
            and code["language"].lower() not in ("bash", "sh", "shell", "zsh")
        ):
            return {
                "class_": "code_action",
                "language": code["language"],
                "content": code["code"],
                "description": step.thought,
            }
    return {"class_": "api_action", "function": name, "kwargs": params, "description": step.thought}


WRITERS: dict[str, Callable[[Trajectory], dict[str, Any]]] = {"atif": to_atif, "adp": to_adp}


def export_file(
    inputs: Sequence[str | os.PathLike],
    output: str | os.PathLike,
    to: str,
    fmt: str = "auto",
    *,
    progress: bool | None = None,
) -> int:
    """Convert ``inputs`` (logs, data sets or trajectory JSONL) into ``to`` documents at ``output``.

    ``.jsonl`` output is streamed, one document per line, so a data set of any size converts
    in the memory of one row; any other suffix is one JSON document (an ATIF trajectory when
    there is exactly one, else an array). The write is atomic: on a bad input nothing is
    written and an existing ``output`` is left as it was. ``progress``: a progress bar on
    stderr (``None``: when stderr is a terminal). Returns the number of documents written.
    """
    from tqdm.auto import tqdm

    from agentrecorder.convert import expand_inputs, load_trajectories
    from knowlyrcore.jsonl import write_bytes_atomic, write_jsonl

    if to not in WRITERS:
        raise ConversionError(str(output), None, f"unknown target {to!r}; known: {', '.join(WRITERS)}")
    out = Path(output)
    if out.is_dir():
        raise ConversionError(str(output), None, "output is a directory; name a .json or .jsonl file")
    files = expand_inputs(inputs)  # every input is named before anything is read

    def documents() -> Iterable[dict[str, Any]]:
        for path in files:
            for trajectory in load_trajectories(path, fmt):
                yield WRITERS[to](trajectory)

    with tqdm(
        documents(), desc=f"export {to}", unit=" trajectories", disable=None if progress is None else not progress
    ) as bar:
        if out.suffix.lower() in JSONL_SUFFIXES:
            return write_jsonl(out, bar)
        docs = list(bar)
    payload = docs[0] if to == "atif" and len(docs) == 1 else docs
    write_bytes_atomic(out, (json.dumps(payload, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))
    return len(docs)
