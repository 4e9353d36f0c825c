"""nebius/SWE-agent-trajectories rows: SWE-agent text-action runs flattened into role/text turns.

A row is ``{instance_id, model_name, target, exit_status, generated_patch, eval_logs,
trajectory: [{role, text, mask, system_prompt, cutoff_date}]}``. The ``system`` turn carries
the system prompt (its ``text`` is empty) and ``cutoff_date``; the first ``user`` turn is the
issue (the task); each ``ai`` turn is SWE-agent's prose followed by one fenced command, a step
read as SWE-agent's text actions are (``open x.py`` → ``open {"path": "x.py"}``, ``edit 5:5``
→ ``edit {start_line, end_line, replacement}``, other commands → ``bash {"command"}``); the
next ``user`` turn is that step's observation. An ``ai`` turn without a fenced block is a
``no_action`` step with the format error in its metadata. ``mask`` (whether the turn is
trained on) is kept in a step's metadata only where it is ``false``.

``target`` (the generated patch passed the linked tests) is ``outcome.success``;
``exit_status``, ``generated_patch`` and the pytest counts of ``eval_logs`` fill the rest of
the outcome (``agentrecorder.outcomes``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import ObjectAdapter, StepList, code_blocks, strip_blocks
from agentrecorder.adapters.swe_agent import parse_text_action
from agentrecorder.errors import FieldError
from agentrecorder.fields import expect, get, path
from agentrecorder.outcomes import OUTCOME_KEYS, swe_outcome
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Trajectory

ROLES = ("system", "user", "ai")


def _is_turns(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, dict) and "role" in t and "text" in t for t in value)
    )


class NebiusAdapter(ObjectAdapter):
    name = "nebius"
    description = (
        "nebius/SWE-agent-trajectories rows {instance_id, target, exit_status, trajectory[{role, text, mask}]}"
    )
    priority = 15
    not_an_object = "not a JSON object (a data set's rows are read one by one)"

    def check_object(self, record: dict[str, Any]) -> str | None:
        if not _is_turns(record.get("trajectory")):
            return "no 'trajectory' list of {role, text} turns"
        if not any(k in record for k in ("instance_id", "target", "exit_status")):
            return "no 'instance_id', 'target' or 'exit_status'"
        return None

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        record = expect(record, dict, "$")
        turns = get(record, "trajectory", "$", list)
        steps = StepList()
        task, metadata = "", {"format": "nebius"}
        for i, turn in enumerate(turns):
            where = path("$.trajectory", i)
            turn = expect(turn, dict, where)
            role = get(turn, "role", where, str)
            text = get(turn, "text", where, str, "")
            if role == "system":
                metadata["system_prompt"] = get(turn, "system_prompt", where, str, "") or text
                if turn.get("cutoff_date") is not None:
                    metadata["cutoff_date"] = get(turn, "cutoff_date", where, str)
            elif role == "user" and not task and not len(steps):
                task = text
            elif role == "user":
                if steps.last is not None:
                    steps.set_observation(steps.last, text)
            elif role == "ai":
                self._step(steps, text, get(turn, "mask", where, bool, True))
            else:
                raise FieldError(path(where, "role"), f"expected one of {', '.join(ROLES)}, got {role!r:.40}")
        outcome, rest = swe_outcome(record, "$")
        instance_id = get(record, "instance_id", "$", str, "")
        if rest:
            metadata["test_result"] = rest
        metadata.update(
            {k: v for k, v in record.items() if k not in (*OUTCOME_KEYS, "trajectory", "instance_id", "model_name")}
        )
        yield Trajectory(
            id=instance_id,
            task=TaskInfo(id=instance_id, description=task, domain="coding"),
            agent="swe-agent",
            model=get(record, "model_name", "$", str, ""),
            steps=steps.steps,
            outcome=outcome,
            source=source,
            metadata=metadata,
        )

    def _step(self, steps: StepList, text: str, mask: bool) -> None:
        meta: dict[str, Any] = {} if mask else {"mask": False}
        blocks = code_blocks(text)
        if not blocks:
            steps.add("no_action", {}, thought=text.strip(), metadata={**meta, "format_error": "no fenced command"})
            return
        command = blocks[-1]  # SWE-agent runs the last fenced block; earlier ones are prose
        tool, params = parse_text_action(command[1])
        steps.add(tool, params, thought=strip_blocks(text, [command]), metadata={**meta, "action": command[1]})
