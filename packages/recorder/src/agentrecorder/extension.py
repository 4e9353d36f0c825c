"""The ``knowlyr`` block: what a standard has no field for, kept in its extension fields.

ATIF has ``extra`` objects (root and step) and ADP a free ``details`` object for exactly this.
The writers (``agentrecorder.interop``) put there, under the key ``knowlyr``, the parts of a
trajectory the standard cannot say (task id and domain, outcome, rewards, exit codes, the
trajectory's own metadata, ...); the readers (``adapters.atif``, ``adapters.adp``) put them
back, so knowlyr → ATIF/ADP → knowlyr loses nothing, while other tools reading the file see a
plain ATIF/ADP document.

Example:
    >>> from knowlyrcore.trajectory import Step, ToolCall, Observation
    >>> step = Step(index=0, tool_call=ToolCall(name="bash"), observation=Observation(exit_code=1), reward=0.5)
    >>> step_block(step, carried=())["observation"]
    {'exit_code': 1}
    >>> restore_step(Step(index=0, tool_call=ToolCall(name="bash")), step_block(step, carried=()), "$") == step
    True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentrecorder.fields import expect, path
from knowlyrcore.trajectory import Step, Trajectory

KEY = "knowlyr"
#: trajectory fields every writer carries in the standard's own fields (the rest go in the block)
_TRAJECTORY_CARRIED = ("schema_version", "steps", "agent", "model", "task.description")


def _strip(data: dict[str, Any], carried: Iterable[str]) -> dict[str, Any]:
    for dotted in carried:
        head, _, tail = dotted.partition(".")
        if tail and isinstance(data.get(head), dict):
            data[head] = _strip(data[head], [tail])
            if not data[head]:
                del data[head]
        elif not tail:
            data.pop(head, None)
    return data


def _own_metadata(data: dict[str, Any], metadata: dict[str, Any], carried: Iterable[str]) -> dict[str, Any]:
    """``data`` whose ``metadata`` is ``metadata`` less the keys a writer maps onto standard
    fields (left out when nothing remains)."""
    carried = set(carried)
    data.pop("metadata", None)
    kept = {k: v for k, v in metadata.items() if k not in carried}
    if kept:
        data["metadata"] = kept
    return data


def step_block(step: Step, carried: Iterable[str], metadata_carried: Iterable[str] = ()) -> dict[str, Any]:
    """The fields of ``step`` that differ from their default and that the standard does not carry
    (``carried``: dotted field names such as ``observation.output``; ``metadata_carried``: the
    metadata keys the writer maps onto standard fields)."""
    data = step.model_dump(mode="json", exclude_defaults=True)
    return _own_metadata(_strip(data, ["index", *carried]), step.metadata, metadata_carried)


def restore_step(step: Step, block: Any, where: str) -> Step:
    """``step`` with the fields of a ``step_block`` (found at JSON path ``where``) put back,
    validated like any step."""
    if not block:
        return step
    block = expect(block, dict, where)
    expect(block.get("metadata", {}), dict, path(where, "metadata"))
    data = step.model_dump()
    for key, value in block.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and key != "metadata":
            data[key] = {**data[key], **value}
        elif key == "metadata":
            data["metadata"] = {**value, **data["metadata"]}
        else:
            data[key] = value
    return Step.model_validate(data)


def trajectory_block(trajectory: Trajectory, metadata_carried: Iterable[str] = ()) -> dict[str, Any]:
    """Every trajectory field except the steps, agent and model (which every standard carries);
    restored, each replaces what the reader made of the standard's own fields."""
    data = trajectory.model_dump(mode="json", exclude_defaults=True)
    data = _own_metadata(_strip(data, _TRAJECTORY_CARRIED), trajectory.metadata, metadata_carried)
    data["id"] = trajectory.id
    data.setdefault("task", {})
    data.setdefault("outcome", {})  # what the reader made of the standard's fields is replaced
    data.setdefault("usage", None)
    return data


def restore_trajectory(fields: dict[str, Any], block: Any, where: str) -> dict[str, Any]:
    """``Trajectory`` keyword arguments with a ``trajectory_block`` (at JSON path ``where``) put
    back over those read."""
    if not block:
        return fields
    block = expect(block, dict, where)
    expect(block.get("metadata", {}), dict, path(where, "metadata"))
    restored = {**fields, **{k: v for k, v in block.items() if k != "metadata"}}
    restored["metadata"] = {**block.get("metadata", {}), **fields.get("metadata", {})}
    if isinstance(block.get("task"), dict):  # the description is the standard's (the first user message)
        restored["task"] = {**block["task"], "description": fields["task"].description}
    return restored
