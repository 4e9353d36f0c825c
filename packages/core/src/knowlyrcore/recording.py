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

    def add_step(
        self,
        action: Any,
        observation: Any = "",
        *,
        exit_code: int | None = None,
        error: str | None = None,
        reward: float | None = None,
        timestamp: float | None = None,
        duration_s: float | None = None,
        thought: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Step:
        """Append one step; ``action`` is a ``{"tool", "params"[, "thought"]}`` dict."""
        tool, params = parse_action(action)
        metadata = dict(metadata or {})
        if isinstance(action, dict) and action.get("format_error"):  # the parser's verdict on a malformed call
            metadata.setdefault("format_error", action["format_error"])
        step = Step(
            index=len(self.steps),
            thought=thought if thought is not None else str(action.get("thought") or ""),
            tool_call=ToolCall(name=tool, parameters=params, id=action.get("id")),
            observation=Observation(output=observation_text(observation), exit_code=exit_code, error=error),
            reward=reward,
            timestamp=timestamp,
            duration_s=duration_s,
            metadata=metadata,
        )
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
