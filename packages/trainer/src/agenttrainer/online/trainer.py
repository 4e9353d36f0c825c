"""Online agent RL: act in live environments, score, update, repeat (``OnlineRLTrainer``).

One iteration:

1. **Rollouts.** ``tasks_per_iteration`` tasks (every task once per pass over ``tasks_file``,
   in a seeded order; or drawn by running pass rate, ``task_sampling="pass_rate"``) x
   ``group_size`` episodes with the current weights, batched across episodes
   (``collect_rollouts``), token ids and sampling-time log-probs kept. With
   ``dynamic_sampling``, further tasks are played until ``tasks_per_iteration`` groups have
   rewards that differ (``online/sampling.py``), and only those groups are trained on.
2. **Rewards.** A rollout's reward is the environment's (its step rewards summed, the outcome)
   plus ``process_reward_coef`` x the mean process reward of its steps (knowlyr-reward's rule
   layer by default; ``learned:CHECKPOINT``, a learned process reward model's step values) minus
   ``format_penalty`` per malformed tool call. Rollouts that failed for infrastructure reasons
   are masked: out of the group statistics, out of the loss, counted.
3. **Advantages**, by the ``algorithm`` (``agenttrainer.algorithms``, one module each): group
   baselines (``grpo``, ``dr_grpo``, ``rloo``, ``gspo``), spread over the steps by their process
   rewards without changing sign (``step_level_advantage``); ``ppo``: GAE over the model's
   tokens with a value head on the policy's last hidden state (rewards on each step's last
   token, the outcome on the final one), whitened over the batch; ``rft``: 1 for a successful
   episode and 0 for the rest (rejection fine-tuning on the policy's own samples).
4. **Update.** ``grpo_iterations`` optimizer steps over the rollouts, each accumulating over
   micro-batches of ``batch_size`` episodes: the algorithm's loss (a clipped surrogate) against
   the log-probs before the first step, plus ``kl_coef`` x the k3 KL to the reference (the adapter-disabled base with
   LoRA, a frozen copy of the initial weights otherwise), plus ``vf_coef`` x the clipped value
   loss for PPO. The ids trained on are the ids sampled; the mean absolute difference between
   their sampling-time and training-time log-probs is logged (``train/logprob_mismatch``). The
   episodes of a micro-batch compute the tokens they share (a group's prompt, often its first
   answers) once, in the policy, old and reference passes alike (``share_prefix``).
5. **Sync.** The in-process generator drops its caches; a server gets the new weights
   (``push_weights``).

Every iteration is seeded from ``seed`` and its number (task order, sampling, episode seeds),
so a run resumed from a checkpoint (``save_steps`` counts iterations) repeats the iterations it
had not finished exactly as an uninterrupted run would.
"""

from __future__ import annotations

import copy
import importlib
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from agenttrainer.acting.generators import Generator, LocalGenerator, ServerGenerator
from agenttrainer.algorithms import get_algorithm
from agenttrainer.algorithms.ppo import gae, value_loss, whiten
from agenttrainer.algorithms.registry import loss_options
from agenttrainer.algorithms.steps import spread_over_steps
from agenttrainer.checkpoints import load_checkpoint, resolve_checkpoint, save_checkpoint
from agenttrainer.config import ConfigError, OnlineRLConfig
from agenttrainer.data import DataError, Example
from agenttrainer.logging_backends import MetricsLogger
from agenttrainer.models.attention import HiddenStates, base_model
from agenttrainer.models.prompt_contract import PromptContract, attach_contract, contract_of
from agenttrainer.models.shared_prefix import token_logps
from agenttrainer.online.rollout import Rollout, collect_rollouts
from agenttrainer.online.sampling import informative_groups, pass_rate_indices, record_outcomes, sequential_indices
from agenttrainer.trainers.loop import optimizer_step
from agenttrainer.trainers.output_dir import check_extras, check_output_dir, claim_output_dir
from agenttrainer.trainers.setup import load_policy, make_accelerator, make_optimizer_and_scheduler
from knowlyrcore import TaskInfo, Trajectory, read_jsonl, write_trajectories
from knowlyrcore.errors import DataFormatError, require_extra

IGNORE_INDEX = -100


