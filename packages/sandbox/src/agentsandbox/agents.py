"""The scripted agent of ``knowlyr-sandbox run --actions``: a fixed list of actions played back.

A knowlyr ``Policy``: ``reset(task=None)`` starts an episode and ``agent(observation)`` returns
the next action. A model behind an endpoint plays through ``knowlyrcore.endpoint.EndpointPolicy``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from knowlyrcore.errors import KnowlyrError


class AgentError(KnowlyrError, RuntimeError):
    """The agent has no further action."""


class ScriptedAgent:
    """Plays back a fixed list of actions, one per call, from the start at every ``reset``."""

    def __init__(self, actions: Iterable[dict[str, Any]]):
        self.actions = list(actions)
        self.position = 0

    def reset(self, task: Any = None) -> None:
        self.position = 0

    def __call__(self, observation: Any) -> dict[str, Any]:
        if self.position >= len(self.actions):
            raise AgentError(f"the script has only {len(self.actions)} actions and the episode is not over")
        action = self.actions[self.position]
        self.position += 1
        return action
