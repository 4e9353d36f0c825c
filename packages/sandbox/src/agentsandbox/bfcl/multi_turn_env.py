"""``BFCLMultiTurnEnv`` (``knowlyr/bfcl-multi-turn``): one BFCL multi-turn entry per episode, run on
BFCL's own backends and judged turn by turn as BFCL judges it (``agentsandbox.bfcl.multi_turn``).

The protocol, one action per step as every knowlyr policy acts:

* ``reset(task)`` builds fresh backend instances from the task's initial config (and a second
  set for the ground-truth replay) and shows the first user turn; the tools are the functions of
  the involved classes offered in that turn, plus ``respond``;
* each call runs on the episode's instances and its observation is the result as JSON text; a
  call that cannot run (a function not offered, a parameter it does not document, a value of the
  wrong type or that no JSON holds, a backend that raises) gets an ``[error] ...`` observation and
  still counts as the turn's call; a call whose arguments did not parse (``format_error``) does not
  run and does not count (BFCL skips what it cannot decode);
* ``respond`` (what a reply in plain text becomes) ends the turn: the turn's ground-truth calls
  are replayed on the second set of instances and the turn is judged (``judge_turn``); the next
  user turn is the observation. The turn that brings withheld functions (miss_func) shows BFCL's
  words for it and the added functions' documents, and the episode's tools grow;
* after the last turn's reply the episode ends: success when every checked turn passed (reward
  1, else 0), with each turn's verdict in ``info["turns"]``;
* a call (the policy's, or the ground truth's replay) that leaves a backend past the bounds of
  ``agentsandbox.bfcl.bounds`` (a file system of more than 10,000 entries, say) ends the episode at
  once: an ``[error] ...`` observation, reward 0, ``info["exit_status"] == "error"``. The process
  and the other episodes go on. A task whose ``initial_config`` breaks a bound is refused by
  ``reset`` with one line naming the task and the field.

Each set of offered functions is a domain profile registered as ``bfcl-multi-turn/<digest>``;
``env.domain`` names the current one, so ``tool_schemas(env.available_tools, env.domain)`` gives
exactly the tools offered now.

A task's metadata (the ``bfcl-multi-turn`` suite writes it): ``turns`` (the user's text of each
turn), ``involved_classes``, ``initial_config``, ``missed_function`` (``{turn: [names]}``, may be
empty), ``long_context`` (bool) and ``ground_truth`` (each turn's call strings, BFCL's format).
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from agentsandbox.bfcl.bounds import config_problem
from agentsandbox.bfcl.checker import show_value
from agentsandbox.bfcl.data import data_dir
from agentsandbox.bfcl.env import RESPOND, printable_name, tool_specs
from agentsandbox.bfcl.multi_turn import (
    BACKENDS,
    Backends,
    CallResult,
    CallSyntaxError,
    ScenarioError,
    TurnVerdict,
    bind_call,
    function_owners,
    judge_turn,
    offered_functions,
    parse_call,
)
from agentsandbox.envkit import episode_over, error_step, register_once
from knowlyrcore.actions import parse_action
from knowlyrcore.domain import DomainProfile, OutcomeSpec, ToolSpec, get_domain_profile, register_domain_profile
from knowlyrcore.env import AgentEnv
from knowlyrcore.errors import InvalidActionError, TaskRequiredError
from knowlyrcore.models import TaskInfo
from knowlyrcore.timestep import TimeStep

MULTI_TURN_PROFILE = DomainProfile(
    name="bfcl-multi-turn",
    display_name="Berkeley Function Calling Leaderboard (multi-turn)",
    description="Serve a user's requests turn by turn with BFCL's stateful APIs (file system, trading, travel, ...).",
    tools=[RESPOND],
    terminal_tools=["respond"],
    outcome=OutcomeSpec(
        method="terminal_tool",
        description="after every turn, the APIs' state and the calls' results match BFCL's ground truth",
    ),
)

register_once(MULTI_TURN_PROFILE)

SYSTEM_PROMPT = (
    "You can call the functions offered as tools; each call runs and you see its result. Make the calls "
    "the user's request needs, one per turn. When the request is done, or cannot be done, reply in plain "
    "text; the user may then ask for more."
)


@functools.lru_cache(maxsize=1024)
def _profile(functions_json: str) -> DomainProfile:
    functions = json.loads(functions_json)
    digest = hashlib.sha256(functions_json.encode()).hexdigest()[:16]
    profile = MULTI_TURN_PROFILE.model_copy(
        update={"name": f"bfcl-multi-turn/{digest}", "tools": [*tool_specs(functions), RESPOND]}
    )
    register_domain_profile(profile, replace=True)
    return profile


def _episode(info: TaskInfo) -> dict[str, Any]:
    """The task's metadata checked, with its ground truth parsed into ``(name, params)`` per turn."""
    m = info.metadata

    def bad(field: str, problem: str) -> ValueError:
        return ValueError(
            f"BFCL multi-turn task {info.id!r}: metadata.{field}: {problem} "
            "(generate tasks with the bfcl-multi-turn suite)"
        )

    turns, classes, truth = m.get("turns"), m.get("involved_classes"), m.get("ground_truth")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise bad("turns", "expected a non-empty list of the user's turns (strings)")
    if not isinstance(classes, list) or not classes or not all(c in BACKENDS for c in classes):
        raise bad("involved_classes", f"expected a list of BFCL backend classes ({', '.join(BACKENDS)})")
    config, missed = m.get("initial_config", {}), m.get("missed_function") or {}
    if not isinstance(config, dict) or not all(isinstance(v, dict) for v in config.values()):
        raise bad("initial_config", "expected {class name: {state}}")
    if problem := config_problem(config):  # before any backend sees it: bfcl-eval bounds nothing
        raise bad(*problem)
    if not isinstance(missed, dict) or not all(
        isinstance(k, str) and k.isdigit() and isinstance(v, list) for k, v in missed.items()
    ):
        raise bad("missed_function", "expected {turn index: [function names]}")
    if not isinstance(truth, list) or len(truth) != len(turns) or not all(isinstance(t, list) for t in truth):
        raise bad("ground_truth", f"expected a list of calls for each of the {len(turns)} turns")
    owners, calls = function_owners(classes), []
    for t, strings in enumerate(truth):
        calls.append([])
        for i, text in enumerate(strings):
            try:
                name, args, kwargs = parse_call(text)
                if name not in owners:
                    raise CallSyntaxError(f"{name!r} is not a function of the involved classes")
                calls[-1].append((name, bind_call(owners[name], name, args, kwargs)))
            except CallSyntaxError as exc:
                raise bad(f"ground_truth.{t}.{i}", str(exc)) from None
    return {
        "turns": turns,
        "classes": classes,
        "config": config,
        "missed": missed,
        "truth": calls,
        "long_context": bool(m.get("long_context", False)),
    }


