"""``TaskInfo`` (what an episode is about) and ``ToolResult`` (what a tool returned)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from knowlyrcore.jsonl import finite_json


class TaskInfo(BaseModel):
    """A task given to an environment's ``reset``.

    Only ``description`` matters to every environment; the repository fields are read by code
    execution environments, ``metadata`` carries anything domain specific (a knowledge base,
    records for data-backed tools, the expected answer).

    Examples:
        >>> TaskInfo.coerce("fix the failing test").description
        'fix the failing test'
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str = ""
    description: str = ""
    domain: str = "generic"
    repo: str | None = Field(default=None, description="Local directory, archive or URL of the repository.")
    base_commit: str | None = None
    setup_commands: list[str] = Field(default_factory=list)
    test_command: str | None = None
    max_steps: int | None = Field(default=None, ge=1)
    metadata: dict[str, Any] = Field(default_factory=dict)

    _finite_metadata = field_validator("metadata")(finite_json)

    @classmethod
    def coerce(cls, task: TaskInfo | dict | str | None) -> TaskInfo:
        """Accept the forms users pass to ``reset(task=...)``: a model, a dict, a string."""
        if task is None:
            return cls()
        if isinstance(task, cls):
            return task
        if isinstance(task, str):
            return cls(description=task)
        if isinstance(task, dict):
            known = {k: v for k, v in task.items() if k in cls.model_fields}
            extra = {k: v for k, v in task.items() if k not in cls.model_fields}
            if "task_id" in extra and "id" not in known:
                known["id"] = str(extra.pop("task_id"))
            if extra:
                known["metadata"] = {**extra, **known.get("metadata", {})}
            return cls.model_validate(known)
        raise TypeError(f"a task is a TaskInfo, dict or str, got {type(task).__name__}")


class ToolResult(BaseModel):
    """The result of executing one tool call.

    ``output`` is what the agent sees; ``exit_code`` is set for commands; ``error`` holds a
    short explanation when the call failed (bad parameters, timeout, denied).

    Examples:
        >>> ToolResult(output="hi", exit_code=0).success
        True
    """

    model_config = ConfigDict(extra="forbid")

    output: str = ""
    exit_code: int | None = None
    error: str | None = None
    truncated: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def success(self) -> bool:
        """No error and, for commands, exit code 0."""
        return self.error is None and (self.exit_code is None or self.exit_code == 0)

    def to_observation(self) -> str:
        """Render as the text an agent reads: the output, then the error if any."""
        if self.error:
            return f"{self.output}\n[error] {self.error}" if self.output else f"[error] {self.error}"
        return self.output
