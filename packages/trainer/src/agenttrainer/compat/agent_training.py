"""Seed 003's ``sage.tools.agent_training`` names over knowlyr-trainer (and knowlyr-reward).

===================================  ===============================================================
seed 003 name                        knowlyr API
===================================  ===============================================================
``AgentSFTConfig``                   :class:`~agenttrainer.config.SFTConfig` via ``to_sft_config()``:
                                     ``base_model`` -> ``model_name_or_path``,
                                     ``gradient_accumulation`` -> ``gradient_accumulation_steps``,
                                     LoRA, coreset, replay and ``task_weights`` fields 1:1
``train_data`` / ``dev_data``        ``"<suite>:<split>"`` (expert dialogs of a knowlyr task suite,
                                     e.g. ``retail:train``) or a JSONL path; SAGE's ``agent_sft``
                                     source does not exist here (one-line error naming these)
``AgentSFTTrainer``,                 :class:`~agenttrainer.trainers.sft.SFTTrainer`;
``AgentLoRATrainer``                 ``prepare_datasets()`` writes and reads the data (replay
                                     mixed in); coreset selection runs in ``train()`` (it needs
                                     the model's per-example losses)
``RLTrainingConfig``                 ``to_knowlyr_config()``: ``dpo`` -> ``DPOConfig`` (``beta``,
                                     ``reference_free``, ``label_smoothing``, ``loss_type``);
                                     ``ppo`` -> ``OnlineRLConfig(algorithm="ppo")`` (``kl_coef``,
                                     ``clip_range`` -> ``clip_eps``, ``vf_coef``; ``num_rollouts`` -> episodes
                                     per iteration = ``tasks_per_iteration * group_size``
                                     (``group_size`` 2 unless given);
                                     ``chunk_size`` -> ``batch_size``); ``grpo`` ->
                                     ``OnlineRLConfig(algorithm="grpo")`` (``group_size``;
                                     ``beta`` -> ``kl_coef``; ``use_advantage=True`` is GRPO's
                                     group-normalised advantage, ``False`` is refused)
``load_in_4bit`` / ``load_in_8bit``  refused with one line (bitsandbytes needs CUDA; the
                                     recipes train bf16/fp32 weights): use ``use_lora`` and
                                     ``gradient_checkpointing``
``AgentRewardConfig``,               :mod:`agentreward.seed003` (re-exported here when
``AgentRewardModel``                 knowlyr-reward is installed)
``AgentRLTrainer``                   ``dpo``: pairs (expert action chosen, the SFT policy's sampled
                                     reply rejected when it scores lower under the reward) written
                                     as :class:`~knowlyrcore.datasets.DPORecord` lines, the reply
                                     with the ids it was sampled as, then
                                     :class:`~agenttrainer.trainers.dpo.DPOTrainer` from the SFT
                                     model (also the reference); ``ppo`` / ``grpo`` refused in one
                                     line naming ``OnlineRLTrainer``
``AgentTrainingEvaluator``           greedy next action at each expert step of a suite split:
                                     ``tool_selection_accuracy`` (the expert's tool) and
                                     ``plan_success_rate`` (the expert's exact action), per step
===================================  ===============================================================

Names of seed 003 with no counterpart here (``AgentSFTFormatter``, ``AgentTrainingUsage``) raise
``ImportError`` with one line naming the knowlyr equivalent.

Example:
    >>> AgentSFTConfig(base_model="smollm2-135m", gradient_accumulation=2).to_sft_config("t.jsonl").gradient_accumulation_steps
    2
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agenttrainer.config import ConfigError, DPOConfig, OnlineRLConfig, SFTConfig
from knowlyrcore.datasets import ChatMessage, DPORecord
from knowlyrcore.errors import MissingExtraError
from knowlyrcore.jsonl import write_jsonl
from knowlyrcore.tool_parsing import parse_reply

__all__ = [
    "AgentLoRATrainer",
    "AgentRLTrainer",
    "AgentSFTConfig",
    "AgentSFTTrainer",
    "AgentTrainingEvaluator",
    "RLTrainingConfig",
    "SampledReply",
    "next_action_metrics",
    "preference_pairs",
    "reward_scorer",
]

#: ``score(replies, rows) -> list[float]``: next-action replies scored against ``create_rl_dataset`` rows.
Scorer = Callable[[list[str], list[dict[str, Any]]], list[float]]

_QUANTISED = (
    "{name}=True is not supported: knowlyr-trainer trains bf16/fp32 weights and bitsandbytes needs CUDA; "
    "save memory with use_lora=True and gradient_checkpointing=True"
)


def _check_quantisation(config: Any) -> None:
    for name in ("load_in_4bit", "load_in_8bit"):
        if getattr(config, name):
            raise ConfigError(_QUANTISED.format(name=name))


def _data_file(spec: str, path: Path, max_samples: int, seed: int) -> str:
    """``spec`` as a JSONL path: a file as is, ``suite:split`` written as expert dialogs to ``path``."""
    if Path(spec).is_file() or spec.endswith(".jsonl"):
        return spec
    suite, _, split = spec.partition(":")
    if suite == "agent_sft" or not split:
        raise ConfigError(
            f"data {spec!r}: SAGE's data sources do not exist here; use '<suite>:<split>' (e.g. 'retail:train') "
            "or a JSONL path"
        )
    from agenttrainer.compat.hello_agents_rl import expert_sft_records

    write_jsonl(path, expert_sft_records(suite, split, max_samples, seed))
    return str(path)


@dataclass
class AgentSFTConfig:
    """Seed 003's SFT configuration (defaults as in seed 003 except the model and the data)."""

    train_data: str = "retail:train"
    dev_data: str | None = None
    max_samples: int = 1000  # dialogs drawn from a suite spec
    task_weights: dict[str, float] | None = None  # resampling by task_type (the suite's templates)
    base_model: str = "smollm2-135m"
    max_length: int = 4096
    lora_r: int = 64
    lora_alpha: int = 128
    lora_dropout: float = 0.05
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    num_epochs: int = 3
    batch_size: int = 4
    gradient_accumulation: int = 8
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    lr_scheduler: str = "cosine"
    use_coreset_selection: bool = False
    coreset_target_size: int = 1000
    coreset_strategy: str = "hybrid"
    use_online_continual: bool = False
    continual_buffer_size: int = 4096
    continual_replay_ratio: float = 0.3
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    use_lora: bool = True
    output_dir: str = "./output/agent_sft"
    seed: int = 42
    #: Any other SFTConfig field (bf16, fp16, max_optimizer_steps, progress_bar, ...).
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_quantisation(self)
        self.to_sft_config(None)  # every value checked now, by SFTConfig's own rules

    def to_sft_config(self, train_file: str | None, eval_file: str | None = None) -> SFTConfig:
        same = [
            "max_length",
            "lora_r",
            "lora_alpha",
            "lora_dropout",
            "num_epochs",
            "batch_size",
            "learning_rate",
            "warmup_ratio",
            "lr_scheduler",
            "use_coreset_selection",
            "coreset_target_size",
            "coreset_strategy",
            "use_online_continual",
            "continual_buffer_size",
            "continual_replay_ratio",
            "use_lora",
            "output_dir",
            "seed",
            "task_weights",
        ]
        return SFTConfig.from_dict(
            {
                **{name: getattr(self, name) for name in same},
                "model_name_or_path": self.base_model,
                "train_file": train_file,
                "eval_file": eval_file,
                "gradient_accumulation_steps": self.gradient_accumulation,
                "lora_target_modules": list(self.lora_target_modules),
                **self.extra,
            },
            source="AgentSFTConfig",
        )


