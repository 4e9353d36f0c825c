"""Read the hub's JSONL exports into chat conversations with per-turn training flags.

Every record becomes a :class:`Conversation`: chat ``messages`` (what the tokenizer's chat
template renders), and per message whether its tokens are trained on and with which weight.
The readers accept exactly the formats ``knowlyr-hub export`` writes (see ``docs/formats.md``):

* SFT: ``instruction`` / ``input`` / ``response``; agent ``steps`` ``[{thought, action,
  observation, reward}]``; a ``response`` holding ``Step N: / Thought: / Action: / Observation:``
  text; chat ``messages`` (+ ``tools``).
* DPO: ``prompt`` / ``chosen`` / ``rejected``, each text or a list of messages.
* GRPO: ``task_id``, ``prompt``, ``trajectories`` ``[{response | messages | steps, reward,
  step_rewards}]``.

Bad input raises :class:`DataError` naming file, line and field (``path:line: field: problem``).
Numbers must be finite: ``NaN``/``Infinity`` literals, overflowing numbers and weights that come
out non-finite are refused, since one of them turns every trained weight into NaN.

Files are read one line at a time, and a line may hold at most ``max_line_bytes`` bytes
(default 16 MiB, or the ``KNOWLYR_MAX_LINE_BYTES`` environment variable): a longer line
is refused after reading ``max_line_bytes + 1`` bytes of it, so a 200 MB line never reaches the
JSON parser. Lines must be UTF-8 (a UTF-8 byte-order mark on line 1 is ignored); objects and
arrays may nest at most 100 levels (``knowlyrcore.jsonl.MAX_JSON_DEPTH``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agenttrainer.errors import TrainerError
from agenttrainer.losses.sft import step_weights
from knowlyrcore.errors import DataFormatError, no_such_file
from knowlyrcore.jsonl import iter_json_lines


class DataError(TrainerError, ValueError):
    """A training record that cannot be used; the message names file, line and field."""

    exit_code = 2  # wrong input: the command exits 2 (knowlyrcore.clikit)


@dataclass
class Conversation:
    """One training sequence before tokenisation.

    ``trainable[i]`` says whether message ``i``'s tokens get a label; ``weights[i]`` scales their
    loss (``step_reward / mean(step_rewards)`` for agent steps, 1 otherwise).
    """

    messages: list[dict[str, Any]]
    trainable: list[bool]
    weights: list[float]
    tools: list[dict[str, Any]] | None = None
    source: str = ""  # "file:line" for error messages
    task_id: str | None = None
    task_type: str | None = None
    reward: float | None = None
    loss_hint: float | None = None  # metadata.loss, a difficulty proxy for coreset selection
    step_rewards: list[float] = field(default_factory=list)

    @property
    def num_steps(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "assistant")

    def with_flags(self, trainable: list[bool]) -> Conversation:
        return replace(self, trainable=trainable)


def read_jsonl(path: str | Path, *, max_line_bytes: int | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``("file:line", record)`` for every non-blank line; a bad line raises :class:`DataError`.

    knowlyr-core's reader underneath: it streams the file holding at most ``max_line_bytes``
    (default ``$KNOWLYR_MAX_LINE_BYTES``, 16 MiB) of one line, and refuses, each as
    ``path:line: problem``, a longer line, UTF-16 / binary / Latin-1 text, invalid JSON,
    NaN/Infinity, nesting deeper than 100 levels, a line that is not a JSON object and a
    ``schema_version`` other than 1.x.
    """
    if not Path(path).is_file():
        raise DataError(no_such_file(path))
    try:
        for lineno, record in iter_json_lines(path, max_line_bytes=max_line_bytes):
            yield f"{path}:{lineno}", record
    except DataFormatError as exc:
        raise DataError(str(exc)) from None


