"""Composable wrappers, each changing one aspect of an environment.

Examples:
    >>> from knowlyrcore import AgentEnv, TimeStep
    >>> class Count(AgentEnv):
    ...     def reset(self, *, task=None, seed=None): return TimeStep("start")
    ...     def step(self, action): return TimeStep("tick", reward=1.0)
    >>> env = RecorderWrapper(MaxStepsWrapper(Count(), max_steps=2), agent_name="doc")
    >>> ts = env.reset(task="count")
    >>> while not ts.done:
    ...     ts = env.step({"tool": "tick", "params": {}})
    >>> ts.truncated, len(env.get_trajectory().steps)
    (True, 2)
"""

from knowlyrcore.env import EnvWrapper
from knowlyrcore.wrappers.episode_statistics import EpisodeStatisticsWrapper
from knowlyrcore.wrappers.max_steps import MaxStepsWrapper
from knowlyrcore.wrappers.observation_truncate import ObservationTruncateWrapper
from knowlyrcore.wrappers.recorder import RecorderWrapper
from knowlyrcore.wrappers.reward import RewardWrapper, Transition
from knowlyrcore.wrappers.timeout import TimeoutWrapper
from knowlyrcore.wrappers.tool_retrieval import ToolRetrievalWrapper

__all__ = [
    "EnvWrapper",
    "EpisodeStatisticsWrapper",
    "MaxStepsWrapper",
    "ObservationTruncateWrapper",
    "RecorderWrapper",
    "RewardWrapper",
    "TimeoutWrapper",
    "ToolRetrievalWrapper",
    "Transition",
]