class BFCLMultiTurnEnv(AgentEnv):
    """One BFCL multi-turn entry per episode; ``respond`` ends a turn, the last one ends the episode."""

    domain = "bfcl-multi-turn"

    def __init__(self) -> None:
        self._task: TaskInfo | None = None
        self._episode: dict[str, Any] = {}
        self._model: Backends | None = None
        self._truth: Backends | None = None
        self._offered: dict[str, ToolSpec] = {}
        self._turn = 0
        self._turn_calls: list[CallResult] = []
        self._results: list[str] = []
        self._verdicts: list[TurnVerdict] = []
        self._done = False

    def reset(self, *, task: TaskInfo | dict | str | None = None, seed: int | None = None) -> TimeStep:
        data_dir()  # the tasks are BFCL's: without bfcl-eval, one line naming the install step
        info = TaskInfo.coerce(task)
        if "turns" not in info.metadata:  # no task, or not one of this suite's
            raise TaskRequiredError(
                f"BFCL multi-turn task {info.id!r} has no metadata.turns (generate tasks with the bfcl-multi-turn suite)"
            )
        episode = _episode(info)
        args = (episode["classes"], episode["config"], episode["long_context"])
        try:
            self._model, self._truth = Backends(*args), Backends(*args)
        except ScenarioError as exc:
            raise ScenarioError(f"BFCL multi-turn task {info.id!r}: metadata.{exc}") from None
        self._task, self._episode = info, episode
        self._turn, self._turn_calls, self._results, self._verdicts, self._done = 0, [], [], [], False
        self._offer(0)
        return TimeStep(observation=episode["turns"][0], info={"task_id": info.id, "turn": 0})

    def _offer(self, turn: int) -> None:
        functions = offered_functions(self._episode["classes"], self._episode["missed"], turn)
        profile = _profile(json.dumps(functions, sort_keys=True))
        self.domain = profile.name
        self._offered = {spec.name: spec for spec in profile.tools if spec.name != RESPOND.name}

    @property
    def available_tools(self) -> list[str]:
        return get_domain_profile(self.domain).tool_names

    @property
    def verdicts(self) -> list[TurnVerdict]:
        """The verdicts of the turns finished so far."""
        return list(self._verdicts)

    def step(self, action: Any) -> TimeStep:
        if self._task is None or self._model is None:
            raise RuntimeError("call reset() before step()")
        try:
            tool, params = parse_action(action)
        except InvalidActionError as exc:
            return error_step(str(exc))
        if self._done:
            return episode_over(printable_name(tool))
        if tool == RESPOND.name:
            return self._end_turn()
        info: dict[str, Any] = {"tool": printable_name(tool), "turn": self._turn}
        if action.get("format_error"):
            error = f"the arguments of {show_value(tool)} did not parse, so nothing ran; call it again"
            return error_step(error, **info)
        result = self._model.call(tool, params, self._offered)
        self._turn_calls.append(result)
        if result.error:
            info["error"] = result.error
        if result.fatal:  # the backend is past its bounds: nothing may read it again
            return self._end_broken(result.text, str(result.error), info)
        return TimeStep(observation=result.text, info=info)

    def _end_broken(self, observation: str, reason: str, info: dict[str, Any]) -> TimeStep:
        """End the episode because a backend went past its bounds: reward 0, the error as the observation."""
        self._done = True
        info = {
            **info,
            "success": False,
            "score": 0.0,
            "exit_status": "error",
            "reason": reason,
            "turns": [v.as_info() for v in self._verdicts],
            "calls": sum(v.calls for v in self._verdicts) + len(self._turn_calls),
        }
        return TimeStep(observation=observation, reward=0.0, terminated=True, info=info)

    def _end_turn(self) -> TimeStep:
        assert self._model is not None and self._truth is not None
        turn = self._turn
        expected = [self._truth.call(name, params, self._offered) for name, params in self._episode["truth"][turn]]
        if broken := next((c for c in expected if c.fatal), None):  # the task's own ground truth broke a bound
            error = f"the ground truth's {printable_name(broken.tool)}: {broken.error}"
            return self._end_broken(f"[error] {error}", error, {"tool": RESPOND.name, "turn": turn, "error": error})
        self._results.extend(call.text for call in self._turn_calls)
        differences = self._model.state_differences(self._truth) if expected else []
        self._verdicts.append(judge_turn(turn, self._turn_calls, self._results, expected, differences))
        turns = self._episode["turns"]
        if turn + 1 < len(turns):
            self._turn, self._turn_calls = turn + 1, []
            added = self._episode["missed"].get(str(self._turn), [])
            self._offer(self._turn)
            observation = turns[self._turn]
            if added:  # as BFCL's prompting mode shows them, for policies whose tool list was fixed at reset
                docs = [{k: v for k, v in self._offered[n].model_dump().items() if k != "category"} for n in added]
                observation += "\n\nFunctions added: " + json.dumps(docs, ensure_ascii=False)
            return TimeStep(observation=observation, info={"tool": RESPOND.name, "turn": self._turn})
        self._done = True
        failed = next((v for v in self._verdicts if not v.success), None)
        reason = f"turn {failed.turn}: {failed.reason}" if failed else "every checked turn matches the ground truth"
        success = failed is None
        info = {
            "tool": RESPOND.name,
            "success": success,
            "score": float(success),
            "exit_status": "responded",
            "reason": reason,
            "turns": [v.as_info() for v in self._verdicts],
            "calls": sum(v.calls for v in self._verdicts),
        }
        return TimeStep(observation="Conversation over.", reward=float(success), terminated=True, info=info)

    def close(self) -> None:
        self._model = self._truth = None
