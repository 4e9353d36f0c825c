"""``make_reward_fn``: the process reward model as a per-step reward for ``collect()``.

The returned function has ``RewardWrapper``'s signature ``(action, timestep, history)``: it
rebuilds the episode so far as a trajectory record and scores its last step with
knowlyr-reward's rule layer (extra ``reward``). Scoring the prefix each step keeps the reward
causal (a step is judged on what happened up to it) at O(steps) per call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from knowlyrcore import TimeStep
from knowlyrcore.errors import require_extra
from knowlyrcore.recording import observation_text


def _step_record(action: dict[str, Any], ts: TimeStep) -> dict[str, Any]:
    return {
        "tool_call": {"name": action.get("tool", ""), "parameters": action.get("params") or {}},
        "thought": action.get("thought", ""),
        "observation": {
            "output": observation_text(ts.observation),
            "exit_code": ts.info.get("exit_code"),
            "error": ts.info.get("error"),
        },
    }


def make_reward_fn(domain: str = "generic", *, task_description: str = "", **engine_kwargs: Any) -> Callable:
    """A ``reward_fn(action, timestep, history) -> float`` backed by ``agentreward.RewardEngine``."""
    RewardEngine = require_extra("agentreward", "knowlyr-hub", "reward", "make_reward_fn").RewardEngine
    engine = RewardEngine(domain=domain, **engine_kwargs)

    def reward_fn(action: dict[str, Any], timestep: TimeStep, history: Sequence[Any]) -> float:
        steps = [_step_record(t.action, t.timestep) for t in history] + [_step_record(action, timestep)]
        outcome = {"success": timestep.info["success"]} if timestep.done and "success" in timestep.info else {}
        record = {"task": {"description": task_description, "domain": domain}, "steps": steps, "outcome": outcome}
        return engine.score_record(record)["steps"][-1]["reward"]

    return reward_fn
