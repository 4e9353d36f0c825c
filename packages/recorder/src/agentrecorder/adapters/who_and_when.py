"""Who&When multi-agent logs (AG2 group chats labelled with the agent and step at fault).

A record is ``{question, question_ID, level, ground_truth, history: [{role, name, content}],
is_correct, mistake_agent, mistake_step, mistake_reason, system_prompt: {agent: prompt}}``.
Every message of a named agent is a step (``metadata.agent`` says who); the
``Computer_terminal`` messages are not decisions but the result of executing the previous
message's code, so they become that step's observation (``exitcode: N`` → ``exit_code``).

A message with fenced code is ``execute_code {"code_blocks": [{"language", "code"}]}`` (AG2
runs every block in order) with the prose as thought; a message without code is ``respond
{"content": ...}``. ``is_correct`` is the outcome; the human failure labels stay in metadata,
and the step at ``history[mistake_step]`` is flagged ``metadata.mistake = true`` so process
reward models can be checked against them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import RESPOND, ObjectAdapter, StepList, code_blocks, strip_blocks
from agentrecorder.fields import expect, get, path
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Outcome, Trajectory

TERMINAL = "Computer_terminal"
_EXITCODE = re.compile(r"exitcode:\s*(-?\d+)")


class WhoAndWhenAdapter(ObjectAdapter):
    name = "who-and-when"
    description = "Who&When multi-agent logs {question, history[{name, content}], mistake_agent, mistake_step}"
    priority = 10

    def check_object(self, record: dict[str, Any]) -> str | None:
        history = record.get("history")
        if not isinstance(history, list) or not all(isinstance(h, dict) and "name" in h for h in history):
            return "no 'history' list of {name, content} messages"
        if "question" not in record and "mistake_agent" not in record:
            return "no 'question' or 'mistake_agent'"
        return None

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        record = expect(record, dict, "$")
        history = get(record, "history", "$", list)
        mistake_step = record.get("mistake_step")
        mistake_index = int(mistake_step) if str(mistake_step).strip().lstrip("-").isdigit() else None
        steps = StepList()
        agents: list[str] = []
        for i, message in enumerate(history):
            where = path("$.history", i)
            message = expect(message, dict, where)
            name = get(message, "name", where, str)
            content = get(message, "content", where, str, "")
            if name == TERMINAL and steps.last is not None:
                code = _EXITCODE.search(content)
                steps.set_observation(steps.last, content, exit_code=int(code.group(1)) if code else None)
                continue
            if name not in agents:
                agents.append(name)
            meta: dict[str, Any] = {"agent": name, "history_index": i, "role": message.get("role")}
            if i == mistake_index:
                meta["mistake"] = True
            blocks = [b for b in code_blocks(content) if b[1].strip()]
            if blocks:
                steps.add(
                    "execute_code",
                    {"code_blocks": [{"language": lang or "python", "code": code} for lang, code, *_ in blocks]},
                    thought=strip_blocks(content, blocks),
                    metadata=meta,
                )
            else:
                steps.add(RESPOND, {"message": content}, metadata=meta)
        correct = get(record, "is_correct", "$", bool, None)
        question_id = str(record.get("question_ID", ""))
        labels = {k: record[k] for k in ("mistake_agent", "mistake_step", "mistake_reason") if k in record}
        metadata: dict[str, Any] = {"format": "who-and-when", "agents": agents, **labels}
        if isinstance(record.get("system_prompt"), dict):
            metadata["system_prompts"] = record["system_prompt"]
        return_meta = {k: record[k] for k in ("ground_truth", "level") if k in record}
        yield Trajectory(
            id=question_id,
            task=TaskInfo(id=question_id, description=get(record, "question", "$", str, ""), metadata=return_meta),
            agent="ag2-groupchat",
            steps=steps.steps,
            outcome=Outcome(success=correct, score=None if correct is None else float(correct)),
            source=source,
            metadata=metadata,
        )
