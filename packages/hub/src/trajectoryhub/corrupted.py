"""Experts with one mistake: failed runs with known causes, for reward-model data and benches.

``CorruptedExpert(kind, rng)`` replays a task's solution (``task.metadata.solution``) with one
kind of mistake made in it:

- ``skip_write``: every write call is left out (the agent claims a change it never made);
- ``invented_id``: the first call with an id argument gets an id nobody showed (a digit appended);
- ``repeat``: one call is made twice in a row;
- ``give_up``: the agent answers at once that it cannot help.

A task without anything the kind needs (no write, no id argument, a one-call solution) gets
``give_up``. Together with the expert itself they give success and failure labels at any scale,
and the first step where a run leaves the solution is where its mistake is.
"""

from __future__ import annotations

import random
from typing import Any

from knowlyrcore import TaskInfo, ToolCategory, get_domain_profile
from knowlyrcore.policy import SolutionReplay
from trajectoryhub.batched import collect_batched

KINDS = ("skip_write", "invented_id", "repeat", "give_up")
GIVE_UP = {"tool": "respond", "params": {"message": "Sorry, I cannot help with that."}}


def _id_keys(action: dict[str, Any]) -> list[str]:
    return [k for k, v in (action.get("params") or {}).items() if "id" in k and isinstance(v, (str, int))]


class CorruptedExpert:
    """The expert with one kind of mistake; where it falls is drawn from ``rng``."""

    def __init__(self, kind: str, rng: random.Random | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown mistake kind {kind!r} (known: {', '.join(KINDS)})")
        self.kind, self.rng = kind, rng or random.Random(0)
        self.expert = SolutionReplay()
        self.actions: list[dict[str, Any]] = []

    def reset(self, task: Any = None) -> None:
        self.expert.reset(task)
        actions = [dict(a) for a in self.expert.actions]
        profile = get_domain_profile(TaskInfo.coerce(task).domain)
        writes = {t.name for t in profile.tools if t.category == ToolCategory.WRITE}
        at = self.rng.randrange(len(actions))
        if self.kind == "skip_write" and any(a["tool"] in writes for a in actions):
            actions = [a for a in actions if a["tool"] not in writes]
        elif self.kind == "invented_id" and any(_id_keys(a) for a in actions[:-1]):
            index = next(i for i, a in enumerate(actions) if _id_keys(a))
            key = _id_keys(actions[index])[0]
            params = dict(actions[index]["params"])
            params[key] = f"{params[key]}9" if isinstance(params[key], str) else params[key] + 9
            actions[index] = {**actions[index], "params": params}
        elif self.kind == "repeat" and len(actions) > 1:
            at = min(at, len(actions) - 2)
            actions.insert(at + 1, dict(actions[at]))
        else:
            actions = [dict(GIVE_UP)]
        self.actions = actions

    def __call__(self, observation: Any) -> dict[str, Any]:
        return self.actions.pop(0) if len(self.actions) > 1 else self.actions[0]


def expert_and_corrupted_runs(suite: Any, tasks: list[Any], kinds: tuple[str, ...] = KINDS, seed: int = 0) -> list[Any]:
    """One run of each task by the suite's expert, then one by a ``CorruptedExpert`` of each of
    ``kinds`` (its mistakes drawn from ``seed``): labelled runs with a known spread, agent name
    ``expert`` or the kind. ``suite`` is an ``agentsandbox.suites.TaskSuite``."""
    runs = []
    for agent in ("expert", *kinds):
        factory = suite.expert if agent == "expert" else (lambda kind=agent: CorruptedExpert(kind, random.Random(seed)))
        runs += collect_batched(
            suite.env_id,
            factory,
            tasks,
            max_steps=suite.max_steps,
            env_kwargs=suite.env_kwargs,
            progress=False,
            agent_name=agent,
        )
    return runs
