"""Wrapper API of seed 002: ``SFTTrainerWrapper`` and ``GRPOTrainerWrapper``.

Thin adapters over the recipes for callers that hold a dataset object (a Hugging Face
``Dataset``, a list of dicts, or a JSONL path) rather than a file and a config.

* ``SFTTrainerWrapper``: rows in any SFT format, each checked as a
  :class:`~knowlyrcore.datasets.SFTRecord` (a bad one is refused as ``dataset row i: field:
  problem``); writes them to ``<output_dir>/train.jsonl`` and runs
  :class:`~agenttrainer.trainers.sft.SFTTrainer`.
* ``GRPOTrainerWrapper``: rows with a ``prompt`` (text or messages) and any extra columns. Each
  epoch samples ``group_size`` completions per prompt from the current policy, scores them with
  ``reward_fn(completions=[...], prompts=[...], **columns) -> list[float]`` (TRL's reward-function
  convention; columns are repeated per completion), and takes one offline GRPO pass over those
  groups. The optimizer restarts each epoch and the KL reference is the policy at the start of
  that epoch (simplification: generation and training alternate). Completions are sampled in
  batches of ``batch_size`` groups from one RNG stream seeded by ``seed + epoch``: each prompt is
  a one-turn episode that knowlyr-core's acting loop (``knowlyrcore.rollout.play_episodes``)
  plays with the local policy
  (:class:`~agenttrainer.acting.TokenPolicy` over a
  :class:`~agenttrainer.acting.LocalGenerator`). The groups are written as
  :class:`~knowlyrcore.datasets.GRPORecord` lines (``<output_dir>/rollouts-epoch<k>.jsonl``)
  holding the ids the policy sampled (``prompt_token_ids`` and each answer's ``token_ids``), so
  the GRPO pass trains on exactly the tokens that were sampled and scored, not on the decoded
  text tokenised again.

Both pass every other keyword to the config: ``fp16=True`` (refused in one line where the device
has no fp16 training), ``gradient_accumulation_steps``, ``max_optimizer_steps``, ... ``model_name`` may be
an alias, a checkpoint, a Hub id or an earlier run's ``output_dir`` (its ``final/`` model is
loaded). Seed 002's dataset and reward helpers are in :mod:`agenttrainer.compat.hello_agents_rl`.

Example:
    >>> from agenttrainer import SFTTrainerWrapper  # doctest: +SKIP
    >>> result = SFTTrainerWrapper("smollm2-135m", rows, output_dir="./output/sft").train()  # doctest: +SKIP
    >>> result["output_dir"]  # doctest: +SKIP
    './output/sft/final'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from tqdm.auto import tqdm

from agenttrainer.config import GRPOConfig, SFTConfig
from agenttrainer.data.readers import DataError, read_located_records
from agenttrainer.trainers.output_dir import check_output_dir
from knowlyrcore import AgentEnv, TaskInfo, TimeStep, read_jsonl, write_jsonl
from knowlyrcore.datasets import ChatMessage, GRPORecord, GRPOTrajectory, SFTRecord
from knowlyrcore.jsonl import validation_error
from knowlyrcore.wrappers import RecorderWrapper


def _rows(dataset: Any) -> list[dict[str, Any]]:
    if isinstance(dataset, (str, Path)):
        return [r for _, r in read_located_records(dataset)]
    if not isinstance(dataset, Iterable):
        raise TypeError(f"dataset must be a Dataset, a list of dicts or a JSONL path, got {type(dataset).__name__}")
    rows = [dict(r) for r in dataset]
    if not rows:
        raise ValueError("dataset is empty")
    return rows


def _records(rows: list[dict[str, Any]], model: type[BaseModel]) -> list[Any]:
    """``rows`` as ``model`` records (what the recipe reads); a bad row is refused in one line,
    ``dataset row i: field: problem``, before anything is written."""
    records = []
    for i, row in enumerate(rows):
        try:
            records.append(model.model_validate(row))
        except ValidationError as err:
            raise DataError(str(validation_error(f"dataset row {i}", None, err))) from None
    return records


def _lora_fields(use_lora: bool, lora_config: Any) -> dict[str, Any]:
    """``SFTConfig`` LoRA fields from a ``create_lora_config`` result or a dict of its arguments."""
    if not use_lora:
        return {"use_lora": False}
    if lora_config is None:
        return {"use_lora": True}
    get = lora_config.get if isinstance(lora_config, dict) else lambda k, d=None: getattr(lora_config, k, d)
    fields: dict[str, Any] = {"use_lora": True}
    for ours, theirs in (("lora_r", "r"), ("lora_alpha", "lora_alpha"), ("lora_dropout", "lora_dropout")):
        if get(theirs) is not None:
            fields[ours] = get(theirs)
    if get("preset") is not None:
        fields["lora_preset"] = get("preset")
    if get("target_modules") is not None:
        fields["lora_target_modules"] = sorted(get("target_modules"))
    return fields


class SFTTrainerWrapper:
    """Seed 002's SFT wrapper: ``SFTTrainerWrapper(model_name, dataset, ...).train() -> dict``."""

    def __init__(
        self,
        model_name: str,
        dataset: Any,
        output_dir: str = "./output/sft",
        num_epochs: int = 3,
        batch_size: int = 4,
        learning_rate: float = 2e-5,
        use_lora: bool = False,
        lora_config: Any = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        **config: Any,
    ):
        records = _records(_rows(dataset), SFTRecord)
        train_file = Path(output_dir) / "train.jsonl"
        self.config = SFTConfig.from_dict(
            {
                "model_name_or_path": model_name,
                "train_file": str(train_file),
                "output_dir": output_dir,
                "num_epochs": num_epochs,
                "batch_size": batch_size,
                "learning_rate": learning_rate,
                **_lora_fields(use_lora, lora_config),
                **config,
            },
            source="SFTTrainerWrapper",
        )
        check_output_dir(self.config)  # before train.jsonl lands in a folder this run may not use
        write_jsonl(train_file, records)
        from agenttrainer.trainers.sft import SFTTrainer

        self.trainer = SFTTrainer(self.config, model=model, tokenizer=tokenizer)

    def train(self) -> dict[str, Any]:
        return self.trainer.train()

    def save_model(self, path: str) -> Path:
        return self.trainer.save_model(path)


