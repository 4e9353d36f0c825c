"""knowlyr-hub: collect rollouts, deduplicate, export training datasets, evaluate agents.

Depends on knowlyr-core; the sandbox, recorder and reward packages are optional extras.
"""

from trajectoryhub.dedup import ContentStore, content_hash, dedup
from trajectoryhub.evaluate import AgentReport, compare_agents, evaluate_agent, leaderboard
from trajectoryhub.export import DatasetExporter, ExportReport, messages_of, steps_of, trajectory_reward
from trajectoryhub.pipeline import Pipeline, PipelineReport
from trajectoryhub.rewards import make_reward_fn
from trajectoryhub.rollout import collect, run_episode

__version__ = "0.1.0"

__all__ = [
    # rollouts
    "collect",
    "run_episode",
    "make_reward_fn",
    # datasets
    "DatasetExporter",
    "ExportReport",
    "messages_of",
    "steps_of",
    "trajectory_reward",
    "Pipeline",
    "PipelineReport",
    "ContentStore",
    "content_hash",
    "dedup",
    # evaluation
    "AgentReport",
    "evaluate_agent",
    "compare_agents",
    "leaderboard",
]
