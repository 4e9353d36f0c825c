"""``TimeStep``: what an environment returns from ``reset`` and ``step``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

ObsT = TypeVar("ObsT")


@dataclass
class TimeStep(Generic[ObsT]):
    """One transition's result, as in Gymnasium's ``(obs, reward, terminated, truncated, info)``.

    ``terminated`` means the task reached a terminal state (the agent submitted, the dialog
    ended); ``truncated`` means the episode was cut short from outside (step or time limit).

    Examples:
        >>> ts = TimeStep(observation="ok", reward=1.0, terminated=True)
        >>> ts.done
        True
    """

    observation: ObsT = ""  # type: ignore[assignment]
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        """True when the episode is over for either reason."""
        return self.terminated or self.truncated
