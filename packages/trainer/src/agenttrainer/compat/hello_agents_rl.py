"""Seed 002's ``hello_agents.rl`` / ``hello_agents.tools`` names over knowlyr-trainer.

===========================  ==================================================================
seed 002 name                knowlyr API
===========================  ==================================================================
``SFTTrainerWrapper``        :class:`agenttrainer.wrapper.SFTTrainerWrapper` (``SFTTrainer``)
``GRPOTrainerWrapper``       :class:`agenttrainer.wrapper.GRPOTrainerWrapper` (``GRPOTrainer``)
``create_lora_config``       :func:`agenttrainer.models.create_lora_config` (a ``peft.LoraConfig``)
``create_sft_dataset``       expert dialogs of a knowlyr task suite (see below), or a JSONL file
``create_rl_dataset``        next-action prompts from the same dialogs, with the expert's action
``create_accuracy_reward``   exact match of the parsed tool call (answer check for the reply)
``RLTrainingTool``           an agent tool: ``run({"action": "train"|"evaluate", ...})``
``fp16=True``                ``TrainConfig.fp16`` (accepted where the device computes fp16,
                             refused with one line elsewhere, e.g. on a CPU)
===========================  ==================================================================

Data. Seed 002 downloads GSM8K; nothing is downloaded here. The datasets come from a task suite
(found by knowlyr-sandbox's ``agentsandbox.suites.get_suite``, as ``knowlyr-hub`` finds them:
``retail``, ``coding``, ``bfcl``, ... and any other ``knowlyr.task_suites`` entry point): each
task is played by the suite's scripted expert in its real environment, through knowlyr-core's
acting loop (``knowlyrcore.rollout.play_episodes``, capped at the suite's ``max_steps``), so
every observation is what the environment returned. ``create_sft_dataset`` gives one chat
record per task (an :class:`~knowlyrcore.datasets.SFTRecord` as a dict: system prompt, request,
the expert's tool calls as ``<tool_call>`` blocks, tool results, the final reply).
``create_rl_dataset`` gives one prompt per expert step: the dialog up to that step, with the
expert's action in ``expected_action`` and the task's answer checks (``answer_contains`` /
``answer_excludes``) for the final reply. ``data_file=`` reads a JSONL file instead (any SFT
format; RL rows need ``prompt`` plus ``expected_action`` or ``answer_contains``).

Simplification: ``create_rl_dataset`` is single-turn next-action RL (what ``GRPOTrainerWrapper``
trains); multi-turn RL in a live environment is ``knowlyr-trainer online``.

Example:
    >>> reward = create_accuracy_reward()
    >>> reward(completions=['<tool_call>{"name": "get_order", "arguments": {"order_id": "#W1"}}</tool_call>'],
    ...        expected_action=[{"tool": "get_order", "params": {"order_id": "#W1"}}])
    [1.0]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenttrainer.config import ConfigError
from agenttrainer.models import create_lora_config
from agenttrainer.wrapper import GRPOTrainerWrapper, SFTTrainerWrapper
from knowlyrcore.datasets import SFTRecord
from knowlyrcore.errors import require_extra
from knowlyrcore.tool_parsing import parse_reply

__all__ = [
    "GRPOTrainerWrapper",
    "RLTrainingTool",
    "SFTTrainerWrapper",
    "create_accuracy_reward",
    "create_lora_config",
    "create_rl_dataset",
    "create_sft_dataset",
]


def _suite(name: str) -> Any:
    """The task suite ``name``, found as every knowlyr command finds one (``agentsandbox.suites``,
    the ``suites`` extra; without it, ``MissingExtraError``)."""
    suites = require_extra(
        "agentsandbox.suites",
        "knowlyr-trainer",
        "suites",
        f"task suite {name!r}",
        hint="or pass data_file= a JSONL file",
    )
    try:
        return suites.get_suite(name)
    except suites.SuiteError as exc:
        raise ConfigError(f"{exc}; or pass data_file= a JSONL file") from None


def tool_call_text(action: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": action["tool"], "arguments": action.get("params", {})}) + "</tool_call>"


def expert_dialogs(suite: str, split: str, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` tasks of ``suite`` played by its expert: ``{task, messages, actions}`` per task.

    Each task is one episode of knowlyr-core's acting loop, capped at the suite's ``max_steps``
    (the expert's budget, with room to spare: an expert that does not finish in it means a
    broken suite). The closing reply (``respond``) is plain assistant text, as a chat model
    answers; every other action is a ``<tool_call>`` block followed by the environment's
    observation as a tool message."""
    from knowlyrcore import make
    from knowlyrcore.policy import as_batch_policy
    from knowlyrcore.rollout import play_episodes, wrap_episode_env

    spec = _suite(suite)
    dialogs = []
    for task in spec.generate(split, n, seed):  # one environment at a time, as a suite's may be costly
        env = wrap_episode_env(make(spec.env_id, **spec.env_kwargs), max_steps=spec.max_steps)
        try:
            (episode,) = play_episodes([env], as_batch_policy(spec.expert), [task], max_steps=spec.max_steps)
        finally:
            env.close()
        trajectory = episode.trajectory
        if episode.end != "terminated" or not episode.info.get("success", True):
            raise RuntimeError(
                f"the {suite} expert did not solve task {task['id']} in {spec.max_steps} steps "
                f"({episode.end}); the suite is broken"
            )
        messages = [{"role": "system", "content": spec.system_prompt}] if spec.system_prompt else []
        messages.append({"role": "user", "content": trajectory.metadata["initial_observation"]})
        actions = []
        for step in trajectory.steps:
            action = {"tool": step.tool_call.name, "params": step.tool_call.parameters}
            if step.thought:  # the expert's reason, as its solution gives it
                action["thought"] = step.thought
            actions.append(action)
            if action["tool"] == "respond":
                messages.append({"role": "assistant", "content": action["params"]["message"]})
            else:
                messages.append({"role": "assistant", "content": tool_call_text(action)})
                messages.append({"role": "tool", "content": step.observation.output})
        dialogs.append({"task": task, "messages": messages, "actions": actions})
    return dialogs


