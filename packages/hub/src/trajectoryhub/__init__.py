"""knowlyr-hub: collect rollouts, deduplicate, export training datasets, evaluate agents and reports.

Depends on knowlyr-core; the sandbox, recorder and reward packages are optional extras.
"""

from trajectoryhub._siblings import __version__ as __version__  # first: knowlyr-core must be ours
from trajectoryhub.batched import collect_batched
from trajectoryhub.dedup import ContentStore, content_hash, dedup
from trajectoryhub.evaluate import (
    AgentReport,
    ExpertReplay,
    compare_agents,
    compare_sampled,
    compare_stages,
    evaluate_agent,
    evaluate_policy,
    evaluate_sampled,
    leaderboard,
    pass_at_k,
    stage_metrics,
    summarize_samples,
    summarize_stage,
    template_table,
)
from trajectoryhub.export import DatasetExporter, ExportReport, messages_of, steps_of, trajectory_reward
from trajectoryhub.pipeline import Pipeline, PipelineReport
from trajectoryhub.report import write_report
from trajectoryhub.rewards import make_reward_fn
from trajectoryhub.rollout import collect, run_episode
from trajectoryhub.stats import (
    bonferroni,
    mcnemar_exact,
    pair_by_task,
    paired_ttest,
    wilcoxon_signed_rank,
    wilson_interval,
)
from trajectoryhub.store import GDIWeights, StoredTrajectory, TrajectoryStore, gdi_score

__all__ = [
    # rollouts
    "collect",
    "collect_batched",
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
    # the trajectory database
    "TrajectoryStore",
    "StoredTrajectory",
    "GDIWeights",
    "gdi_score",
    # evaluation: policies on task splits (stages)
    "evaluate_policy",
    "summarize_stage",
    "stage_metrics",
    "compare_stages",
    "evaluate_sampled",
    "summarize_samples",
    "compare_sampled",
    "pass_at_k",
    "template_table",
    "ExpertReplay",
    "write_report",
    # evaluation: recorded agents
    "AgentReport",
    "evaluate_agent",
    "compare_agents",
    "leaderboard",
    # statistics
    "wilson_interval",
    "mcnemar_exact",
    "paired_ttest",
    "wilcoxon_signed_rank",
    "bonferroni",
    "pair_by_task",
]