class AgentSFTTrainer:
    """Seed 003's SFT trainer: ``prepare_datasets()``, ``train()``, ``save_model(path)``, ``model``."""

    def __init__(self, config: AgentSFTConfig, *, model: Any = None, tokenizer: Any = None):
        from agenttrainer.trainers.sft import SFTTrainer

        self.agent_config = config
        self.output_dir = Path(config.output_dir)
        self.trainer = SFTTrainer(config.to_sft_config(None), model=model, tokenizer=tokenizer)
        self.config = self.trainer.config

    @property
    def model(self) -> Any:
        return self.trainer.model

    def prepare_datasets(self) -> dict[str, int]:
        """Write and read the training (and dev) data; the replay buffer's samples are mixed in.

        Returns the number of new and replayed conversations."""
        c = self.agent_config
        self.config.train_file = _data_file(c.train_data, self.output_dir / "train.jsonl", c.max_samples, c.seed)
        if c.dev_data:
            self.config.eval_file = _data_file(c.dev_data, self.output_dir / "dev.jsonl", c.max_samples, c.seed + 1)
        self.trainer.data = self.trainer.read_data()
        return {"train": len(self.trainer.data["train"]), "replay": len(self.trainer.data["replay"])}

    def train(self) -> dict[str, Any]:
        if self.trainer.data is None:
            self.prepare_datasets()
        return self.trainer.train()

    def save_model(self, path: str | Path) -> Path:
        return self.trainer.save_model(path)


