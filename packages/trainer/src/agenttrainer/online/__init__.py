"""Online agent RL: the policy acts in live knowlyr environments and learns from what happened.

Needs the ``online`` extra (``pip install 'knowlyr-trainer[online]'``) for the default process
reward (knowlyr-reward's rule layer) and an environment package that registers the env id.
"""

from agenttrainer.online.rollout import Rollout, collect_rollouts
from agenttrainer.online.trainer import OnlineRLTrainer, load_tasks, rollout_metrics

__all__ = [
    "OnlineRLTrainer",
    "Rollout",
    "collect_rollouts",
    "load_tasks",
    "rollout_metrics",
]
