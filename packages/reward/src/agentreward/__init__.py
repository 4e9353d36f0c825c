"""knowlyr-reward: a process reward model for agent trajectories in four layers.

Layer 1 rules (``agentreward.rules``), layer 2 an LLM judge (``agentreward.judge``),
layer 3 human calibration (``agentreward.calibration``), layer 4 a learned model
(``agentreward.learned``, the ``learned`` extra: imported only when asked for), combined by
``RewardEngine``.
``RewardEngine.score`` scores a ``knowlyrcore.Trajectory``; the CLI and ``score_record`` work on
the JSONL records themselves, passing every field they do not score through.
"""

from agentreward._siblings import __version__ as __version__  # first: knowlyr-core must be ours
from agentreward.calibration import Calibrator, agreement, labels_from_metadata, load_labels
from agentreward.engine import RewardEngine
from agentreward.errors import CalibrationError, JudgeError, JudgeSetupError, RewardError, TrajectoryFormatError
from agentreward.judge import Judge, parse_scores
from agentreward.preferences import build_preference_pairs
from agentreward.presets import PRESETS, SEED_003_WEIGHTS, target_tools, tool_f1
from agentreward.quality import evaluate, hide_labels, roc_auc
from agentreward.relative import RelativeJudge
from agentreward.rubrics import (
    CONVERSATION_PENALTIES,
    DEFAULT_PENALTIES,
    DOMAIN_WEIGHTS,
    RUBRICS,
    Rubric,
    domain_weights,
    load_weights,
)
from agentreward.rules import analyse, rule_scores
from agentreward.seed003 import AgentRewardConfig, AgentRewardModel
from agentreward.trajectories import read_trajectory_dicts

__all__ = [
    "AgentRewardConfig",
    "AgentRewardModel",
    # engine and layers
    "RewardEngine",
    "analyse",
    "rule_scores",
    "Judge",
    "RelativeJudge",
    "parse_scores",
    "Calibrator",
    "agreement",
    "labels_from_metadata",
    "load_labels",
    # quality of the reward against labels
    "evaluate",
    "hide_labels",
    "roc_auc",
    # rubrics and presets
    "PRESETS",
    "SEED_003_WEIGHTS",
    "target_tools",
    "tool_f1",
    "RUBRICS",
    "Rubric",
    "DOMAIN_WEIGHTS",
    "DEFAULT_PENALTIES",
    "CONVERSATION_PENALTIES",
    "domain_weights",
    "load_weights",
    # data
    "build_preference_pairs",
    "read_trajectory_dicts",
    # errors
    "RewardError",
    "TrajectoryFormatError",
    "JudgeError",
    "JudgeSetupError",
    "CalibrationError",
]