def expert_sft_records(suite: str, split: str, n: int, seed: int = 0) -> list[SFTRecord]:
    """``n`` expert dialogs of ``suite``'s ``split`` as chat SFT records (``messages``,
    ``task_id``, ``task_type`` = the task's template, ``metadata`` naming suite and split)."""
    records = []
    for d in expert_dialogs(suite, split, n, seed):
        meta = d["task"].get("metadata", {})
        records.append(
            SFTRecord(
                task_id=d["task"]["id"],
                messages=d["messages"],
                task_type=meta.get("template") or d["task"].get("domain"),
                metadata={"suite": suite, "split": split},
            )
        )
    return records


def _file_rows(data_file: str | Path, max_samples: int | None) -> list[dict[str, Any]]:
    from agenttrainer.data import read_located_records

    rows = [record for _, record in read_located_records(data_file)]
    return rows[:max_samples] if max_samples else rows


def _suite_size(max_samples: int | None) -> int:
    if max_samples is None or max_samples < 1:
        raise ConfigError(f"max_samples must be a positive number of suite tasks, got {max_samples!r}")
    return max_samples


def create_sft_dataset(
    split: str = "train",
    max_samples: int | None = 1000,
    *,
    suite: str = "retail",
    data_file: str | Path | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Seed 002's ``create_sft_dataset``: ``max_samples`` expert dialogs of ``suite``'s ``split``
    as chat records (``messages``, ``task_id``, ``task_type`` = the task's template), or the
    first ``max_samples`` records of ``data_file`` (``None``: all of them)."""
    if data_file is not None:
        return _file_rows(data_file, max_samples)
    return [record.model_dump() for record in expert_sft_records(suite, split, _suite_size(max_samples), seed)]


def create_rl_dataset(
    split: str = "train",
    max_samples: int | None = 500,
    model_name: str | None = None,
    *,
    suite: str = "retail",
    data_file: str | Path | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Seed 002's ``create_rl_dataset``: up to ``max_samples`` next-action prompts (chat messages)
    with the expert's ``expected_action`` and the task's ``answer_contains`` / ``answer_excludes``.

    ``model_name`` is accepted as in seed 002, where it picks the chat template; here prompts stay
    chat messages and the trainer renders them with the template of the model it trains."""
    del model_name  # see the docstring: the trained model's own template renders the prompts
    if data_file is not None:
        return _file_rows(data_file, max_samples)
    limit = _suite_size(max_samples)
    rows: list[dict[str, Any]] = []
    for d in expert_dialogs(suite, split, limit, seed):
        meta = d["task"].get("metadata", {})
        assistant_at = [i for i, m in enumerate(d["messages"]) if m["role"] == "assistant"]
        for k, (at, action) in enumerate(zip(assistant_at, d["actions"])):
            rows.append(
                {
                    "task_id": f"{d['task']['id']}/step{k}",
                    "prompt": d["messages"][:at],
                    "expected_action": action,
                    "answer_contains": list(meta.get("answer_contains", [])),
                    "answer_excludes": list(meta.get("answer_excludes", [])),
                }
            )
        if len(rows) >= limit:
            break
    return rows[:limit]


def _completion_text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    raise TypeError(f"a completion must be text or chat messages, got {type(completion).__name__}")


def _answer_ok(text: str, contains: list[str], excludes: list[str]) -> bool:
    low = text.lower()
    return all(s.lower() in low for s in contains) and not any(s.lower() in low for s in excludes)


def create_accuracy_reward(closing_tool: str = "respond") -> Callable[..., list[float]]:
    """Seed 002's ``create_accuracy_reward``: a ``reward_fn(completions, **columns) -> list[float]``.

    Each completion is parsed as a policy's reply (:func:`knowlyrcore.tool_parsing.parse_reply`;
    text without a tool call is the ``closing_tool`` reply). It scores 1.0 when it is the
    expected action — the same tool with the same arguments — and, for the closing reply, when
    its message contains every ``answer_contains`` string and no ``answer_excludes`` string
    (case-insensitive; the expert's exact wording is then not required). Otherwise 0.0.
    Rows without ``expected_action`` are judged by the answer checks alone."""

    def accuracy_reward(
        completions: list[Any],
        expected_action: list[dict[str, Any] | None] | None = None,
        answer_contains: list[list[str]] | None = None,
        answer_excludes: list[list[str]] | None = None,
        **_: Any,
    ) -> list[float]:
        n = len(completions)
        expected = expected_action or [None] * n
        contains = answer_contains or [[]] * n
        excludes = answer_excludes or [[]] * n
        if expected_action is None and answer_contains is None:
            raise ValueError("accuracy reward needs an expected_action or answer_contains column")
        scores = []
        for completion, exp, inc, exc in zip(completions, expected, contains, excludes):
            action = parse_reply(_completion_text(completion), closing_tool=closing_tool).action
            if exp is None or exp["tool"] == closing_tool:
                if action["tool"] != closing_tool:
                    ok = False
                elif inc or exc or exp is None:
                    ok = _answer_ok(str(action["params"].get("message", "")), inc or [], exc or [])
                else:
                    ok = " ".join(str(action["params"].get("message", "")).split()) == " ".join(
                        str(exp["params"].get("message", "")).split()
                    )
            else:
                ok = action["tool"] == exp["tool"] and action["params"] == exp.get("params", {})
            scores.append(1.0 if ok and not action.get("format_error") else 0.0)
        return scores

    return accuracy_reward


_DATA_KEYS = ("split", "max_samples", "suite", "data_file", "seed")


class RLTrainingTool:
    """Seed 002's ``hello_agents.tools.RLTrainingTool``: training as an agent tool.

    ``run(params) -> str`` (JSON, as agent tools answer) with ``params["action"]``:

    * ``"train"``, ``algorithm`` ``"sft"`` or ``"grpo"``: builds the dataset (``create_sft_dataset``
      / ``create_rl_dataset`` from ``split``, ``max_samples``, ``suite``, ``data_file``, ``seed``)
      and runs ``SFTTrainerWrapper`` / ``GRPOTrainerWrapper`` (with ``create_accuracy_reward``).
      ``model_name``, ``output_dir``, ``num_epochs``, ``batch_size``, ``learning_rate``,
      ``use_lora`` and any other ``SFTConfig`` / ``GRPOConfig`` field (``max_optimizer_steps``, ``fp16``,
      ``group_size``, ``max_new_tokens``, ...) pass through. Answers ``status``, ``algorithm``,
      ``output_dir`` (the saved model) and the trainer's metrics.
    * ``"evaluate"``: greedy next-action accuracy of ``model_name`` on ``create_rl_dataset(split
      = "test", ...)`` scored by ``create_accuracy_reward``; answers ``accuracy`` and ``num_samples``.
    """

    name = "rl_training"
    description = "Train (SFT or GRPO) or evaluate a tool-use model with knowlyr-trainer."

    def run(self, params: dict[str, Any]) -> str:
        params = dict(params)
        action = params.pop("action", "train")
        if action == "train":
            result = self._train(params)
        elif action == "evaluate":
            result = self._evaluate(params)
        else:
            raise ValueError(f"RLTrainingTool action must be 'train' or 'evaluate', got {action!r}")
        return json.dumps(result, ensure_ascii=False, default=str)

    def _train(self, params: dict[str, Any]) -> dict[str, Any]:
        algorithm = params.pop("algorithm", "sft")
        data = {k: params.pop(k) for k in _DATA_KEYS if k in params}
        model_name = params.pop("model_name", "smollm2-135m")
        if algorithm == "sft":
            trainer: Any = SFTTrainerWrapper(model_name, create_sft_dataset(**data), **params)
        elif algorithm == "grpo":
            dataset = create_rl_dataset(**data)
            trainer = GRPOTrainerWrapper(model_name, dataset, create_accuracy_reward(), **params)
        else:
            raise ValueError(
                f"RLTrainingTool algorithm must be 'sft' or 'grpo' (DPO: knowlyr-trainer dpo), got {algorithm!r}"
            )
        result = trainer.train()
        return {"status": "success", "algorithm": algorithm, **result}

    def _evaluate(self, params: dict[str, Any]) -> dict[str, Any]:
        from agenttrainer.acting import AgentInference

        data = {"split": "test", **{k: params.pop(k) for k in _DATA_KEYS if k in params}}
        rows = create_rl_dataset(**data)
        policy = AgentInference.from_pretrained(
            params.pop("model_name", "smollm2-135m"), max_new_tokens=params.pop("max_new_tokens", 128)
        )
        if params:
            raise ValueError(f"RLTrainingTool evaluate does not take {sorted(params)}")
        completions = [policy.complete(row["prompt"]).text for row in rows]
        columns = {k: [row.get(k) for row in rows] for k in ("expected_action", "answer_contains", "answer_excludes")}
        scores = create_accuracy_reward()(completions, **columns)
        return {"status": "success", "accuracy": sum(scores) / len(scores), "num_samples": len(scores)}
