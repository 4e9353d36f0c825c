"""``play_episodes``, the one acting loop: lockstep turns, how episodes end, hooks, tools."""

import pytest

from knowlyrcore import AgentEnv, InvalidActionError, TaskInfo, TimeStep
from knowlyrcore.policy import STOP, as_batch_policy
from knowlyrcore.rollout import Episode, play_episodes, wrap_episode_env


class Countdown(AgentEnv):
    """``metadata.n`` steps to go; a ``bad`` tool is refused with ``InvalidActionError``."""

    def reset(self, *, task=None, seed=None):
        self.left = int(task.metadata["n"])
        return TimeStep(f"{self.left} to go (seed {seed})", terminated=self.left == 0)

    def step(self, action):
        if action["tool"] == "bad":
            raise InvalidActionError("no such tool")
        self.left -= 1
        return TimeStep(f"{self.left} to go", reward=0.5, terminated=self.left == 0, info={"success": True})

    @property
    def available_tools(self):
        return ["tick"]


def tasks(*counts):
    return [TaskInfo(id=f"t{k}", metadata={"n": n}) for k, n in enumerate(counts)]


class Script:
    """A batch policy acting from a list of per-turn action lists; records what it saw."""

    def __init__(self, turns):
        self.turns, self.seen = list(turns), []

    def reset_batch(self, tasks):
        self.tasks = list(tasks)

    def act_batch(self, observations):
        self.seen.append(list(observations))
        actions = self.turns.pop(0)
        return [None if o is None else a for o, a in zip(observations, actions)]


TICK = {"tool": "tick", "params": {}}


def envs(n, max_steps=30):
    return [wrap_episode_env(Countdown(), max_steps=max_steps) for _ in range(n)]


def test_lockstep_turns_seeds_and_how_each_episode_ended():
    turns = []
    policy = Script([[TICK, TICK, TICK]] * 3)
    episodes = play_episodes(
        envs(3),
        policy,
        tasks(2, 0, 1),
        [7, 8, 9],
        before_turn=lambda turn, live: turns.append(("before", turn, live)),
        after_turn=lambda turn, live: turns.append(("after", turn, live)),
    )
    assert [(e.end, e.turns, e.reward) for e in episodes] == [
        ("terminated", 2, 1.0),
        ("terminated", 0, 0.0),
        ("terminated", 1, 0.5),
    ]
    assert policy.seen == [["2 to go (seed 7)", None, "1 to go (seed 9)"], ["1 to go", None, None]]
    assert turns == [("after", 0, 2), ("before", 1, 2), ("after", 1, 1), ("before", 2, 1), ("after", 2, 0)]
    assert [len(e.trajectory.steps) for e in episodes] == [2, 0, 1] and episodes[0].info == {"success": True}


def test_stop_ends_an_episode_and_max_steps_cuts_the_others():
    episodes = play_episodes(envs(2), Script([[STOP, TICK], [TICK, TICK]]), tasks(5, 5), max_steps=2)
    assert [(e.end, e.turns) for e in episodes] == [("stopped", 0), ("max_steps", 2)]
    assert len(episodes[1].trajectory.steps) == 2 and not episodes[1].trajectory.outcome.truncated


def test_step_errors_go_on_end_the_episode_or_propagate():
    def handle(i, env, action, exc):
        env.record_refused(action, str(exc))
        return TimeStep(f"Error: {exc}", terminated=i == 1)

    bad = {"tool": "bad", "params": {}}
    policy = Script([[bad, bad], [TICK, TICK]])
    episodes = play_episodes(envs(2), policy, tasks(1, 1), on_step_error=handle)
    assert policy.seen[1] == ["Error: no such tool", None]  # episode 0 goes on from the error
    assert [(e.end, e.turns, type(e.error)) for e in episodes] == [
        ("terminated", 2, type(None)),
        ("error", 1, InvalidActionError),
    ]
    assert [s.observation.error for s in episodes[0].trajectory.steps] == ["no such tool", None]
    with pytest.raises(InvalidActionError):
        play_episodes(envs(1), Script([[bad]]), tasks(1))


def test_a_reset_error_leaves_the_episode_out_when_taken():
    class Broken(Countdown):
        def reset(self, *, task=None, seed=None):
            raise OSError("no sandbox")

    recorded = []
    pair = [wrap_episode_env(Broken()), wrap_episode_env(Countdown())]
    episodes = play_episodes(pair, Script([[TICK, TICK]]), tasks(1, 1), on_reset_error=lambda i, e: recorded.append(i))
    assert recorded == [0] and episodes[0].end == "error" and episodes[0].trajectory is None
    assert episodes[1].end == "terminated"
    with pytest.raises(OSError):
        play_episodes([wrap_episode_env(Broken())], Script([]), tasks(1))


def test_a_policy_with_records_of_its_own_finishes_each_trajectory():
    class Tagging(Script):
        def finish_trajectory(self, i, trajectory):
            return trajectory.model_copy(update={"metadata": {**trajectory.metadata, "episode": i}})

    episodes = play_episodes(envs(2), Tagging([[TICK, TICK]]), tasks(1, 1))
    assert [e.trajectory.metadata["episode"] for e in episodes] == [0, 1]


def test_per_episode_agents_and_their_tools():
    class Growing(Countdown):
        left = 2  # as built

        @property
        def available_tools(self):
            return ["tick"] if self.left > 1 else ["tick", "submit"]

    class Agent:
        def __init__(self):
            self.tools = []

        def set_tools(self, tools):
            self.tools.append([t["function"]["name"] for t in tools])

        def __call__(self, observation):
            return TICK

    policy = as_batch_policy(Agent)
    (episode,) = play_episodes([wrap_episode_env(Growing())], policy, tasks(2))
    assert policy.policies[0].tools == [["tick", "submit"]]  # told before the turn it arrived
    assert [t["function"]["name"] for t in episode.trajectory.metadata["tools"]] == ["tick", "submit"]


def test_tools_that_name_their_domain_when_listed_are_no_change():
    """An environment whose domain is named by listing its tools (knowlyr/mcp: the server's tools
    make a profile of their own) offers the same tools before and after its reset: nothing to tell."""
    from knowlyrcore.domain import DomainProfile, register_domain_profile, tool_spec

    register_domain_profile(
        DomainProfile(name="rollout-test/listed", tools=[tool_spec("tick", "other", "Count down.")]), replace=True
    )

    class Listed(Countdown):
        domain = "rollout-test"  # the class's, until the tools are listed

        @property
        def available_tools(self):
            self.domain = "rollout-test/listed"
            return ["tick"]

    class Agent:
        tools: list = []

        def set_tools(self, tools):
            self.tools = [*self.tools, tools]

        def __call__(self, observation):
            return TICK

    policy = as_batch_policy(Agent)
    (episode,) = play_episodes([wrap_episode_env(Listed())], policy, tasks(1))
    assert policy.policies[0].tools == [] and "tools" not in episode.trajectory.metadata


def test_argument_checks():
    with pytest.raises(ValueError, match="2 tasks for 1 environments"):
        play_episodes(envs(1), Script([]), tasks(1, 1))
    with pytest.raises(ValueError, match="no action for live episode 0"):
        play_episodes(envs(1), Script([[None]]), tasks(1))
    assert Episode().end == ""
