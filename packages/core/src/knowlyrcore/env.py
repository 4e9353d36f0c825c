"""``AgentEnv``, the environment protocol, and ``EnvWrapper``, the base of every wrapper.

The protocol follows Gymnasium (``reset``/``step``/``close``, terminated vs truncated) with
the two changes an LLM agent needs: actions are structured tool calls and observations are
text. Environments subclass ``AgentEnv`` and implement ``reset`` and ``step``; nothing else
is required (no ``super().__init__`` call either).

Examples:
    >>> class Echo(AgentEnv):
    ...     domain = "generic"
    ...     def reset(self, *, task=None, seed=None):
    ...         return TimeStep(observation="ready")
    ...     def step(self, action):
    ...         return TimeStep(observation=str(action["params"]), terminated=action["tool"] == "submit")
    ...     @property
    ...     def available_tools(self):
    ...         return ["echo", "submit"]
    >>> with Echo() as env:
    ...     env.reset().observation
    ...     env.step({"tool": "submit", "params": {"x": 1}}).done
    'ready'
    True
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from knowlyrcore.timestep import TimeStep

if TYPE_CHECKING:
    from knowlyrcore.models import TaskInfo
    from knowlyrcore.registry import EnvSpec

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


class AgentEnv(ABC, Generic[ObsT, ActT]):
    """An environment in which an agent acts by tool calls.

    Subclasses set ``domain`` (a DomainProfile name) and implement ``reset`` and ``step``.
    ``available_tools`` defaults to the tools of the domain's profile.
    """

    domain: str = "generic"
    #: Set by ``make()`` to the spec the environment was built from.
    spec: EnvSpec | None = None

    @abstractmethod
    def reset(self, *, task: TaskInfo | dict | str | None = None, seed: int | None = None) -> TimeStep[ObsT]:
        """Start a new episode on ``task`` and return its first observation."""

    @abstractmethod
    def step(self, action: ActT) -> TimeStep[ObsT]:
        """Execute one tool call and return the resulting transition."""

    def close(self) -> None:
        """Release resources (containers, processes, files). Safe to call more than once."""

    @property
    def available_tools(self) -> list[str]:
        """Names of the tools this environment accepts, in a stable order."""
        from knowlyrcore.domain import get_domain_profile

        try:
            return get_domain_profile(self.domain).tool_names
        except LookupError:
            return []

    @property
    def unwrapped(self) -> AgentEnv[ObsT, ActT]:
        """The innermost environment, below every wrapper."""
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        env_id = f" {self.spec.id!r}" if self.spec is not None else ""
        return f"<{type(self).__name__}{env_id} domain={self.domain!r}>"


class EnvWrapper(AgentEnv[ObsT, ActT]):
    """Wraps an environment to change one aspect of it; delegates everything else.

    Attribute lookups a wrapper does not define fall through to the wrapped environment, so
    ``env.get_trajectory()`` works however deep a ``RecorderWrapper`` sits in the stack.
    """

    def __init__(self, env: AgentEnv[ObsT, ActT]):
        if not isinstance(env, AgentEnv):
            raise TypeError(f"{type(self).__name__} wraps an AgentEnv, got {type(env).__name__}")
        self.env = env

    def reset(self, *, task: TaskInfo | dict | str | None = None, seed: int | None = None) -> TimeStep[ObsT]:
        return self.env.reset(task=task, seed=seed)

    def step(self, action: ActT) -> TimeStep[ObsT]:
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()

    @property
    def available_tools(self) -> list[str]:
        return self.env.available_tools

    @property
    def domain(self) -> str:  # type: ignore[override]
        return self.env.domain

    @property
    def spec(self) -> EnvSpec | None:  # type: ignore[override]
        return self.env.spec

    @property
    def unwrapped(self) -> AgentEnv[ObsT, ActT]:
        return self.env.unwrapped

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails; never forward private names, so copying and
        # pickling do not recurse through a half-built wrapper.
        if name.startswith("_") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{self.env!r}>"
