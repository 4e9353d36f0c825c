"""The acting loop: a ``BatchPolicy`` plays episodes in recorded environments, in lockstep.

Every runner of episodes in knowlyr is a thin caller of ``play_episodes``: knowlyr-hub's
``collect`` (one episode per call, in threads or Ray actors), ``collect_batched`` and
``evaluate_policy`` (lockstep chunks), knowlyr-trainer's online RL (``collect_rollouts``) and
the GRPO wrapper's sampling. They differ only in how they build environments, which policy
acts, and what an exception out of an environment's ``step`` means; this module owns the rest:

- each episode's environment is wrapped for recording (``wrap_episode_env``: ``MaxStepsWrapper``
  -> ``RewardWrapper`` when a reward function is given -> ``RecorderWrapper`` outermost, so what
  is recorded is exactly what the agent saw);
- the policy is reset with the episodes' tasks, then every environment with its task and seed;
- each turn, every live episode's observation goes to ``act_batch`` in ONE call (``None`` for an
  episode that has ended) and every live environment takes its step;
- an environment that offers other tools than it did as built (per task, or from a later turn
  on) is noticed by ``ToolWatch`` and the policy told before it acts (``set_tools_batch``, or
  ``set_tools`` of each per-episode agent), and the trajectory keeps every tool offered
  (``metadata["tools"]``);
- an episode ends when its environment terminates or truncates it, when the policy returns
  ``STOP`` for it, when ``on_step_error`` says so, or after ``max_steps`` turns (one step each).

The loop neither builds nor closes environments: callers own them (and close them whatever
happens). A policy that keeps records of its own gets each trajectory through its optional
``finish_trajectory(i, trajectory)`` (a token-recording policy adds the token ids it sampled).

Examples:
    >>> from knowlyrcore import AgentEnv, TimeStep
    >>> from knowlyrcore.policy import as_batch_policy
    >>> class Coin(AgentEnv):
    ...     def reset(self, *, task=None, seed=None): return TimeStep("flip?")
    ...     def step(self, action): return TimeStep("heads", reward=1.0, terminated=True, info={"success": True})
    >>> envs = [wrap_episode_env(Coin()) for _ in range(2)]
    >>> flip = as_batch_policy(lambda: lambda observation: {"tool": "flip", "params": {}})
    >>> episodes = play_episodes(envs, flip, [None, None])
    >>> [(e.end, e.turns, e.reward, len(e.trajectory.steps)) for e in episodes]
    [('terminated', 1, 1.0, 1), ('terminated', 1, 1.0, 1)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowlyrcore.domain import tool_schemas
from knowlyrcore.env import AgentEnv
from knowlyrcore.models import TaskInfo
from knowlyrcore.policy import STOP, BatchPolicy, SequentialBatchPolicy
from knowlyrcore.registry import make
from knowlyrcore.timestep import TimeStep
from knowlyrcore.trajectory import Trajectory
from knowlyrcore.wrappers import MaxStepsWrapper, RecorderWrapper, RewardWrapper

#: ``on_step_error(i, env, action, exc) -> TimeStep``: what an exception out of episode ``i``'s
#: ``step`` means. It raises to abort the run, or returns the step the episode goes on from
#: (``done`` to end it there; ``Episode.error`` then keeps the exception).
StepErrorHandler = Callable[[int, RecorderWrapper, Any, Exception], TimeStep]


def build_env(env: str | Callable[..., AgentEnv], env_kwargs: dict[str, Any] | None = None) -> AgentEnv:
    """An environment from a registered id (``make``) or a factory called with ``env_kwargs``."""
    if isinstance(env, str):
        return make(env, **(env_kwargs or {}))
    built = env(**(env_kwargs or {}))
    if not isinstance(built, AgentEnv):
        raise TypeError(f"env factory returned {type(built).__name__}, not an AgentEnv")
    return built


def wrap_episode_env(
    env: AgentEnv,
    *,
    max_steps: int = 30,
    reward_fn: Callable | None = None,
    agent_name: str = "agent",
    model_name: str = "",
) -> RecorderWrapper:
    """``env`` wrapped for one recorded episode: ``MaxStepsWrapper`` -> ``RewardWrapper`` (when
    ``reward_fn`` is given) -> ``RecorderWrapper`` outermost, so what is recorded is what the agent saw."""
    wrapped: AgentEnv = MaxStepsWrapper(env, max_steps=max_steps)
    if reward_fn is not None:
        wrapped = RewardWrapper(wrapped, reward_fn=reward_fn)
    return RecorderWrapper(wrapped, agent_name=agent_name, model_name=model_name)


class ToolWatch:
    """The tools an episode's environment offers, watched so a policy hears when they change.

    It starts from the tools of the environment as built (before ``reset``), the ones a policy
    is built with (``knowlyr-hub evaluate`` does so); ``changed()`` gives the OpenAI schemas of
    the tools offered now when they differ from the last ones seen, else None. ``offered`` keeps
    every tool reported in the episode, by name in order of arrival.
    """

    def __init__(self, env: AgentEnv) -> None:
        self.env = env
        self._key = _tool_key(env)
        self._schemas: list[dict[str, Any]] | None = None  # of _key, computed once it changes
        self.offered: dict[str, dict[str, Any]] = {}

    def changed(self) -> list[dict[str, Any]] | None:
        key = _tool_key(self.env)
        if key == self._key:  # the same names in the same domain: cheap to compare at every step
            return None
        before = self._schemas if self._schemas is not None else _schemas_of(self._key)
        self._key, self._schemas = key, _schemas_of(key)
        if self._schemas == before:
            return None
        for schema in self._schemas:
            self.offered.setdefault(schema["function"]["name"], schema)
        return self._schemas

    def record(self, trajectory: Trajectory) -> Trajectory:
        """``trajectory`` with ``metadata["tools"]`` when the episode offered other tools than the
        environment as built (unchanged otherwise)."""
        if not self.offered:
            return trajectory
        return trajectory.model_copy(update={"metadata": {**trajectory.metadata, "tools": list(self.offered.values())}})


def _tool_key(env: AgentEnv) -> tuple[str, list[Any]] | None:
    try:
        # the tools first: an environment whose tools come from elsewhere (an MCP server) names
        # its domain once it has listed them, and read the other way round the domain of the
        # same tools would differ before and after the first reset
        tools = list(env.available_tools)
        return env.domain, tools
    except Exception:  # an environment that cannot tell (yet): no tools
        return None


def _schemas_of(key: tuple[str, list[Any]] | None) -> list[dict[str, Any]]:
    return [] if key is None else tool_schemas(key[1], key[0])


def env_tools(env: AgentEnv) -> list[dict[str, Any]] | None:
    """The OpenAI schemas of the tools ``env`` offers now (described by its domain), None for none."""
    return _schemas_of(_tool_key(env)) or None


def offer_tools(agent: Any, tools: list[dict[str, Any]]) -> None:
    """Tell a per-episode agent the tools its environment offers now (when it can take them)."""
    set_tools = getattr(agent, "set_tools", None)
    if callable(set_tools):
        set_tools(tools)


def offer_tools_batch(policy: BatchPolicy, tools_batch: list[list[dict[str, Any]] | None]) -> None:
    """Tell the policy the tools of the episodes whose tools changed (None: unchanged)."""
    if all(tools is None for tools in tools_batch):
        return
    set_tools_batch = getattr(policy, "set_tools_batch", None)
    if callable(set_tools_batch):
        set_tools_batch(tools_batch)
    elif isinstance(policy, SequentialBatchPolicy):  # per-episode agents, one per episode
        for agent, tools in zip(policy.policies, tools_batch):
            if tools is not None:
                offer_tools(agent, tools)


@dataclass
class Episode:
    """How one episode went: its recorded trajectory and why it ended.

    ``end`` is ``"terminated"`` or ``"truncated"`` (the environment's verdict), ``"stopped"`` (the
    policy returned ``STOP``), ``"error"`` (``on_step_error`` ended it, or its reset raised and
    ``on_reset_error`` took it: then ``trajectory`` is None) or ``"max_steps"`` (still running
    after ``max_steps`` turns, one step each). ``reward`` sums the rewards of the steps the environment took;
    ``info`` is the last step's (the reset's before any step).
    """

    trajectory: Trajectory | None = None
    end: str = ""
    turns: int = 0
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None


# max_steps counts an episode's steps as everywhere in knowlyr (collect, MaxStepsWrapper); each turn
# every live episode takes one.
def play_episodes(
    envs: Sequence[RecorderWrapper],
    policy: BatchPolicy,
    tasks: Sequence[Any],
    seeds: Sequence[int | None] | None = None,
    *,
    max_steps: int | None = None,
    on_step_error: StepErrorHandler | None = None,
    on_reset_error: Callable[[int, Exception], None] | None = None,
    before_turn: Callable[[int, int], Any] | None = None,
    after_turn: Callable[[int, int], Any] | None = None,
) -> list[Episode]:
    """Play episode ``i`` in ``envs[i]`` on ``tasks[i]`` (reset with ``seeds[i]``) until every one has ended.

    ``envs`` are recorded (``wrap_episode_env``); the policy gets the tasks as ``TaskInfo``
    (None stays None), the environments as given. An exception from ``act_batch`` or from an
    environment propagates, unless ``on_step_error`` (a ``step``) or ``on_reset_error`` (a
    ``reset``: the episode is left out) takes it. ``before_turn(turn, live)`` is called before the
    policy acts in each turn, ``after_turn(turn, live)`` after the environments stepped (turn 0:
    after the resets), ``live`` counting the episodes still running.
    """
    n = len(envs)
    if len(tasks) != n:
        raise ValueError(f"play_episodes got {len(tasks)} tasks for {n} environments")
    seeds = [None] * n if seeds is None else list(seeds)
    if len(seeds) != n:
        raise ValueError(f"play_episodes got {len(seeds)} seeds for {n} environments")
    episodes = [Episode() for _ in envs]
    watches = [ToolWatch(env) for env in envs]  # before reset: the tools as built
    policy.reset_batch([None if task is None else TaskInfo.coerce(task) for task in tasks])
    current: list[TimeStep | None] = [None] * n
    for i, env in enumerate(envs):
        try:
            current[i] = ts = env.reset(task=tasks[i], seed=seeds[i])
        except Exception as exc:
            if on_reset_error is None:
                raise
            on_reset_error(i, exc)
            episodes[i].end, episodes[i].error = "error", exc
            continue
        episodes[i].info = ts.info
        if ts.done:
            episodes[i].end = "terminated" if ts.terminated else "truncated"
    live = [not episodes[i].end for i in range(n)]
    if after_turn is not None:
        after_turn(0, sum(live))
    turn = 0
    while any(live) and (max_steps is None or turn < max_steps):
        turn += 1
        if before_turn is not None:
            before_turn(turn, sum(live))
        offer_tools_batch(policy, [watch.changed() if on else None for watch, on in zip(watches, live)])
        actions = policy.act_batch([ts.observation if on else None for ts, on in zip(current, live)])  # type: ignore[union-attr]
        if len(actions) != n:
            raise ValueError(f"act_batch returned {len(actions)} actions for {n} episodes")
        for i, action in enumerate(actions):
            if not live[i]:
                continue
            if action is None:
                raise ValueError(f"act_batch returned no action for live episode {i}")
            episode = episodes[i]
            if action is STOP:
                live[i], episode.end = False, "stopped"
                continue
            episode.turns += 1
            try:
                ts = envs[i].step(action)
            except Exception as exc:
                if on_step_error is None:
                    raise
                ts = on_step_error(i, envs[i], action, exc)
                if ts.done:
                    live[i], episode.end, episode.error = False, "error", exc
                    continue
            else:
                episode.reward += float(ts.reward)
                episode.info = ts.info
            current[i] = ts
            if ts.done:
                live[i], episode.end = False, "terminated" if ts.terminated else "truncated"
        if after_turn is not None:
            after_turn(turn, sum(live))
    finish = getattr(policy, "finish_trajectory", None)
    for i, (env, episode) in enumerate(zip(envs, episodes)):
        if live[i]:
            episode.end = "max_steps"
        if current[i] is None:  # its reset failed: nothing was recorded
            continue
        trajectory = env.get_trajectory()
        if callable(finish):
            trajectory = finish(i, trajectory)
        episode.trajectory = watches[i].record(trajectory)
    return episodes
