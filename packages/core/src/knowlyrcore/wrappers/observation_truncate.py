"""``ObservationTruncateWrapper``: cap observation length so one huge output cannot flood the context."""

from __future__ import annotations

from knowlyrcore.env import AgentEnv, EnvWrapper
from knowlyrcore.timestep import TimeStep


class ObservationTruncateWrapper(EnvWrapper):
    """Shortens string observations longer than ``max_chars``.

    ``keep="both"`` (default) keeps the head and the tail, where errors and summaries usually
    are; ``"head"`` or ``"tail"`` keep one end. A marker says how much was cut, and
    ``info["observation_truncated"]`` holds the original length.

    Examples:
        >>> from knowlyrcore import AgentEnv, TimeStep
        >>> class Loud(AgentEnv):
        ...     def reset(self, *, task=None, seed=None): return TimeStep("x" * 100)
        ...     def step(self, action): return TimeStep("y")
        >>> ObservationTruncateWrapper(Loud(), max_chars=40, keep="head").reset().observation
        'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n... [60 characters truncated]'
    """

    def __init__(self, env: AgentEnv, max_chars: int = 10_000, *, keep: str = "both"):
        super().__init__(env)
        if not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
        if keep not in ("head", "tail", "both"):
            raise ValueError(f"keep must be 'head', 'tail' or 'both', got {keep!r}")
        self.max_chars = max_chars
        self.keep = keep

    def _truncate(self, ts: TimeStep) -> TimeStep:
        text = ts.observation
        if not isinstance(text, str) or len(text) <= self.max_chars:
            return ts
        cut = len(text) - self.max_chars
        marker = f"... [{cut} characters truncated]"
        if self.keep == "head":
            ts.observation = f"{text[: self.max_chars]}\n{marker}"
        elif self.keep == "tail":
            ts.observation = f"{marker}\n{text[cut:]}"
        else:
            head = self.max_chars // 2
            tail = self.max_chars - head
            ts.observation = f"{text[:head]}\n{marker}\n{text[len(text) - tail :]}"
        ts.info["observation_truncated"] = len(text)
        return ts

    def reset(self, *, task=None, seed=None) -> TimeStep:
        return self._truncate(self.env.reset(task=task, seed=seed))

    def step(self, action) -> TimeStep:
        return self._truncate(self.env.step(action))