class _OneAnswer(AgentEnv):
    """One turn: the task's ``metadata.prompt`` (text, or a chat as a list of messages) is the
    observation, and the policy's answer ends the episode."""

    def reset(self, *, task: Any = None, seed: int | None = None) -> TimeStep:
        return TimeStep(observation=task.metadata["prompt"])

    def step(self, action: Any) -> TimeStep:
        return TimeStep(observation="", terminated=True)


class GRPOTrainerWrapper:
    """Seed 002's GRPO wrapper: sample groups with the current policy, score, train (see module doc)."""

    def __init__(
        self,
        model_name: str,
        dataset: Any,
        reward_fn: Callable[..., list[float]],
        output_dir: str = "./output/grpo",
        num_epochs: int = 3,
        batch_size: int = 2,
        learning_rate: float = 1e-5,
        use_lora: bool = False,
        lora_config: Any = None,
        *,
        group_size: int = 4,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        model: Any = None,
        tokenizer: Any = None,
        **config: Any,
    ):
        self.rows = _rows(dataset)
        for i, row in enumerate(self.rows):
            if "prompt" not in row:
                raise ValueError(f"dataset row {i} has no 'prompt'")
        self.reward_fn, self.num_epochs = reward_fn, num_epochs
        self.max_new_tokens, self.temperature, self.output_dir = max_new_tokens, temperature, Path(output_dir)
        self.config = GRPOConfig.from_dict(
            {
                "model_name_or_path": model_name,
                "output_dir": output_dir,
                "num_epochs": 1,
                "batch_size": batch_size,
                "learning_rate": learning_rate,
                "group_size": group_size,
                **_lora_fields(use_lora, lora_config),
                **config,
            },
            source="GRPOTrainerWrapper",
        )
        check_output_dir(self.config)  # before any rollout file lands there
        from agenttrainer.trainers.grpo import GRPOTrainer

        self.trainer = GRPOTrainer(self.config, model=model, tokenizer=tokenizer)

    def _rollouts(self, epoch: int) -> Path:
        import torch

        from agenttrainer.acting import LocalGenerator, TokenPolicy
        from knowlyrcore.rollout import play_episodes

        tokenizer, group, per_call = self.trainer.tokenizer, self.config.group_size, self.config.batch_size
        # batch_size prompts at a time, each with its group of completions: one generate call each
        generator = LocalGenerator(self.trainer.model, tokenizer, batch_size=group * per_call, logprobs=False)
        policy = TokenPolicy(generator, tokenizer, max_new_tokens=self.max_new_tokens, temperature=self.temperature)
        sampled: list[tuple[list[int], list[int]]] = []  # per completion: (its prompt's ids, its ids)
        bar = tqdm(
            total=len(self.rows),
            desc=f"sampling epoch {epoch + 1}/{self.num_epochs}",
            unit="prompt",
            leave=False,
            disable=True if not self.config.progress_bar else None,
        )
        with torch.random.fork_rng(devices=[]), bar:  # one seeded RNG stream per epoch
            torch.manual_seed(self.config.seed + epoch)
            for start in range(0, len(self.rows), per_call):
                rows = [row for row in self.rows[start : start + per_call] for _ in range(group)]
                tasks = [TaskInfo(metadata={"prompt": row["prompt"]}) for row in rows]
                envs = [RecorderWrapper(_OneAnswer()) for _ in rows]
                for episode in play_episodes(envs, policy, tasks, max_steps=1):  # one answer each
                    trajectory = episode.trajectory
                    (step,) = trajectory.steps
                    sampled.append((trajectory.metadata["prompt_token_ids"], step.token_ids))
                bar.update(len(rows) // group)
        records = []
        for i, row in enumerate(self.rows):
            attempts = sampled[i * group : (i + 1) * group]
            answers = [tokenizer.decode(ids, skip_special_tokens=True) for _, ids in attempts]
            prompt = row["prompt"]
            extra = {k: [v] * len(answers) for k, v in row.items() if k != "prompt"}
            rewards = self.reward_fn(completions=answers, prompts=[prompt] * len(answers), **extra)
            if len(rewards) != len(answers):
                raise ValueError(f"reward_fn returned {len(rewards)} rewards for {len(answers)} completions")
            # the answers' log-probs are not computed here (logprobs=False): only the ids are recorded
            trajectories = [
                GRPOTrajectory(
                    messages=[ChatMessage(role="assistant", content=answer, token_ids=ids)],
                    reward=float(reward),
                    prompt_token_ids=prompt_ids,
                )
                for answer, (prompt_ids, ids), reward in zip(answers, attempts, rewards)
            ]
            records.append(GRPORecord(task_id=str(row.get("task_id", i)), prompt=prompt, trajectories=trajectories))
        path = self.output_dir / f"rollouts-epoch{epoch}.jsonl"
        write_jsonl(path, records)
        return path

    def train(self) -> dict[str, Any]:
        """``num_epochs`` rounds of sample -> score -> one GRPO pass; returns the last round's result."""
        result: dict[str, Any] = {}
        rewards = []
        for epoch in range(self.num_epochs):
            self.trainer.config.train_file = str(self._rollouts(epoch))
            self.trainer.config.resume_from_checkpoint = None
            scored = [t.reward for g in read_jsonl(self.trainer.config.train_file, GRPORecord) for t in g.trajectories]
            rewards.append(sum(scored) / len(scored))
            result = self.trainer.train()
        return {**result, "reward_mean_per_epoch": rewards}

    def save_model(self, path: str) -> Path:
        return self.trainer.save_model(path)
