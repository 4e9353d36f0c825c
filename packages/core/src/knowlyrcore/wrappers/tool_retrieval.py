"""``ToolRetrievalWrapper``: show the agent only the tools relevant to the current step.

With a library of thousands of tools, the prompt cannot list them all. Before each action the
wrapper asks a retriever (a ``ToolLibrary`` for BM25, or anything with ``search(query, k)``
returning ``(tool, score)`` pairs, such as knowlyr-trainer's ``DenseIndex``) for the ``k``
tools that best match the task and the latest observation, and exposes them as
``available_tools`` (names) and ``offered_tools`` (the specs, for the prompt), plus the
``always`` tools every step needs (``respond``, ``submit`` ...). The names offered for each
action are recorded in that step's ``info["offered_tools"]`` (step metadata in recorded
trajectories), and a call to a tool that was not offered is marked ``info["tool_not_offered"]``,
so retrieval quality and its effect on the agent can be measured afterwards.

Examples:
    >>> from knowlyrcore import AgentEnv, TimeStep
    >>> from knowlyrcore.domain import ToolSpec
    >>> from knowlyrcore.tool_library import ToolLibrary
    >>> class Shop(AgentEnv):
    ...     def reset(self, *, task=None, seed=None): return TimeStep("How can I help?")
    ...     def step(self, action): return TimeStep("Order #7 is cancelled.", terminated=True)
    >>> library = ToolLibrary([ToolSpec(name="cancel_order", description="Cancel an order"),
    ...                        ToolSpec(name="get_weather", description="Weather for a city")])
    >>> env = ToolRetrievalWrapper(Shop(), library, k=1, always=["respond"])
    >>> _ = env.reset(task="Please cancel order #7")
    >>> env.available_tools
    ['cancel_order', 'respond']
    >>> env.step({"tool": "cancel_order", "params": {}}).info["offered_tools"]
    ['cancel_order', 'respond']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowlyrcore.env import AgentEnv, EnvWrapper
from knowlyrcore.models import TaskInfo
from knowlyrcore.timestep import TimeStep

_QUERY_CHARS = 1000  # the latest observation's head: enough to say what the next step is about


class ToolRetrievalWrapper(EnvWrapper):
    def __init__(self, env: AgentEnv, retriever: Any, *, k: int = 5, always: Sequence[str] = ()):
        super().__init__(env)
        if not callable(getattr(retriever, "search", None)):
            raise TypeError("retriever needs a search(query, k) method (a ToolLibrary or a DenseIndex)")
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        self.retriever, self.k, self.always = retriever, k, list(always)
        self.offered_tools: list[Any] = []
        self._task_text = ""

    def _offer(self, observation: Any) -> None:
        latest = observation if isinstance(observation, str) else ""
        query = f"{self._task_text}\n{latest[:_QUERY_CHARS]}".strip()
        self.offered_tools = [tool for tool, _ in self.retriever.search(query, k=self.k)] if query else []

    @property
    def available_tools(self) -> list[str]:
        names = [tool.name for tool in self.offered_tools]
        return names + [name for name in self.always if name not in names]

    def reset(self, *, task: TaskInfo | dict | str | None = None, seed: int | None = None) -> TimeStep:
        ts = self.env.reset(task=task, seed=seed)
        info = TaskInfo.coerce(task) if task is not None else None
        self._task_text = info.description if info is not None else ""
        self._offer(ts.observation)
        return ts

    def step(self, action: Any) -> TimeStep:
        offered = self.available_tools
        ts = self.env.step(action)
        ts.info["offered_tools"] = offered
        tool = action.get("tool") if isinstance(action, dict) else None
        if tool is not None and tool not in offered:
            ts.info["tool_not_offered"] = True
        if not ts.done:
            self._offer(ts.observation)
        return ts
