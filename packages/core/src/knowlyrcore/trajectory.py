"""The trajectory schema: the record every package reads and writes.

A trajectory is one episode: the task, who acted (agent, model), the ordered steps (thought,
tool call, observation, optional reward and timing, optional token ids and log-probs), the
outcome and free metadata. A *scored* trajectory is the same record with per-step
``reward`` / ``rubric_scores`` and the total ``reward`` filled in by a reward model.

Records carry ``schema_version``; readers accept any ``1.x`` and reject other majors with a
clear error. Every model forbids unknown fields, so a typo is an error rather than silently
dropped data: what does not fit the schema belongs in a ``metadata`` dict.

Examples:
    >>> t = Trajectory(task=TaskInfo(id="t1", description="say hi"), agent="demo",
    ...                steps=[Step(index=0, tool_call=ToolCall(name="respond", parameters={"text": "hi"}),
    ...                            observation=Observation(output="sent"))],
    ...                outcome=Outcome(success=True, score=1.0))
    >>> Trajectory.model_validate_json(t.model_dump_json()) == t
    True
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from knowlyrcore.jsonl import SCHEMA_VERSION, finite_json, schema_version_problem
from knowlyrcore.models import TaskInfo


def _check_version(value: Any) -> str:
    problem = schema_version_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a reward or score is a finite number


class ToolCall(_Record):
    """The action of a step: a tool name and its parsed parameters."""

    name: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)
    id: str | None = Field(default=None, description="The framework's tool-call id, when it had one.")

    _finite_parameters = field_validator("parameters")(finite_json)


class Observation(_Record):
    """What the environment returned for a step's tool call."""

    output: str = ""
    exit_code: int | None = None
    error: str | None = None


class Step(_Record):
    """One decision of the agent and its consequence."""

    index: int = Field(ge=0, description="0-based position in the trajectory.")
    thought: str = ""
    tool_call: ToolCall
    observation: Observation = Field(default_factory=Observation)
    reward: float | None = Field(default=None, description="Process reward of this step, if scored.")
    rubric_scores: dict[str, float] = Field(default_factory=dict, description="Per-rubric scores behind `reward`.")
    timestamp: float | None = Field(default=None, description="Unix time when the step started.")
    duration_s: float | None = Field(default=None, ge=0)
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("reward")
    @classmethod
    def _finite_reward(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("reward must be a finite number")
        return v

    _finite_metadata = field_validator("metadata")(finite_json)

    @model_validator(mode="after")
    def _aligned_logprobs(self) -> Step:
        if self.token_ids is not None and self.logprobs is not None and len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"token_ids ({len(self.token_ids)}) and logprobs ({len(self.logprobs)}) must have the same length"
            )
        return self


class TestSummary(_Record):
    """Counts from the task's test command, when one ran."""

    __test__ = False  # not a pytest test class despite the name

    passed: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    errors: int = Field(default=0, ge=0)
    output: str = ""


class Outcome(_Record):
    """How the episode ended."""

    success: bool | None = Field(default=None, description="None when nobody judged it.")
    score: float | None = Field(default=None, description="Task score in [0, 1] when the task defines one.")
    tests: TestSummary | None = None
    exit_status: str | None = Field(default=None, description="Why the episode ended: submitted, max_steps, error...")
    patch: str | None = Field(default=None, description="The diff the agent produced, for code tasks.")
    terminated: bool = False
    truncated: bool = False


class Usage(_Record):
    """Tokens and money the agent's model spent on the episode."""

    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    api_calls: int | None = Field(default=None, ge=0)


class Trajectory(_Record):
    """One recorded episode; the unit of every trajectory JSONL file."""

    schema_version: str = SCHEMA_VERSION
    id: str = ""
    task: TaskInfo = Field(default_factory=TaskInfo)
    agent: str = ""
    model: str = ""
    steps: list[Step] = Field(default_factory=list)
    outcome: Outcome = Field(default_factory=Outcome)
    reward: float | None = Field(default=None, description="Total process-reward score, once scored.")
    usage: Usage | None = None
    source: str | None = Field(default=None, description="Where it came from: 'env:<id>' or '<format>:<file>'.")
    metadata: dict[str, Any] = Field(default_factory=dict)

    _version = field_validator("schema_version")(_check_version)
    _finite_metadata = field_validator("metadata")(finite_json)

    @model_validator(mode="after")
    def _indices_in_order(self) -> Trajectory:
        for position, step in enumerate(self.steps):
            if step.index != position:
                raise ValueError(
                    f"steps[{position}].index is {step.index}, expected {position} (steps must be in order)"
                )
        return self

    @property
    def tool_names(self) -> list[str]:
        """The tool of every step, in order."""
        return [s.tool_call.name for s in self.steps]

    @property
    def step_rewards(self) -> list[float | None]:
        return [s.reward for s in self.steps]