#: Seed 003's LoRA trainer is the same trainer (``AgentSFTConfig.use_lora`` defaults to True).
AgentLoRATrainer = AgentSFTTrainer


@dataclass
class RLTrainingConfig:
    """Seed 003's RL configuration; ``to_knowlyr_config()`` gives the config of the real trainer."""

    algorithm: Literal["dpo", "ppo", "grpo"] = "dpo"
    dpo_config: dict[str, Any] = field(
        default_factory=lambda: {"beta": 0.1, "reference_free": False, "label_smoothing": 0.0, "loss_type": "sigmoid"}
    )
    ppo_config: dict[str, Any] = field(
        default_factory=lambda: {
            "kl_coef": 0.02,
            "clip_range": 0.2,
            "vf_coef": 0.5,
            "num_rollouts": 128,
            "chunk_size": 64,
        }
    )
    grpo_config: dict[str, Any] = field(default_factory=lambda: {"group_size": 4, "beta": 0.1, "use_advantage": True})
    load_in_4bit: bool = False
    load_in_8bit: bool = False

    def __post_init__(self) -> None:
        if self.algorithm not in ("dpo", "ppo", "grpo"):
            raise ConfigError(f"algorithm must be dpo, ppo or grpo, got {self.algorithm!r}")
        _check_quantisation(self)
        self.to_knowlyr_config()

    def to_knowlyr_config(self, **fields: Any) -> DPOConfig | OnlineRLConfig:
        """``DPOConfig`` (dpo) or ``OnlineRLConfig`` (ppo, grpo); ``fields`` set any other field."""
        if self.algorithm == "dpo":
            return DPOConfig.from_dict({**self.dpo_config, **fields}, source="RLTrainingConfig.dpo_config")
        if self.algorithm == "ppo":
            ppo = dict(self.ppo_config)
            rollouts, chunk = ppo.pop("num_rollouts", 128), ppo.pop("chunk_size", 64)
            # episodes per task: GRPOConfig refuses 1 even for ppo, which does not compare them
            group = ppo.pop("group_size", 2)
            if rollouts % group:
                raise ConfigError(f"num_rollouts ({rollouts}) must be a multiple of group_size ({group})")
            mapped = {"algorithm": "ppo", "group_size": group, "tasks_per_iteration": rollouts // group}
            if "clip_range" in ppo:  # PPO's name for the clip range of the ratio
                ppo["clip_eps"] = ppo.pop("clip_range")
            return OnlineRLConfig.from_dict(
                {**mapped, "batch_size": chunk, **ppo, **fields}, source="RLTrainingConfig.ppo_config"
            )
        grpo = dict(self.grpo_config)
        if not grpo.pop("use_advantage", True):
            raise ConfigError(
                "use_advantage=False (raw rewards as advantages) is not supported; use algorithm 'rloo' or 'dr_grpo' "
                "(OnlineRLConfig.algorithm)"
            )
        if "beta" in grpo:
            grpo["kl_coef"] = grpo.pop("beta")
        return OnlineRLConfig.from_dict({"algorithm": "grpo", **grpo, **fields}, source="RLTrainingConfig.grpo_config")


def _expert_text(action: dict[str, Any], closing_tool: str = "respond") -> str:
    """The expert's reply as the suite's dialogs write it (a ``<tool_call>`` block, or the closing text)."""
    from agenttrainer.compat.hello_agents_rl import tool_call_text

    return str(action["params"].get("message", "")) if action["tool"] == closing_tool else tool_call_text(action)


def _rl_rows(spec: str, split: str | None, max_samples: int, seed: int) -> list[dict[str, Any]]:
    """Next-action rows of ``create_rl_dataset``: ``spec`` a suite (``retail``, ``retail:train``) or a JSONL file."""
    from agenttrainer.compat.hello_agents_rl import create_rl_dataset

    if Path(spec).is_file() or spec.endswith(".jsonl"):
        return create_rl_dataset(max_samples=max_samples, data_file=spec)
    suite, _, spec_split = spec.partition(":")
    return create_rl_dataset(split or spec_split or "train", max_samples, suite=suite, seed=seed)


@dataclass(frozen=True)
class SampledReply:
    """A reply as the policy sampled it: its ``text``, its ``token_ids`` and its prompt's
    (``prompt_token_ids``: the chat template's rendering, first assistant header included)."""

    text: str
    token_ids: list[int]
    prompt_token_ids: list[int]


def _replies(
    model: Any, tokenizer: Any, rows: list[dict[str, Any]], max_new_tokens: int, temperature: float, seed: int = 0
) -> list[SampledReply]:
    """The model's reply to each row's prompt (its chat template), sampled in batches of 16
    (``temperature`` 0: greedy) from ``seed`` without touching the global RNG."""
    import torch

    from agenttrainer.acting import LocalGenerator

    prompts = [
        tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=True)["input_ids"]
        for row in rows
    ]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        samples = LocalGenerator(model, tokenizer, batch_size=16, logprobs=False).generate(
            prompts, max_new_tokens=max_new_tokens, temperature=temperature
        )
    return [
        SampledReply(tokenizer.decode(sample.token_ids, skip_special_tokens=True), sample.token_ids, list(prompt))
        for prompt, sample in zip(prompts, samples)
    ]