def load_tasks(path: str | Path) -> list[TaskInfo]:
    """Tasks of a JSONL file (``knowlyr-hub tasks`` output); a bad record names its line."""
    tasks = []
    try:
        for line, record in enumerate(read_jsonl(path), start=1):
            try:
                tasks.append(TaskInfo.coerce(record))
            except (TypeError, ValueError) as exc:
                errors = exc.errors() if hasattr(exc, "errors") else []  # pydantic names the field
                if errors:
                    field = ".".join(str(part) for part in errors[0]["loc"]) or "record"
                    raise DataError(f"{path}:{line}: {field}: {errors[0]['msg']}") from None
                raise DataError(f"{path}:{line}: not a task ({str(exc).splitlines()[0]})") from None
    except DataFormatError as exc:
        raise DataError(str(exc)) from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read tasks ({exc.strerror or exc})") from None
    if not tasks:
        raise DataError(f"{path}: no tasks")
    return tasks


def engine_process_reward(prm: str | None = None) -> Any:
    """knowlyr-reward's rule layer as ``fn(trajectory) -> [step reward, ...]`` (one engine per
    domain); with ``prm`` (a checkpoint directory) its learned layer instead: each step's
    predicted chance that the task succeeds from there."""
    setting = f"process_reward='learned:{prm}'" if prm else "process_reward='rules'"
    RewardEngine = require_extra(
        "agentreward", "knowlyr-trainer", "online", setting, hint="or set process_reward to none"
    ).RewardEngine
    engines: dict[str, Any] = {}

    def engine_for(domain: str) -> Any:
        key = "learned" if prm else domain  # the learned layer reads any domain: one engine, loaded once
        if key not in engines:
            engines[key] = RewardEngine(layers=("learned",), prm=prm) if prm else RewardEngine(domain=domain)
        return engines[key]

    def score(trajectory: Trajectory) -> list[float]:
        engine = engine_for(trajectory.task.domain or "generic")
        return [float(reward or 0.0) for reward in engine.score(trajectory).step_rewards]

    if prm:
        engine_for("generic")  # a bad checkpoint stops the run before any rollout
    return score


def resolve_process_reward(name: str) -> Any:
    if name == "none":
        return None
    if name == "rules":
        return engine_process_reward()
    if name.startswith("learned:"):
        return engine_process_reward(prm=name.removeprefix("learned:"))
    module, _, attr = name.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"process_reward={name!r}: cannot load it ({exc})") from None


def make_group_judge(config: OnlineRLConfig) -> Any:
    """knowlyr-reward's group-relative judge at ``rewards.group_judge_url`` (None when unset); its
    key comes from the environment, never the config (configs are saved with runs)."""
    rewards = config.rewards
    if not rewards.group_judge_url:
        return None
    relative = require_extra("agentreward.relative", "knowlyr-trainer", "online", "group_judge_url")
    judge = relative.Judge(
        model=rewards.group_judge_model,
        base_url=rewards.group_judge_url,
        api_key=os.environ.get("KNOWLYR_JUDGE_API_KEY"),
        max_tokens=64 + 16 * config.group_size,  # room for G scores after a few words
    )
    judge.connect()  # a missing SDK (knowlyr-reward[llm]) stops the run here, before any rollout
    return relative.RelativeJudge(judge, seed=config.seed)


