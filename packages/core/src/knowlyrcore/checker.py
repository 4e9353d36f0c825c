"""``check_env``: verify that an environment honours the AgentEnv protocol.

Run it on any environment before training on it. It drives the environment through reset,
a few steps and close, and raises ``EnvCheckError`` listing every violation it found (not
just the first), each phrased as what to fix.

Examples:
    >>> from knowlyrcore import AgentEnv, TimeStep
    >>> class Good(AgentEnv):
    ...     def reset(self, *, task=None, seed=None): return TimeStep("ready")
    ...     def step(self, action): return TimeStep("done", terminated=True)
    ...     @property
    ...     def available_tools(self): return ["submit"]
    >>> check_env(Good())
    []
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from typing import Any

from knowlyrcore.env import AgentEnv
from knowlyrcore.errors import EnvCheckError, KnowlyrError, TaskRequiredError
from knowlyrcore.timestep import TimeStep

UNKNOWN_TOOL = "__knowlyr_check_unknown_tool__"


def _check_timestep(ts: Any, where: str, problems: list[str]) -> bool:
    if not isinstance(ts, TimeStep):
        problems.append(f"{where} must return a TimeStep, got {type(ts).__name__}")
        return False
    if not isinstance(ts.reward, (int, float)) or isinstance(ts.reward, bool) or not math.isfinite(ts.reward):
        problems.append(f"{where}: reward must be a finite number, got {ts.reward!r}")
    for flag in ("terminated", "truncated"):
        if not isinstance(getattr(ts, flag), bool):
            problems.append(f"{where}: {flag} must be a bool, got {type(getattr(ts, flag)).__name__}")
    if not isinstance(ts.info, dict):
        problems.append(f"{where}: info must be a dict, got {type(ts.info).__name__}")
    try:
        json.dumps(ts.observation)
    except (TypeError, ValueError):
        problems.append(f"{where}: observation must be JSON-serialisable (text), got {type(ts.observation).__name__}")
    return True


def _default_action(tools: list[str]) -> dict[str, Any]:
    return {"tool": tools[0] if tools else "noop", "params": {}}


def check_env(
    env: AgentEnv,
    *,
    task: Any = None,
    actions: list[dict[str, Any]] | None = None,
    seed: int = 0,
    check_determinism: bool = True,
    make_env: Callable[[], AgentEnv] | None = None,
) -> list[str]:
    """Check ``env``; return the list of warnings, raise ``EnvCheckError`` on violations.

    An environment whose ``reset`` cannot start without a task (of its kind, as a suite makes
    them) raises ``TaskRequiredError`` when ``task`` is missing or wrong; that is passed on as it
    is, not reported as a violation: check it again with one of its tasks.

    ``actions`` are steps to take after reset (default: the first available tool with no
    parameters, once). ``check_determinism`` resets twice with the same seed and compares the
    first observations. ``make_env`` lets the checker build a second instance to verify that
    ``close`` works on an environment that never ran. The environment is closed at the end.
    """
    problems: list[str] = []
    notes: list[str] = []

    if not isinstance(env, AgentEnv):
        raise EnvCheckError([f"env must be an AgentEnv, got {type(env).__name__}"])

    try:
        tools = env.available_tools
    except Exception as exc:  # report, keep checking the rest
        problems.append(f"available_tools raised {type(exc).__name__}: {exc}")
        tools = []
    if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
        problems.append(f"available_tools must be a list of non-empty tool names, got {tools!r}")
        tools = []
    elif len(set(tools)) != len(tools):
        problems.append(f"available_tools lists a tool twice: {tools}")
    if UNKNOWN_TOOL in tools:
        tools = [t for t in tools if t != UNKNOWN_TOOL]
    if not isinstance(env.domain, str) or not env.domain:
        problems.append(f"domain must be a non-empty string, got {env.domain!r}")

    try:
        first = env.reset(task=task, seed=seed)
    except TaskRequiredError:  # the environment needs a task (of its kind): the caller's to give, not a fault
        env.close()
        raise
    except Exception as exc:
        problems.append(f"reset(task=..., seed=...) raised {type(exc).__name__}: {exc}")
        env.close()
        raise EnvCheckError(problems) from exc
    if _check_timestep(first, "reset()", problems) and first.done:
        problems.append("reset() returned a finished TimeStep (terminated or truncated is True)")

    if check_determinism:
        again = env.reset(task=task, seed=seed)
        if isinstance(first, TimeStep) and isinstance(again, TimeStep) and first.observation != again.observation:
            problems.append("reset() with the same task and seed gave different observations (not reproducible)")

    for i, action in enumerate(actions or [_default_action(tools)]):
        try:
            ts = env.step(action)
        except KnowlyrError as exc:
            notes.append(f"step {i} ({action.get('tool')}) was rejected: {exc}")
            continue
        except Exception as exc:
            problems.append(f"step({action!r}) raised {type(exc).__name__}: {exc}")
            break
        if not _check_timestep(ts, f"step {i}", problems) or ts.done:
            break

    env.reset(task=task, seed=seed)
    try:
        bad = env.step({"tool": UNKNOWN_TOOL, "params": {}})
    except KnowlyrError:
        pass  # InvalidActionError and friends are the documented way to refuse
    except Exception as exc:
        problems.append(
            f"an unknown tool must be refused with InvalidActionError or an error observation, "
            f"but step raised {type(exc).__name__}: {exc}"
        )
    else:
        _check_timestep(bad, "step(unknown tool)", problems)

    try:
        env.close()
        env.close()
    except Exception as exc:
        problems.append(f"close() must be safe to call twice, raised {type(exc).__name__}: {exc}")

    if make_env is not None:
        fresh = make_env()
        try:
            fresh.close()
        except Exception as exc:
            problems.append(f"close() before reset() raised {type(exc).__name__}: {exc}")

    if problems:
        raise EnvCheckError(problems)
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return notes