def _text(reply: str | SampledReply) -> str:
    return reply if isinstance(reply, str) else reply.text


def _trace(prompt: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls already made in a next-action prompt, each with the tool's output."""
    trace: list[dict[str, Any]] = []
    for message in prompt:
        if message["role"] == "assistant":
            action = parse_reply(str(message.get("content") or "")).action
            trace.append({"tool": action["tool"], "params": action.get("params", {}), "output": ""})
        elif message["role"] == "tool" and trace:
            trace[-1]["output"] = str(message.get("content") or "")
    return trace


def reward_scorer(reward_model: Any = None, closing_tool: str = "respond") -> Scorer:
    """``score(replies, rows) -> list[float]`` for next-action replies.

    Without a reward model: :func:`~agenttrainer.compat.hello_agents_rl.create_accuracy_reward`
    (1.0 when the reply is the expert's action, else 0.0). With one (seed 003's
    ``AgentRewardModel``): ``compute_reward(...)["total"]`` of the episode so far ending in the
    reply — ``query`` the user's request, ``execution_trace`` the prompt's tool calls plus the
    reply's (with no output: it has not run), ``response`` the reply's closing message (``""``
    for a tool call), ``ground_truth`` the expert's tools up to this step as ``target_tools`` and,
    when the expert closes here, the task's ``answer_contains``."""
    from agenttrainer.compat.hello_agents_rl import create_accuracy_reward

    if reward_model is None:
        accuracy = create_accuracy_reward(closing_tool)

        def score(replies: list[str], rows: list[dict[str, Any]]) -> list[float]:
            keys = ("expected_action", "answer_contains", "answer_excludes")
            return accuracy(replies, **{k: [row.get(k) for row in rows] for k in keys})

        return score

    def score_with_model(replies: list[str], rows: list[dict[str, Any]]) -> list[float]:
        scores = []
        for reply, row in zip(replies, rows):
            action, expected, trace = (
                parse_reply(reply, closing_tool=closing_tool).action,
                row["expected_action"],
                _trace(row["prompt"]),
            )
            query = next((str(m["content"]) for m in row["prompt"] if m["role"] == "user"), "")
            target = [step["tool"] for step in trace] + ([expected["tool"]] if expected["tool"] != closing_tool else [])
            truth: dict[str, Any] = {"target_tools": target}
            if expected["tool"] == closing_tool and row.get("answer_contains"):
                truth["answer_contains"] = list(row["answer_contains"])
            if action["tool"] == closing_tool:
                response = str(action["params"].get("message", ""))
            else:
                trace, response = [*trace, {"tool": action["tool"], "params": action.get("params", {})}], ""
            scores.append(float(reward_model.compute_reward(query, response, truth, trace)["total"]))
        return scores

    return score_with_model


def _rejected(reply: str | SampledReply) -> dict[str, Any]:
    """The ``rejected`` side of a pair (and the prompt's ids): a sampled reply keeps its ids, so
    DPO scores the tokens the policy produced rather than its text tokenised again."""
    if isinstance(reply, str):
        return {"rejected": reply}
    message = ChatMessage(role="assistant", content=reply.text, token_ids=reply.token_ids)
    return {"rejected": [message], "prompt_token_ids": reply.prompt_token_ids}


def preference_pairs(
    rows: list[dict[str, Any]], replies: Sequence[str | SampledReply], score: Scorer
) -> list[DPORecord]:
    """DPO records (docs/formats.md "DPO"): for each row, ``chosen`` = the expert's action (text),
    ``rejected`` = the policy's reply, kept only when the reply scores lower (``margin`` > 0). A
    :class:`SampledReply` is written with its token ids and its prompt's (``prompt_token_ids``)."""
    chosen = [_expert_text(row["expected_action"]) for row in rows]
    chosen_scores, reply_scores = score(chosen, rows), score([_text(r) for r in replies], rows)
    return [
        DPORecord(task_id=row["task_id"], prompt=row["prompt"], chosen=good, margin=s_good - s_bad, **_rejected(bad))
        for row, good, bad, s_good, s_bad in zip(rows, chosen, replies, chosen_scores, reply_scores)
        if s_bad < s_good
    ]


class AgentRLTrainer:
    """Seed 003's RL trainer: ``train()``, ``save_model(path)``, ``model``, for ``algorithm="dpo"``.

    ``train()`` builds preference pairs on the next-action prompts of ``train_data`` (a suite
    spec, default ``retail:train``, ``max_samples`` prompts, or a JSONL file of
    ``create_rl_dataset`` rows): ``chosen`` is the expert's action, ``rejected`` the SFT policy's
    own reply (sampled at ``temperature``) when it scores lower under ``reward_model`` (see
    :func:`reward_scorer`; none: the verifiable accuracy reward). Prompts where the policy's
    reply scores as well as the expert's give no pair. The pairs are written to
    ``<output_dir>/pairs.jsonl`` (the reply with the token ids it was sampled as, which DPO scores
    as they are) and trained by :class:`~agenttrainer.trainers.dpo.DPOTrainer`
    (``config.to_knowlyr_config(**fields)``) from the SFT model, which is also the reference.
    ``sft_model_path`` ``None`` starts from ``base_model_path``.

    ``ppo`` / ``grpo`` are refused in one line: they are online RL in a live environment, run by
    :class:`agenttrainer.online.OnlineRLTrainer` with ``config.to_knowlyr_config(env_id=...,
    tasks_file=...)``.
    """

    def __init__(
        self,
        config: RLTrainingConfig,
        base_model_path: str,
        sft_model_path: str | None = None,
        reward_model: Any = None,
        *,
        train_data: str = "retail:train",
        max_samples: int = 256,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        output_dir: str = "./output/agent_dpo",
        seed: int = 42,
        **fields: Any,
    ):
        from agenttrainer.trainers.dpo import DPOTrainer

        if config.algorithm != "dpo":
            raise ConfigError(
                f"AgentRLTrainer runs algorithm 'dpo'; {config.algorithm} is online RL: use "
                "agenttrainer.online.OnlineRLTrainer(rl_config.to_knowlyr_config(env_id=..., tasks_file=...))"
            )
        self.rl_config, self.reward_model = config, reward_model
        self.train_data, self.max_samples, self.seed = train_data, max_samples, seed
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        dpo = config.to_knowlyr_config(
            model_name_or_path=sft_model_path or base_model_path, output_dir=output_dir, seed=seed, **fields
        )
        self.trainer = DPOTrainer(dpo)
        self.config = self.trainer.config

    @property
    def model(self) -> Any:
        return self.trainer.model

    def build_pairs(self) -> list[DPORecord]:
        """Sample the SFT policy on every prompt and keep the pairs it loses (see the class docstring)."""
        rows = _rl_rows(self.train_data, None, self.max_samples, self.seed)
        replies = _replies(
            self.trainer.model, self.trainer.tokenizer, rows, self.max_new_tokens, self.temperature, self.seed
        )
        return preference_pairs(rows, replies, reward_scorer(self.reward_model))

    def train(self) -> dict[str, Any]:
        """Build and write the pairs, then run DPO; returns ``DPOTrainer.train()``'s result."""
        pairs = self.build_pairs()
        if not pairs:
            raise ValueError(
                f"no preference pairs: the SFT policy's replies score as well as the expert's on all "
                f"{self.max_samples} prompts of {self.train_data}; there is nothing for DPO to prefer"
            )
        train_file = Path(self.config.output_dir) / "pairs.jsonl"
        write_jsonl(train_file, pairs)
        self.config.train_file = str(train_file)
        self.trainer.data = self.trainer.read_data()
        return self.trainer.train()

    def save_model(self, path: str | Path) -> Path:
        return self.trainer.save_model(path)


def next_action_metrics(replies: list[str], rows: list[dict[str, Any]], closing_tool: str = "respond") -> dict:
    """``tool_selection_accuracy`` and ``plan_success_rate`` of next-action ``replies`` to ``rows``.

    Over the expert steps (``rows``, from ``create_rl_dataset``): ``tool_selection_accuracy`` is the
    fraction of replies that call the expert's tool (a reply without a tool call is the closing
    ``respond``); ``plan_success_rate`` the fraction that are the expert's action — the same tool
    with the same arguments, or for the closing reply the task's answer checks — as scored by
    :func:`~agenttrainer.compat.hello_agents_rl.create_accuracy_reward`. Each ``{"mean", "count"}``.

    Example:
        >>> row = {"expected_action": {"tool": "get_order", "params": {"order_id": "#W1"}}}
        >>> m = next_action_metrics(['<tool_call>{"name": "get_order", "arguments": {"order_id": "#W2"}}</tool_call>'], [row])
        >>> m["tool_selection_accuracy"]["mean"], m["plan_success_rate"]["mean"]
        (1.0, 0.0)
    """
    if not rows or len(replies) != len(rows):
        raise ValueError(f"need one reply per expert step, got {len(replies)} replies for {len(rows)} steps")
    tools = [parse_reply(reply, closing_tool=closing_tool).action["tool"] for reply in replies]
    same_tool = [float(tool == row["expected_action"]["tool"]) for tool, row in zip(tools, rows)]
    exact = reward_scorer(None, closing_tool)(replies, rows)
    n = len(rows)
    return {
        "tool_selection_accuracy": {"mean": sum(same_tool) / n, "count": n},
        "plan_success_rate": {"mean": sum(exact) / n, "count": n},
    }


class AgentTrainingEvaluator:
    """Seed 003's evaluator: next-action accuracy of a model on a suite's expert steps.

    ``benchmark`` is a task suite (``"retail"``; ``evaluate``'s ``split`` picks its split) or a
    JSONL file of ``create_rl_dataset`` rows (``prompt``, ``expected_action``; used whatever the
    split). ``evaluate(model, split)`` replays the expert's dialogs: at each expert step (the
    dialog so far, as the environment answered the expert) the model's greedy reply is its next
    action, scored by :func:`next_action_metrics`. It does not play whole episodes, so
    ``plan_success_rate`` is per step (the step's action is exactly the expert's), not per task.
    """

    def __init__(self, benchmark: str = "retail", *, seed: int = 0):
        self.benchmark, self.seed = benchmark, seed

    def evaluate(
        self, model: Any, split: str = "test", tokenizer: Any = None, max_samples: int = 200, max_new_tokens: int = 128
    ) -> dict[str, dict[str, float]]:
        """Metrics over the first ``max_samples`` expert steps of ``split``. ``model`` is a loaded
        model (its tokenizer is read from ``model.name_or_path`` unless given) or a checkpoint
        directory / alias."""
        from agenttrainer.models import load_model_and_tokenizer, load_tokenizer

        if isinstance(model, (str, Path)):
            model, tokenizer = load_model_and_tokenizer(str(model))
        elif tokenizer is None:
            if not getattr(model, "name_or_path", ""):
                raise ValueError("the model has no name_or_path to read its tokenizer from; pass tokenizer=")
            tokenizer = load_tokenizer(model.name_or_path)
        rows = _rl_rows(self.benchmark, split, max_samples, self.seed)
        replies = _replies(model, tokenizer, rows, max_new_tokens, temperature=0.0)
        return next_action_metrics([reply.text for reply in replies], rows)


try:  # the reward half of seed 003 lives in knowlyr-reward (the ``online`` extra)
    from agentreward.seed003 import AgentRewardConfig, AgentRewardModel

    __all__ += ["AgentRewardConfig", "AgentRewardModel"]
except ImportError:
    pass

_ELSEWHERE = {
    "AgentSFTFormatter": "agenttrainer.compat.hello_agents_rl.create_sft_dataset (chat records with <tool_call> blocks)",
    "AgentTrainingUsage": "agenttrainer.compat.hello_agents_rl.create_sft_dataset / create_rl_dataset",
}


def __getattr__(name: str) -> Any:
    if name in ("AgentRewardConfig", "AgentRewardModel"):  # here only when the import above failed
        raise MissingExtraError(f"{name} (agentreward.seed003)", "knowlyr-trainer", "online", module="agentreward")
    if name in _ELSEWHERE:
        raise ImportError(f"{name} is not provided by agenttrainer.compat.agent_training; use {_ELSEWHERE[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