def _text(record: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = record.get(key)
    if value is None:
        if required:
            raise DataError(f"{where}: missing field {key!r}")
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return value


def _number(value: Any, where: str, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{where}: field {name!r} must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float range
        raise DataError(f"{where}: {name}: number too large for a float") from None
    if not math.isfinite(number):
        raise DataError(f"{where}: {name}: not a finite number ({number})")
    return number


def _step_weights(rewards: list[float], where: str, name: str) -> list[float]:
    """:func:`step_weights`, refusing rewards whose sum or ratios overflow (inf, or weights of 0 for all)."""
    weights = step_weights(rewards)
    if not math.isfinite(sum(rewards)) or not all(math.isfinite(w) for w in weights):
        raise DataError(f"{where}: {name}: rewards too large or too small to weight steps by")
    return weights


def _action_text(action: Any) -> str:
    if isinstance(action, str):
        return action
    if isinstance(action, dict):  # a tool call {name, parameters}
        return json.dumps(action, ensure_ascii=False)
    return str(action)


_STEP_RE = re.compile(r"^\s*Step\s+\d+\s*:\s*$", re.MULTILINE)
_FIELD_RE = re.compile(r"^\s*(Thought|Action|Observation)\s*:\s?", re.MULTILINE)


def parse_step_text(text: str) -> list[dict[str, str]]:
    """Parse ``Step N: / Thought: / Action: / Observation:`` text into step dicts ([] if not that format).

    >>> parse_step_text("Step 1:\\nThought: look\\nAction: ls\\nObservation: a.py")
    [{'thought': 'look', 'action': 'ls', 'observation': 'a.py'}]
    """
    blocks = _STEP_RE.split(text)
    if len(blocks) < 2:
        return []
    steps = []
    for block in blocks[1:]:
        parts = _FIELD_RE.split(block)
        fields = {parts[i].lower(): parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
        if "action" not in fields and "thought" not in fields:
            return []
        steps.append({k: fields.get(k, "") for k in ("thought", "action", "observation")})
    return steps


def _task_text(record: dict[str, Any], where: str) -> str:
    instruction = _text(record, "instruction", where)
    extra = _text(record, "input", where, required=False)
    return f"{instruction}\n\n{extra}" if extra else instruction


def _steps_conversation(task: str, steps: list[Any], where: str, mask_observations: bool) -> Conversation:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    trainable, rewards, step_of_message = [False], [], [None]
    for j, step in enumerate(steps):
        if not isinstance(step, dict):
            raise DataError(f"{where}: steps[{j}] must be an object")
        thought, action = step.get("thought") or "", step.get("action")
        if action is None and not thought:
            raise DataError(f"{where}: steps[{j}] needs 'thought' or 'action'")
        content = (
            f"Thought: {thought}\nAction: {_action_text(action)}" if thought else f"Action: {_action_text(action)}"
        )
        messages.append({"role": "assistant", "content": content})
        trainable.append(True)
        step_of_message.append(j)
        reward = _number(step.get("reward"), where, f"steps[{j}].reward")
        rewards.append(reward)
        observation = step.get("observation")
        if observation not in (None, ""):
            obs = observation if isinstance(observation, str) else json.dumps(observation, ensure_ascii=False)
            messages.append({"role": "user", "content": f"Observation: {obs}"})
            trainable.append(not mask_observations)
            step_of_message.append(j)
    if not steps:
        raise DataError(f"{where}: field 'steps' is empty")
    known = [r for r in rewards if r is not None]
    if known and len(known) != len(rewards):
        raise DataError(f"{where}: either every step has a 'reward' or none does")
    per_step = _step_weights(known, where, "steps[*].reward") if known else [1.0] * len(steps)
    weights = [1.0 if j is None else per_step[j] for j in step_of_message]
    return Conversation(messages, trainable, weights, step_rewards=known)


def _messages(value: Any, where: str, name: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: field {name!r} must be a non-empty list of messages")
    for i, m in enumerate(value):
        if not isinstance(m, dict) or "role" not in m:
            raise DataError(f"{where}: {name}[{i}] must be an object with a 'role'")
        if m["role"] not in ("system", "user", "assistant", "tool"):
            raise DataError(f"{where}: {name}[{i}].role {m['role']!r} is not system/user/assistant/tool")
    return value


def _chat_conversation(messages: list[dict[str, Any]], where: str, mask_observations: bool) -> Conversation:
    trainable, rewards = [], []
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            trainable.append(True)
            rewards.append(_number(m.get("reward"), where, f"messages[{i}].reward"))
        else:
            # Tool results are observations; user/system turns are never the model's output.
            trainable.append(m["role"] == "tool" and not mask_observations)
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{where}: field 'messages' has no assistant message to train on")
    known = [r for r in rewards if r is not None]
    complete = known and len(known) == len(rewards)
    per_step = iter(_step_weights(known, where, "messages[*].reward")) if complete else None
    weights = [next(per_step) if per_step and m["role"] == "assistant" else 1.0 for m in messages]
    clean = [{k: v for k, v in m.items() if k != "reward"} for m in messages]
    return Conversation(clean, trainable, weights, step_rewards=known if per_step else [])


def sft_conversation(
    record: dict[str, Any], where: str, *, agent_format: bool = True, mask_observations: bool = True
) -> Conversation:
    """One SFT record as a :class:`Conversation` (see the module docstring for the formats)."""
    if "messages" in record:
        conv = _chat_conversation(_messages(record["messages"], where, "messages"), where, mask_observations)
        tools = record.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise DataError(f"{where}: field 'tools' must be a list")
        conv.tools = tools
    elif "steps" in record:
        steps = record["steps"]
        if not isinstance(steps, list):
            raise DataError(f"{where}: field 'steps' must be a list")
        task = _task_text(record, where)
        if agent_format:
            conv = _steps_conversation(task, steps, where, mask_observations)
        else:
            text = "\n".join(
                f"Step {j + 1}:\nThought: {s.get('thought', '')}\nAction: {_action_text(s.get('action'))}"
                f"\nObservation: {s.get('observation', '')}"
                for j, s in enumerate(steps)
            )
            conv = Conversation(
                [{"role": "user", "content": task}, {"role": "assistant", "content": text}], [False, True], [1.0, 1.0]
            )
    elif "response" in record:
        task, response = _task_text(record, where), _text(record, "response", where)
        steps = parse_step_text(response) if agent_format else []
        if steps:
            conv = _steps_conversation(task, steps, where, mask_observations)
        else:
            conv = Conversation(
                [{"role": "user", "content": task}, {"role": "assistant", "content": response}],
                [False, True],
                [1.0, 1.0],
            )
    else:
        raise DataError(f"{where}: record needs one of 'messages', 'steps' or 'response'")
    conv.source = where
    conv.task_id = record.get("task_id")
    metadata = record.get("metadata") or {}
    conv.task_type = record.get("task_type") or (metadata.get("task_type") if isinstance(metadata, dict) else None)
    conv.reward = _number(record.get("reward"), where, "reward")
    conv.loss_hint = _number(metadata.get("loss"), where, "metadata.loss") if isinstance(metadata, dict) else None
    return conv


def _prompt_messages(record: dict[str, Any], where: str) -> list[dict[str, Any]]:
    prompt = record.get("prompt")
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list):
        return _messages(prompt, where, "prompt")
    raise DataError(f"{where}: field 'prompt' must be text or a list of messages")


def _completion(value: Any, where: str, name: str) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    if isinstance(value, list):
        return _messages(value, where, name)
    raise DataError(f"{where}: field {name!r} must be text or a list of messages")


def _completion_conversation(
    prompt: list[dict[str, Any]], completion: list[dict[str, Any]], where: str
) -> Conversation:
    messages = prompt + completion
    trainable = [False] * len(prompt) + [m["role"] == "assistant" for m in completion]
    if not any(trainable):
        raise DataError(f"{where}: completion has no assistant message")
    return Conversation(messages, trainable, [1.0] * len(messages), source=where)


def dpo_pair(record: dict[str, Any], where: str) -> tuple[Conversation, Conversation]:
    """``(chosen, rejected)`` conversations sharing the prompt; only completion turns are trainable."""
    prompt = _prompt_messages(record, where)
    pair = []
    for name in ("chosen", "rejected"):
        if name not in record:
            raise DataError(f"{where}: missing field {name!r}")
        conv = _completion_conversation(prompt, _completion(record[name], where, name), where)
        conv.task_id = record.get("task_id")
        pair.append(conv)
    return pair[0], pair[1]


def grpo_group(record: dict[str, Any], where: str) -> list[Conversation]:
    """The trajectories of one task; each carries ``reward`` and per-message step weights."""
    prompt = _prompt_messages(record, where)
    trajectories = record.get("trajectories")
    if not isinstance(trajectories, list) or not trajectories:
        raise DataError(f"{where}: field 'trajectories' must be a non-empty list")
    group = []
    for i, traj in enumerate(trajectories):
        name = f"trajectories[{i}]"
        if not isinstance(traj, dict):
            raise DataError(f"{where}: {name} must be an object")
        reward = _number(traj.get("reward"), where, f"{name}.reward")
        if reward is None:
            raise DataError(f"{where}: missing field '{name}.reward'")
        if "messages" in traj:
            completion = _messages(traj["messages"], where, f"{name}.messages")
        elif "response" in traj:
            completion = _completion(traj["response"], where, f"{name}.response")
        else:
            raise DataError(f"{where}: {name} needs 'response' or 'messages'")
        if "steps" not in traj and len(completion) == 1 and isinstance(traj.get("response"), str):
            steps = parse_step_text(traj["response"])
            if steps:  # agent text: train thought+action, not observations
                completion = _steps_conversation("", steps, where, True).messages[1:]
        conv = _completion_conversation(prompt, completion, where)
        step_rewards = traj.get("step_rewards") or []
        if not isinstance(step_rewards, list):
            raise DataError(f"{where}: field '{name}.step_rewards' must be a list")
        step_rewards = [_number(r, where, f"{name}.step_rewards[{j}]") for j, r in enumerate(step_rewards)]
        n_assistant = sum(1 for m in completion if m["role"] == "assistant")
        if step_rewards and len(step_rewards) != n_assistant:
            raise DataError(
                f"{where}: {name}.step_rewards has {len(step_rewards)} values for {n_assistant} assistant steps"
            )
        if step_rewards:
            per_step = iter(_step_weights(step_rewards, where, f"{name}.step_rewards"))
            conv.weights = [
                next(per_step) if t and m["role"] == "assistant" else 1.0 for t, m in zip(conv.trainable, conv.messages)
            ]
        conv.reward, conv.step_rewards, conv.task_id = reward, step_rewards, record.get("task_id")
        group.append(conv)
    return group