class OnlineRLTrainer:
    """``OnlineRLTrainer(config).train()``; pass ``model``/``tokenizer`` to train a loaded model,
    ``generator`` to sample with something other than the config's backend, ``process_reward``
    for a custom ``fn(trajectory) -> [step rewards]``."""

    def __init__(
        self,
        config: OnlineRLConfig,
        *,
        model: Any = None,
        tokenizer: Any = None,
        generator: Generator | None = None,
        process_reward: Any = "config",
    ) -> None:
        c = config
        if not c.env_id or not c.tasks_file:
            raise ConfigError("online RL needs env_id and tasks_file")
        self.config = c
        check_extras(c)
        check_output_dir(c)
        self.accelerator = make_accelerator(c)
        if self.accelerator.num_processes > 1:
            raise ConfigError(
                "online RL runs in one training process; scale generation out with generation_url instead"
            )
        self.tasks = load_tasks(c.tasks_file)
        claim_output_dir(c)
        self.pass_rates: dict[str, list[int]] = {}  # str(task index) -> [successes, attempts]
        self.process_reward = (
            resolve_process_reward(c.rewards.process_reward) if process_reward == "config" else process_reward
        )
        self.group_judge = make_group_judge(c)
        self.model, self.tokenizer = load_policy(c, model, tokenizer)
        self.prompt = self._prompt_contract()
        attach_contract(self.model, self.prompt)  # the checkpoints this run writes are prompted this way
        self.wrapped = HiddenStates(self.model)
        self.algorithm = get_algorithm(c.algorithm)
        hidden = base_model(self.model).config.hidden_size
        self.value_head = nn.Linear(hidden, 1) if self.algorithm.value_head else None
        if self.value_head is not None:
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)
        self.trainable = nn.ModuleDict({"policy": self.wrapped})
        if self.value_head is not None:
            self.trainable["value_head"] = self.value_head
        # The reference of the KL: with LoRA the base under disabled adapters, else a frozen copy
        # of the initial weights (taken before any checkpoint is loaded into the policy).
        self.reference: HiddenStates | None = None
        if c.kl_coef and not c.lora.use_lora:
            frozen = copy.deepcopy(self.model).eval()
            frozen.requires_grad_(False)
            self.reference = HiddenStates(frozen)
        if generator is not None:
            self.generator = generator
        elif c.generation.generation_url:
            # The key comes from the environment, never the config: configs are saved with runs.
            self.generator = ServerGenerator(
                c.generation.generation_url,
                c.generation.served_model_name or c.model_name_or_path,
                push_weights=c.generation.push_weights,
                api_key=os.environ.get("KNOWLYR_GENERATION_API_KEY") or os.environ.get("KNOWLYR_SERVE_API_KEY"),
            )
        else:
            self.generator = LocalGenerator(
                self.model,
                self.tokenizer,
                batch_size=c.generation.generation_batch_size,
                reuse_cache=c.generation.reuse_cache,
            )

    def _prompt_contract(self) -> PromptContract:
        """How episodes are prompted: the config's fields where set, else the starting model's
        prompt contract (a checkpoint keeps being prompted as it was trained), else the tasks'
        own system prompt (``metadata.system_prompt``, used per task) with tool schemas shown."""
        asked, saved = self.config.prompt, contract_of(self.model)
        system = asked.system_prompt if asked.system_prompt is not None else (saved.system_prompt if saved else None)
        include_tools = (
            asked.include_tools if asked.include_tools is not None else (saved.include_tools if saved else True)
        )
        if system is None:  # the tasks' own prompt; the checkpoints can name it when the tasks share one
            shared = {t.metadata.get("system_prompt") or None for t in self.tasks}
            system = shared.pop() if len(shared) == 1 else None
        return PromptContract(system_prompt=system, include_tools=include_tools)

    # -- one iteration's pieces -----------------------------------------------------------

    def iteration_task_indices(self, iteration: int) -> list[int]:
        """Indices into ``self.tasks`` of the tasks ``iteration`` plays (``task_sampling``)."""
        c = self.config
        if c.selection.task_sampling == "pass_rate":
            rng = random.Random(c.seed * 1_000_003 + iteration)
            return pass_rate_indices(
                len(self.tasks), c.tasks_per_iteration, self.pass_rates, c.selection.pass_rate_band, rng
            )
        return sequential_indices(len(self.tasks), iteration, c.tasks_per_iteration, c.seed)

    def iteration_tasks(self, iteration: int) -> list[TaskInfo]:
        return [self.tasks[i] for i in self.iteration_task_indices(iteration)]

    def rollout(self, iteration: int, indices: list[int] | None = None, refill_round: int = 0) -> list[Rollout]:
        """``group_size`` episodes of each task in ``indices`` (default: the iteration's tasks);
        ``refill_round`` > 0 plays dynamic sampling's extra tasks on seeds of their own."""
        c = self.config
        indices = self.iteration_task_indices(iteration) if indices is None else indices
        torch.manual_seed(c.seed * 1_000_003 + iteration + 7919 * refill_round)  # sampling repeats on resume
        episodes = len(indices) * c.group_size
        bar = self._inner_bar(total=c.max_steps, desc=f"iteration {iteration + 1} rollouts", unit="turn")
        bar.set_postfix(live=f"{episodes}/{episodes}")

        def on_turn(turn: int, live: int) -> None:
            bar.update(1)
            bar.set_postfix(live=f"{live}/{episodes}")

        try:
            return self._collect(indices, iteration, refill_round, on_turn)
        finally:
            bar.close()

    def _inner_bar(self, **kwargs: Any) -> Any:
        """A transient bar inside an iteration: off with ``progress_bar=False`` and when stderr is not a TTY."""
        return tqdm(leave=False, disable=True if not self.config.progress_bar else None, **kwargs)

    def _collect(self, indices: list[int], iteration: int, refill_round: int, on_turn: Any) -> list[Rollout]:
        c = self.config
        return collect_rollouts(
            c.env_id,
            [self.tasks[i] for i in indices],
            self.generator,
            self.tokenizer,
            group_size=c.group_size,
            env_kwargs=c.env_kwargs,
            system_prompt=self.prompt.system_prompt,
            include_tools=self.prompt.include_tools,
            closing_tool=c.prompt.closing_tool,
            max_steps=c.max_steps,
            max_new_tokens=c.sampling.max_new_tokens,
            max_episode_tokens=c.sampling.max_episode_tokens,
            temperature=c.sampling.temperature,
            top_p=c.sampling.top_p,
            seed=c.seed * 1_000_003 + iteration * 10_000 + refill_round * 1_000,
            model_name=c.model_name_or_path,
            on_turn=on_turn,
            vocab_size=self.model.get_input_embeddings().num_embeddings,  # ids a server sends are checked against it
        )

    def refill(
        self, iteration: int, rollouts: list[Rollout], indices: list[int]
    ) -> tuple[list[Rollout], list[int], dict[str, float]]:
        """Dynamic sampling: while fewer than ``tasks_per_iteration`` groups carry a signal, play
        that many more tasks not yet played this iteration (at most ``max_refill_rounds`` rounds).
        Returns every rollout (scored, groups numbered on), every task index, and the counts."""
        c = self.config
        rounds = 0
        while len(informative_groups(rollouts)) < c.tasks_per_iteration and rounds < c.selection.max_refill_rounds:
            rounds += 1
            need = c.tasks_per_iteration - len(informative_groups(rollouts))
            rng = random.Random(c.seed * 1_000_003 + iteration * 10_000 + rounds)
            records = self.pass_rates if c.selection.task_sampling == "pass_rate" else {}
            extra = pass_rate_indices(len(self.tasks), need, records, c.selection.pass_rate_band, rng, exclude=indices)
            if not extra:
                break  # every task was played this iteration
            more = self.rollout(iteration, extra, refill_round=rounds)
            for r in more:
                r.group += len(indices)
            self.score(more)
            rollouts, indices = rollouts + more, indices + extra
        informative = len(informative_groups(rollouts))
        return (
            rollouts,
            indices,
            {
                "rollout/refill_rounds": float(rounds),
                "rollout/informative_groups": float(informative),
                "rollout/uniform_groups": float(len(indices) - informative),
            },
        )

    def with_signal(self, rollouts: list[Rollout]) -> list[Rollout]:
        """The rollouts of the first ``tasks_per_iteration`` groups whose rewards differ."""
        keep = set(informative_groups(rollouts)[: self.config.tasks_per_iteration])
        return [r for r in rollouts if r.group in keep]

    def judge_groups(self, rollouts: list[Rollout]) -> dict[int, float | None]:
        """The group judge's score of each valid rollout whose task has a rubric, by ``id(rollout)``:
        the rollouts of a group are judged together (``None``: the judge abstained)."""
        groups: dict[int, list[Rollout]] = {}
        for r in rollouts:
            if self.group_judge is not None and r.valid and r.trajectory is not None and r.task.metadata.get("rubric"):
                groups.setdefault(r.group, []).append(r)
        scores: dict[int, float | None] = {}
        for members in groups.values():
            task = members[0].task
            judged = self.group_judge.score_group(
                task.description, str(task.metadata["rubric"]), [m.trajectory for m in members]
            )
            scores.update(zip(map(id, members), judged))
        return scores

    def score(self, rollouts: list[Rollout]) -> None:
        """Fill each valid rollout's process step rewards and total reward (and its trajectory's,
        with the group judge's score in its metadata when it was judged)."""
        c = self.config
        judged = self.judge_groups(rollouts)
        for r in rollouts:
            if not r.valid or r.trajectory is None:
                continue
            n = len(r.step_spans)
            steps = [0.0] * n
            if self.process_reward is not None:
                steps = [float(x) for x in self.process_reward(r.trajectory)][:n]
                steps += [0.0] * (n - len(steps))
            r.step_rewards = steps
            coef, penalty = c.rewards.process_reward_coef, c.rewards.format_penalty
            r.reward = r.env_reward + coef * (sum(steps) / n) - penalty * sum(r.format_errors)
            r.reward += c.rewards.group_judge_coef * (judged.get(id(r)) or 0.0)  # an abstention adds nothing
            if not math.isfinite(r.reward):  # one NaN would reach every weight through the advantages
                raise DataError(
                    f"task {r.task.id or '?'}: episode reward is not finite (environment {r.env_reward!r}, "
                    f"process rewards {steps!r}); fix the environment or process_reward function"
                )
            recorded = [
                s.model_copy(update={"reward": steps[j], "metadata": {**s.metadata, "env_reward": s.reward}})
                for j, s in enumerate(r.trajectory.steps)
            ]
            update: dict[str, Any] = {"steps": recorded, "reward": r.reward}
            if id(r) in judged:
                update["metadata"] = {**r.trajectory.metadata, "group_judge": judged[id(r)]}
            r.trajectory = r.trajectory.model_copy(update=update)

    def token_advantages(self, rollouts: list[Rollout]) -> list[list[float]]:
        """Per valid rollout, one advantage per sampled token (the algorithm's; PPO fills them later)."""
        c = self.config
        by_group: dict[int, list[Rollout]] = {}
        for r in rollouts:
            by_group.setdefault(r.group, []).append(r)
        advantage: dict[int, float] = {}
        for members in by_group.values():
            values = self.algorithm.advantages(
                [m.reward for m in members], [m.success for m in members], [m.valid for m in members]
            )
            for m, a in zip(members, values):
                advantage[id(m)] = a
        out = []
        for r in rollouts:
            if not r.valid:
                continue
            a = advantage[id(r)]
            per_step = spread_over_steps(a, r.step_rewards) if c.step_level_advantage else [a] * len(r.step_spans)
            out.append([per_step[j] for j, (s, e) in enumerate(r.step_spans) for _ in range(e - s)])
        return out

    def token_rewards(self, r: Rollout) -> list[float]:
        """PPO's per-token rewards of a rollout: step terms on each step's last token, outcome (and the
        group judge's score) at the end."""
        c = self.config
        rewards: list[float] = []
        for j, (s, e) in enumerate(r.step_spans):
            rewards += [0.0] * (e - s)
            rewards[-1] += c.rewards.process_reward_coef * r.step_rewards[j] / len(r.step_spans)
            rewards[-1] -= c.rewards.format_penalty * r.format_errors[j]
        judged = r.trajectory.metadata.get("group_judge") if r.trajectory is not None else None
        rewards[-1] += r.env_reward + c.rewards.group_judge_coef * (judged or 0.0)
        return rewards

    # -- model passes -----------------------------------------------------------------------

    @staticmethod
    def example(r: Rollout) -> Example:
        labels = [t if s else IGNORE_INDEX for t, s in zip(r.token_ids, r.sampled)]
        return Example(input_ids=list(r.token_ids), labels=labels, weights=[1.0] * len(r.token_ids))

    def forward(
        self, module: HiddenStates, examples: list[Example], *, values: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Per-token log-probs ``(S, L)`` of the sampled tokens, their mask, and values ``(S, L)``; the
        episodes of a group compute their shared prompt once (``share_prefix``)."""
        c = self.config
        with self.accelerator.autocast():
            rows = token_logps(
                module,
                examples,
                module.lm_head(),
                share_prefix=c.share_prefix,
                device=self.accelerator.device,
                chunk_size=c.loss_chunk_size,
            )
        value = None
        if values:
            v = self.value_head(rows.states().float()).squeeze(-1)  # (n,): from the state before each token
            value = rows.per_row(v)  # (S, L)
        return rows.per_row(), rows.row_mask(), value

    @torch.no_grad()
    def reference_logps(self, examples: list[Example]) -> list[torch.Tensor]:
        out = []
        for mb in self._micro_batches(examples):
            if self.reference is not None:
                logps, mask, _ = self.forward(self.reference, mb)
            else:  # LoRA: the base model is the policy with its adapters switched off
                with self.model.disable_adapter():
                    logps, mask, _ = self.forward(self.wrapped, mb)
            out += [logps[i, : int(mask[i].sum())].float() for i in range(len(mb))]
        return out

    @torch.no_grad()
    def old_logps_and_values(self, examples: list[Example]) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        logps_out, values_out = [], []
        for mb in self._micro_batches(examples):
            logps, mask, values = self.forward(self.wrapped, mb, values=self.value_head is not None)
            for i in range(len(mb)):
                n = int(mask[i].sum())
                logps_out.append(logps[i, :n].float())
                values_out.append(None if values is None else values[i, :n].float())
        return logps_out, values_out

    def _micro_batches(self, items: list[Any]) -> list[list[Any]]:
        size = self.config.batch_size
        return [items[i : i + size] for i in range(0, len(items), size)]

    # -- the update ------------------------------------------------------------------------

    def update(
        self, rollouts: list[Rollout], optimizer: Any, scheduler: Any, state: dict[str, Any]
    ) -> dict[str, float]:
        """``grpo_iterations`` optimizer steps on the valid rollouts; returns the update's metrics."""
        c, algorithm = self.config, self.algorithm
        valid = [r for r in rollouts if r.valid]
        group_advantages: list[list[float]] = []
        uniform = 0
        if not algorithm.value_head:
            group_advantages = self.token_advantages(rollouts)
            if c.selection.skip_uniform_groups:  # no policy-gradient signal: spare their forward and backward
                keep = [k for k, a in enumerate(group_advantages) if any(x != 0.0 for x in a)]
                uniform = len(valid) - len(keep)
                valid, group_advantages = [valid[k] for k in keep], [group_advantages[k] for k in keep]
            if not valid:
                return {"train/uniform_group_episodes": float(uniform)}
        examples = [self.example(r) for r in valid]
        sampling = [torch.tensor([lp for lp, s in zip(r.logprobs, r.sampled) if s]) for r in valid]
        ref = self.reference_logps(examples) if c.kl_coef else None
        old: list[torch.Tensor] | None = None
        values_old: list[torch.Tensor | None] = [None] * len(valid)
        if algorithm.value_head or c.grpo_iterations > 1:
            old, values_old = self.old_logps_and_values(examples)
        if algorithm.value_head:
            advantages, returns = self._ppo_targets(valid, values_old)
        else:
            advantages, returns = [torch.tensor(a) for a in group_advantages], None
        total_tokens = sum(int(a.numel()) for a in advantages)
        options = loss_options(c, algorithm, max_tokens=c.max_steps * c.sampling.max_new_tokens)
        num_items = total_tokens if options["normalization"] == "token" else len(valid)
        params = [p for p in self.trainable.parameters() if p.requires_grad]
        index = list(range(len(valid)))
        sums: dict[str, float] = {}
        mismatch_sum, mismatch_n = 0.0, 0
        micro_batches = self._micro_batches(index)
        bar = self._inner_bar(total=c.grpo_iterations * len(micro_batches), desc="update", unit="micro-batch")
        for epoch in range(c.grpo_iterations):
            self.trainable.train()
            step_loss = 0.0
            for mb in micro_batches:
                logps, mask, values = self.forward(self.wrapped, [examples[i] for i in mb], values=algorithm.value_head)
                adv = _pad([advantages[i] for i in mb], logps)
                ref_t = None if ref is None else _pad([ref[i] for i in mb], logps)
                old_t = logps.detach() if old is None else _pad([old[i] for i in mb], logps)
                loss, metrics = algorithm.loss(logps, old_t, ref_t, adv, mask, num_items=num_items, **options)
                if values is not None and returns is not None:
                    mb_tokens = float(mask.sum())
                    vloss = value_loss(
                        values,
                        _pad([values_old[i] for i in mb], values),
                        _pad([returns[i] for i in mb], values),
                        mask,
                        clip_range=c.clip_eps,
                    )
                    loss = loss + c.ppo.vf_coef * vloss * mb_tokens / total_tokens
                    metrics["train/value_loss"] = float(vloss.detach())
                self.accelerator.backward(loss)
                step_loss += float(loss.detach())
                weight = len(mb) / len(valid)
                for key, v in metrics.items():
                    sums[key] = sums.get(key, 0.0) + v * weight / c.grpo_iterations
                bar.update(1)
                bar.set_postfix(step=f"{epoch + 1}/{c.grpo_iterations}", loss=f"{float(loss.detach()):.4f}")
                if epoch == 0:  # sampling-time vs training-time log-probs of the same tokens
                    current = logps.detach().float()
                    for row, i in enumerate(mb):
                        n = sampling[i].numel()
                        mismatch_sum += float((current[row, :n].cpu() - sampling[i]).abs().sum())
                        mismatch_n += n
            # a NaN reward or log-prob would turn every weight into NaN, and the run would save them
            grad_norm = optimizer_step(
                self.accelerator,
                params,
                optimizer,
                scheduler,
                step=state["optimizer_steps"] + 1,
                loss=step_loss,
                max_grad_norm=c.max_grad_norm,
            )
            state["optimizer_steps"] += 1
            sums["loss/train"] = step_loss
            if grad_norm is not None:
                sums["train/grad_norm"] = float(grad_norm)
        bar.close()
        sums["train/uniform_group_episodes"] = float(uniform)
        sums["train/episodes"] = float(len(valid))
        sums["train/logprob_mismatch"] = mismatch_sum / max(mismatch_n, 1)
        sums["train/learning_rate"] = scheduler.get_last_lr()[0]
        sums["train/tokens"] = float(sum(len(ex) for ex in examples) * c.grpo_iterations)
        # the per-sequence mean the loss reports (loss/grpo, ...): loss/train says it for the whole step
        return {k: v for k, v in sums.items() if k in ("loss/train", "loss/pg") or not k.startswith("loss/")}

    def _ppo_targets(
        self, valid: list[Rollout], values_old: list[torch.Tensor | None]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """GAE advantages (whitened over all tokens of the batch) and returns per rollout."""
        c = self.config
        advantages, returns = [], []
        for r, v in zip(valid, values_old):
            rewards = torch.tensor(self.token_rewards(r))
            a = gae(rewards, v, gamma=c.ppo.gamma, lam=c.ppo.gae_lambda)
            advantages.append(a)
            returns.append(a + v)
        return whiten(advantages), returns

    # -- the loop ---------------------------------------------------------------------------

    def train(self, *, stop_after: int | None = None) -> dict[str, Any]:
        """Run the iterations (``stop_after`` stops early, as an interruption would; resume continues)."""
        c, acc = self.config, self.accelerator
        total_updates = c.num_iterations * c.grpo_iterations
        optimizer, scheduler = make_optimizer_and_scheduler(self.trainable, c, total_updates)
        self.trainable, optimizer = acc.prepare(self.trainable, optimizer)
        state: dict[str, Any] = {"global_step": 0, "optimizer_steps": 0, "history": [], "pass_rates": self.pass_rates}
        resume = resolve_checkpoint(c)
        if resume is not None:
            state.update(load_checkpoint(resume, acc, self.trainable, optimizer, scheduler))
            self.pass_rates = state.setdefault("pass_rates", {})  # task sampling continues from them
            self.generator.weights_updated(self.model, path=self._push_weights(state["global_step"]))
        logger = MetricsLogger(
            c.output_dir, c.report_to, run_name=c.run_name or Path(c.output_dir).name, config=c.to_dict(), enabled=True
        )
        bar = tqdm(
            total=c.num_iterations,
            initial=state["global_step"],
            desc=f"online {c.algorithm}",
            disable=not c.progress_bar,
        )
        started = time.perf_counter()
        try:
            for iteration in range(state["global_step"], c.num_iterations):
                if stop_after is not None and iteration >= stop_after:
                    break
                if 0 < c.max_optimizer_steps <= state["optimizer_steps"]:
                    break
                metrics = self.run_iteration(iteration, optimizer, scheduler, state)
                state["global_step"] = iteration + 1  # checkpoints are numbered by iteration
                state["history"].append({"iteration": iteration + 1, **metrics})
                logger.log(metrics, iteration + 1)
                bar.update(1)
                bar.set_postfix(
                    reward=f"{metrics['rollout/reward_mean']:.3f}",
                    success=f"{metrics['rollout/success_rate']:.0%}",
                    kl=f"{metrics.get('train/kl', 0.0):.4f}",
                    masked=int(metrics["rollout/masked_episodes"]),
                )
                if c.save_steps and state["global_step"] % c.save_steps == 0:
                    save_checkpoint(
                        acc, self.trainable, optimizer, scheduler, c, state, lm=self.model, tokenizer=self.tokenizer
                    )
        finally:
            bar.close()
            logger.close()
        final_dir = self.save_model(Path(c.output_dir) / "final")
        history = state["history"]
        seconds = [h["rollout/seconds"] + h.get("train/seconds", 0.0) for h in history]
        return {
            "output_dir": str(final_dir),
            "iterations": state["global_step"],
            "optimizer_steps": state["optimizer_steps"],
            "reward_curve": [round(h["rollout/reward_mean"], 4) for h in history],
            "success_curve": [round(h["rollout/success_rate"], 4) for h in history],
            "seconds_per_iteration": round(sum(seconds) / len(seconds), 2) if seconds else None,
            "masked_episodes": int(sum(h["rollout/masked_episodes"] for h in history)),
            "seconds": round(time.perf_counter() - started, 1),
        }

    def run_iteration(self, iteration: int, optimizer: Any, scheduler: Any, state: dict[str, Any]) -> dict[str, float]:
        c = self.config
        t0 = time.perf_counter()
        indices = self.iteration_task_indices(iteration)
        rollouts = self.rollout(iteration, indices)
        self.score(rollouts)
        refilled: dict[str, float] = {}
        if c.selection.dynamic_sampling:
            rollouts, indices, refilled = self.refill(iteration, rollouts, indices)
        rollout_seconds = time.perf_counter() - t0
        valid = [r for r in rollouts if r.valid]
        metrics = {**rollout_metrics(rollouts, rollout_seconds), **refilled}
        record_outcomes(self.pass_rates, ((indices[r.group], bool(r.success)) for r in valid))
        recorded = [r.trajectory for r in valid if r.trajectory is not None]
        if recorded:
            path = Path(c.output_dir) / "rollouts" / f"iteration-{iteration + 1:05d}.jsonl"
            path.unlink(missing_ok=True)  # a resumed run rewrites the iteration it repeats
            write_trajectories(path, recorded)
        if not valid:
            return metrics  # every episode failed for infrastructure reasons: nothing to learn from
        t1 = time.perf_counter()
        steps_before = state["optimizer_steps"]
        metrics.update(
            self.update(
                self.with_signal(rollouts) if c.selection.dynamic_sampling else rollouts, optimizer, scheduler, state
            )
        )
        if state["optimizer_steps"] > steps_before:
            self.generator.weights_updated(self.model, path=self._push_weights(iteration + 1))
        metrics["train/seconds"] = time.perf_counter() - t1
        if "train/tokens" in metrics:
            metrics["train/tokens_per_second"] = metrics["train/tokens"] / max(metrics["train/seconds"], 1e-9)
        return metrics

    def _push_weights(self, iteration: int) -> str | None:
        """Save the current weights where a generation server can load them (None when local)."""
        if not isinstance(self.generator, ServerGenerator) or self.config.generation.push_weights == "none":
            return None
        from agenttrainer.models import save_model

        path = Path(self.config.output_dir) / "push" / f"iteration-{iteration:05d}"
        save_model(self.model, self.tokenizer, path, merge_lora=False)  # LoRA: only the adapter travels
        return str(path.resolve())

    def save_model(self, path: str | Path) -> Path:
        from agenttrainer.models import save_model

        save_model(self.model, self.tokenizer, path)
        if self.value_head is not None:
            torch.save(self.value_head.state_dict(), Path(path) / "value_head.pt")
        return Path(path)


def rollout_metrics(rollouts: list[Rollout], seconds: float) -> dict[str, float]:
    """What an iteration's episodes did: reward, success, format errors, masked episodes, speed."""
    valid = [r for r in rollouts if r.valid]
    n = max(len(valid), 1)
    sampled = sum(r.sampled_tokens for r in valid)
    entropies = [e for r in valid for e in r.entropies]
    metrics = {
        "rollout/reward_mean": sum(r.reward for r in valid) / n,
        "rollout/env_reward_mean": sum(r.env_reward for r in valid) / n,
        "rollout/step_reward_mean": sum(sum(r.step_rewards) / max(len(r.step_rewards), 1) for r in valid) / n,
        # an episode cut by the turn or token budget has no verdict: it did not succeed
        "rollout/success_rate": sum(bool(r.success) for r in valid) / n,
        "rollout/format_errors": float(sum(sum(r.format_errors) for r in valid)),
        "rollout/masked_episodes": float(len(rollouts) - len(valid)),
        "rollout/episodes": float(len(rollouts)),
        "rollout/turns_mean": sum(len(r.step_spans) for r in valid) / n,
        "rollout/sampled_tokens": float(sampled),
        "rollout/seconds": seconds,
        "rollout/tokens_per_second": sampled / max(seconds, 1e-9),
    }
    if entropies:
        metrics["rollout/entropy"] = sum(entropies) / len(entropies)
    judged = [
        r.trajectory.metadata["group_judge"] for r in valid if "group_judge" in getattr(r.trajectory, "metadata", {})
    ]
    if judged:
        scores = [s for s in judged if s is not None]
        metrics["judge/episodes"] = float(len(judged))
        metrics["judge/abstained"] = float(len(judged) - len(scores))
        if scores:
            metrics["judge/score_mean"] = sum(scores) / len(scores)
    return metrics


def _pad(rows: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """Right-pad per-sequence rows to ``like``'s ``(S, L)`` shape, on its device."""
    out = torch.zeros(like.shape, dtype=torch.float32, device=like.device)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row.to(like.device)
    return out
