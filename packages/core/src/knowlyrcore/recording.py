"""``TrajectoryBuilder``: assemble a ``Trajectory`` step by step while an episode runs.

``RecorderWrapper`` uses it for environments; a live agent outside any environment (or the
recorder package's ``Recorder``) can use it directly, so both produce the same schema.

Examples:
    >>> b = TrajectoryBuilder(task="say hi", agent="doc")
    >>> _ = b.add_step({"tool": "respond", "params": {"message": "hi"}, "thought": "greet"}, "sent")
    >>> b.finish(success=True).steps[0].thought
    'greet'
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from typing_extensions import TypedDict, Unpack

from knowlyrcore.actions import parse_action
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Observation, Outcome, Step, TestSummary, ToolCall, Trajectory, Usage


def observation_text(observation: Any) -> str:
    """The text form of an observation: strings as they are, anything else as JSON."""
    if isinstance(observation, str):
        return observation
    try:
        return json.dumps(observation, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(observation)


class StepFields(TypedDict, total=False):
    """What a recorded step may carry besides its tool call and output (all optional)."""

    thought: str
    exit_code: int | None
    error: str | None
    reward: float | None
    call_id: str | None
    timestamp: float | None
    duration_s: float | None  # a negative duration (clock skew in a log) is dropped
    metadata: dict[str, Any] | None


def make_step(
    index: int, tool: str, parameters: dict[str, Any] | None = None, output: str = "", **fields: Unpack[StepFields]
) -> Step:
    """The ``Step`` numbered ``index``: every recorder of steps builds them here."""
    duration = fields.get("duration_s")
    return Step(
        index=index,
        thought=fields.get("thought") or "",
        tool_call=ToolCall(name=tool or "unknown", parameters=dict(parameters or {}), id=fields.get("call_id")),
        observation=Observation(output=output or "", exit_code=fields.get("exit_code"), error=fields.get("error")),
        reward=fields.get("reward"),
        timestamp=fields.get("timestamp"),
        duration_s=duration if duration is None or duration >= 0 else None,
        metadata=dict(fields.get("metadata") or {}),
    )


class TrajectoryBuilder:
    """Collects steps of one episode and produces a validated ``Trajectory``."""

    def __init__(
        self,
        task: TaskInfo | dict | str | None = None,
        *,
        agent: str = "",
        model: str = "",
        source: str | None = None,
        metadata: dict[str, Any] | None = None,
    ):
        self.task = TaskInfo.coerce(task)
        self.agent = agent
        self.model = model
        self.source = source
        self.metadata = dict(metadata or {})
        self.id = uuid.uuid4().hex
        self.steps: list[Step] = []
        self.started_at = time.time()

    def add_step(self, action: Any, observation: Any = "", **fields: Unpack[StepFields]) -> Step:
        """Append one step; ``action`` is a ``{"tool", "params"[, "thought", "id"]}`` dict."""
        tool, params = parse_action(action)
        action = action if isinstance(action, dict) else {}
        if fields.get("thought") is None:
            fields["thought"] = str(action.get("thought") or "")
        fields.setdefault("call_id", action.get("id"))
        if action.get("format_error"):  # the parser's verdict on a malformed call
            fields["metadata"] = {"format_error": action["format_error"], **(fields.get("metadata") or {})}
        step = make_step(len(self.steps), tool, params, observation_text(observation), **fields)
        self.steps.append(step)
        return step

    def finish(
        self,
        *,
        success: bool | None = None,
        score: float | None = None,
        tests: TestSummary | dict | None = None,
        exit_status: str | None = None,
        patch: str | None = None,
        terminated: bool = False,
        truncated: bool = False,
        reward: float | None = None,
        usage: Usage | dict | None = None,
    ) -> Trajectory:
        """Return the finished trajectory (the builder can keep adding and finish again)."""
        return Trajectory(
            id=self.id,
            task=self.task,
            agent=self.agent,
            model=self.model,
            steps=list(self.steps),
            outcome=Outcome(
                success=success,
                score=score,
                tests=TestSummary.model_validate(tests) if isinstance(tests, dict) else tests,
                exit_status=exit_status,
                patch=patch,
                terminated=terminated,
                truncated=truncated,
            ),
            reward=reward,
            usage=Usage.model_validate(usage) if isinstance(usage, dict) else usage,
            source=self.source,
            metadata={"started_at": self.started_at, **self.metadata},
        )
