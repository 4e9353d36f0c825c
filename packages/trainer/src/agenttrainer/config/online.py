"""``OnlineRLConfig``: online RL, the policy acting in a live environment (``knowlyr-trainer grpo --online``).

Its fields beyond the shared ones come in groups (``config.sampling.temperature``); config files
and flags name them flat (``temperature: 0.7``, ``--temperature 0.7``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agenttrainer.config.files import ConfigError
from agenttrainer.config.grpo import PolicyGradientFields
from agenttrainer.config.run import RunConfig

PUSH_WEIGHTS = ("knowlyr", "vllm", "vllm-lora", "none")


@dataclass
class Sampling:
    """How the policy samples an answer, and the token budgets of an episode (``config.sampling``)."""

    max_new_tokens: int = field(default=128, metadata={"help": "Tokens per model answer."})
    max_episode_tokens: int = field(
        default=2048, metadata={"help": "Token budget of an episode (prompt, answers, observations)."}
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of rollouts."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling of rollouts."})

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "max_episode_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_episode_tokens <= self.max_new_tokens:
            raise ConfigError("max_episode_tokens must exceed max_new_tokens (room for the prompt)")
        if not 0 <= self.temperature <= 2 or not 0 < self.top_p <= 1:
            raise ConfigError("temperature must be in [0, 2] and top_p in (0, 1]")


@dataclass
class Prompting:
    """How an episode is prompted, and what an answer without a tool call becomes (``config.prompt``)."""

    system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "System prompt of every episode (default: the model's prompt contract, else the task's "
            "metadata.system_prompt)."
        },
    )
    include_tools: bool | None = field(
        default=None,
        metadata={
            "help": "Render the environment's tool schemas with the chat template (default: the model's prompt "
            "contract, else yes)."
        },
    )
    closing_tool: str | None = field(
        default=None, metadata={"help": "Tool an answer without a tool call becomes (default: respond/finish/submit)."}
    )


@dataclass
class Rewards:
    """A trajectory's reward beyond the environment's outcome (``config.rewards``)."""

    process_reward: str = field(
        default="rules",
        metadata={
            "help": "Per-step rewards: rules (knowlyr-reward's rule layer), learned:CHECKPOINT (a process reward model "
            "from knowlyr-trainer prm: each step's predicted chance of success), none, or module:function."
        },
    )
    process_reward_coef: float = field(
        default=0.2, metadata={"help": "Weight of the mean step reward in a trajectory's reward."}
    )
    format_penalty: float = field(
        default=0.1, metadata={"help": "Subtracted from a trajectory's reward per malformed tool call."}
    )
    group_judge_url: str | None = field(
        default=None,
        metadata={
            "help": "OpenAI-compatible endpoint of a group-relative LLM judge (knowlyr-reward's RelativeJudge): the "
            "episodes of a task with metadata.rubric are scored against each other in one call, each in [0, 1], "
            "and group_judge_coef x its score is added to its reward (nothing when the judge abstains). Its API key "
            "is read from $KNOWLYR_JUDGE_API_KEY."
        },
    )
    group_judge_model: str | None = field(
        default=None, metadata={"help": "Model name at group_judge_url (needed with it)."}
    )
    group_judge_coef: float = field(
        default=1.0, metadata={"help": "Weight of the group judge's score in a trajectory's reward."}
    )

    def __post_init__(self) -> None:
        if bool(self.group_judge_url) != bool(self.group_judge_model):
            raise ConfigError("group_judge_url and group_judge_model go together: the endpoint and the model it serves")
        if not math.isfinite(self.group_judge_coef):
            raise ConfigError(f"group_judge_coef must be a finite number, got {self.group_judge_coef!r}")
        if self.process_reward not in ("rules", "none") and ":" not in self.process_reward:
            raise ConfigError(
                f"process_reward must be rules, learned:CHECKPOINT, none or module:function, got {self.process_reward!r}"
            )
        if self.process_reward.startswith("learned:") and not self.process_reward.removeprefix("learned:"):
            raise ConfigError("process_reward learned: needs the checkpoint directory, e.g. learned:runs/prm/final")


@dataclass
class TaskSelection:
    """Which tasks an iteration plays and which of their groups it learns from (``config.selection``)."""

    task_sampling: str = field(
        default="sequential",
        metadata={
            "help": "sequential (every task once per pass, in a seeded order) or pass_rate (tasks drawn by their "
            "running pass rate: unseen ones and those between pass_rate_band are 10x likelier than the rest)."
        },
    )
    pass_rate_band: list[float] = field(
        default_factory=lambda: [0.2, 0.8],
        metadata={"help": "pass_rate sampling: the low and high pass rate between which a task still teaches."},
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "Refill an iteration: while fewer than tasks_per_iteration groups have rewards that differ, "
            "play further tasks (at most max_refill_rounds rounds); groups beyond that count and uniform "
            "groups are left out of the update."
        },
    )
    max_refill_rounds: int = field(
        default=2, metadata={"help": "Dynamic sampling: extra rollout rounds per iteration."}
    )
    skip_uniform_groups: bool = field(
        default=True,
        metadata={
            "help": "Leave groups whose episodes all scored the same out of the update (no signal; saves compute)."
        },
    )

    def __post_init__(self) -> None:
        if self.task_sampling not in ("sequential", "pass_rate"):
            raise ConfigError(f"task_sampling must be sequential or pass_rate, got {self.task_sampling!r}")
        try:
            low, high = (float(x) for x in self.pass_rate_band)
        except (TypeError, ValueError):
            low, high = -1.0, -1.0
        if not 0 <= low < high <= 1:
            raise ConfigError(f"pass_rate_band must be two rates 0 <= low < high <= 1, got {self.pass_rate_band!r}")
        self.pass_rate_band = [low, high]
        if not 0 <= self.max_refill_rounds <= 9:  # refill rounds take episode seeds 1000 apart within an iteration
            raise ConfigError(f"max_refill_rounds must be in [0, 9], got {self.max_refill_rounds}")


@dataclass
class Generation:
    """Where rollouts are sampled: in this process, or on a server that gets the new weights (``config.generation``)."""

    generation_url: str | None = field(
        default=None,
        metadata={
            "help": "OpenAI-compatible server to sample from (vLLM, SGLang, knowlyr-trainer serve); default in-process. "
            "Its API key is read from $KNOWLYR_GENERATION_API_KEY (or $KNOWLYR_SERVE_API_KEY)."
        },
    )
    served_model_name: str | None = field(
        default=None, metadata={"help": "Model name at generation_url (default: model_name_or_path)."}
    )
    push_weights: str = field(
        default="knowlyr",
        metadata={
            "help": "How updated weights reach generation_url: knowlyr (/load_weights), vllm (full weights reloaded "
            "in place: knowlyr-trainer serve --engine vllm --allow-weight-updates), vllm-lora, none."
        },
    )
    generation_batch_size: int | None = field(
        default=None, metadata={"help": "Episodes per in-process prefill forward (default: all live episodes)."}
    )
    reuse_cache: bool = field(
        default=True,
        metadata={
            "help": "In-process acting keeps each episode's KV cache across turns (only new tokens are prefilled); "
            "--no-reuse-cache prefills every turn's whole history again."
        },
    )

    def __post_init__(self) -> None:
        if self.push_weights not in PUSH_WEIGHTS:
            raise ConfigError(f"push_weights must be knowlyr, vllm, vllm-lora or none, got {self.push_weights!r}")


@dataclass
class PPO:
    """The value head of ``--algorithm ppo`` (``config.ppo``)."""

    vf_coef: float = field(default=0.5, metadata={"help": "PPO: weight of the value loss."})
    gae_lambda: float = field(default=0.95, metadata={"help": "PPO: GAE lambda."})
    gamma: float = field(default=1.0, metadata={"help": "PPO: discount per model token."})

    def __post_init__(self) -> None:
        if self.vf_coef < 0 or not 0 <= self.gae_lambda <= 1 or not 0 < self.gamma <= 1:
            raise ConfigError("vf_coef must be >= 0, gae_lambda in [0, 1], gamma in (0, 1]")


@dataclass
class OnlineRLConfig(PolicyGradientFields, RunConfig):
    """Online RL: the policy acts in a live environment each iteration and learns from it.

    Each iteration samples ``tasks_per_iteration`` tasks from ``tasks_file``, plays
    ``group_size`` episodes of each with the current weights, scores them (environment outcome +
    process rewards - format penalties) and takes ``grpo_iterations`` optimizer steps on them,
    each accumulating over micro-batches of ``batch_size`` episodes.
    """

    recipe: ClassVar[str] = "grpo"  # offline and online GRPO share ./output/grpo

    batch_size: int = 8
    learning_rate: float = 1e-5
    env_id: str | None = field(
        default=None, metadata={"help": "Registered environment id (knowlyr-core make()), e.g. knowlyr/retail."}
    )
    tasks_file: str | None = field(
        default=None, metadata={"help": "Tasks JSONL (knowlyr-hub tasks ...) the iterations sample from."}
    )
    env_kwargs: dict[str, Any] | None = field(
        default=None, metadata={"help": "Keyword arguments for the environment's constructor."}
    )
    group_size: int = field(default=4, metadata={"help": "Episodes per task per iteration."})
    tasks_per_iteration: int = field(default=4, metadata={"help": "Tasks sampled per iteration."})
    num_iterations: int = field(default=10, metadata={"help": "Rollout + update iterations."})
    max_steps: int = field(default=8, metadata={"help": "Steps (model answers) per episode before it is cut."})
    sampling: Sampling = field(default_factory=Sampling, metadata={"group": Sampling})
    prompt: Prompting = field(default_factory=Prompting, metadata={"group": Prompting})
    rewards: Rewards = field(default_factory=Rewards, metadata={"group": Rewards})
    selection: TaskSelection = field(default_factory=TaskSelection, metadata={"group": TaskSelection})
    generation: Generation = field(default_factory=Generation, metadata={"group": Generation})
    ppo: PPO = field(default_factory=PPO, metadata={"group": PPO})

    def __post_init__(self) -> None:
        from agenttrainer.algorithms import algorithm_names

        super().__post_init__()
        algorithm = self.check_policy_gradient()
        if self.group_size is None or self.group_size < 1:
            raise ConfigError(f"group_size must be >= 1, got {self.group_size}")
        if not algorithm.value_head and self.group_size < 2:
            raise ConfigError(f"{self.algorithm} compares episodes of a task: group_size must be >= 2")
        for name in ("tasks_per_iteration", "num_iterations", "max_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        generation = self.generation
        if generation.push_weights == "vllm-lora" and generation.generation_url and not self.lora.use_lora:
            raise ConfigError("push_weights=vllm-lora sends LoRA adapters: set use_lora")
        if generation.push_weights == "vllm" and generation.generation_url and self.lora.use_lora:
            raise ConfigError("push_weights=vllm reloads full weights, LoRA pushes only the adapter: use vllm-lora")
        if self.selection.dynamic_sampling and not algorithm.group_baseline:
            raise ConfigError(
                f"dynamic_sampling keeps groups whose rewards differ; {self.algorithm} does not compare the episodes "
                f"of a group (use {', '.join(algorithm_names(offline=True))})"
            )
