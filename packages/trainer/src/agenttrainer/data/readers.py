"""Read the hub's JSONL exports into chat conversations with per-turn training flags.

Every record becomes a :class:`Conversation`: chat ``messages`` (what the tokenizer's chat
template renders), and per message whether its tokens are trained on and with which weight.
Each record is validated with the knowlyr-core model ``knowlyr-hub export`` writes
(``knowlyrcore.datasets``; see ``docs/formats.md``):

* SFT (``SFTRecord``): ``instruction`` / ``input`` / ``response``; agent ``steps`` ``[{thought,
  action, observation, reward}]``; a ``response`` holding ``Step N: / Thought: / Action: /
  Observation:`` text; chat ``messages`` (+ ``tools``).
* DPO (``DPORecord``): ``prompt`` / ``chosen`` / ``rejected``, each text or a list of messages,
  and ``prompt_token_ids``; a side whose whole token sequence was recorded keeps it (as below).
* GRPO (``GRPORecord``): ``task_id``, ``prompt``, ``trajectories`` ``[{response | messages,
  reward, step_rewards, prompt_token_ids}]``. An attempt whose whole token sequence was recorded
  (``prompt_token_ids`` and every message's ``token_ids``) keeps it in ``Conversation.token_ids``,
  and ``tokenize_conversation`` trains on those ids instead of rendering the chat template.

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
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agenttrainer.errors import TrainerError
from agenttrainer.losses.sft import step_weights
from knowlyrcore.datasets import ChatMessage, DPORecord, GRPORecord, SFTRecord, SFTStep
from knowlyrcore.errors import DataFormatError, no_such_file
from knowlyrcore.jsonl import iter_json_lines, validation_error

RecordT = TypeVar("RecordT", bound=BaseModel)


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
    # Per message, its tokens exactly as the policy saw them, when the whole sequence was recorded
    # (tokenize_conversation then uses them instead of the chat template), and the sampling-time
    # log-probs of its tokens where recorded (None elsewhere).
    token_ids: list[list[int]] | None = None
    logprobs: list[list[float] | None] | None = None

    @property
    def num_steps(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "assistant")

    def with_flags(self, trainable: list[bool]) -> Conversation:
        return replace(self, trainable=trainable)


def read_located_records(
    path: str | Path, *, max_line_bytes: int | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
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


def _validated(model: type[RecordT], record: RecordT | dict[str, Any], where: str) -> RecordT:
    """``record`` as ``model`` (the knowlyr-core model the hub writes); a bad one is a
    :class:`DataError` naming ``where`` (``file:line``) and the field."""
    if isinstance(record, model):
        return record
    try:
        return model.model_validate(record)
    except ValidationError as err:
        raise DataError(str(validation_error(where, None, err))) from None


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


def _observation_text(observation: Any) -> str:
    if observation is None:
        return ""
    return observation if isinstance(observation, str) else json.dumps(observation, ensure_ascii=False)


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


def _task_text(record: SFTRecord) -> str:
    return f"{record.instruction}\n\n{record.input}" if record.input else record.instruction or ""


def _steps_conversation(task: str, steps: list[SFTStep], where: str, mask_observations: bool) -> Conversation:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    trainable, step_of_message = [False], [None]
    for j, step in enumerate(steps):
        action = f"Action: {_action_text(step.action)}"
        messages.append(
            {"role": "assistant", "content": f"Thought: {step.thought}\n{action}" if step.thought else action}
        )
        trainable.append(True)
        step_of_message.append(j)
        observation = _observation_text(step.observation)
        if observation:
            messages.append({"role": "user", "content": f"Observation: {observation}"})
            trainable.append(not mask_observations)
            step_of_message.append(j)
    rewards = [s.reward for s in steps if s.reward is not None]  # all or none (SFTRecord checks)
    per_step = _step_weights(rewards, where, "steps[*].reward") if rewards else [1.0] * len(steps)
    weights = [1.0 if j is None else per_step[j] for j in step_of_message]
    return Conversation(messages, trainable, weights, step_rewards=rewards)


def _parsed_steps(text: str) -> list[SFTStep]:
    return [SFTStep.model_validate(step) for step in parse_step_text(text)]


def _chat_conversation(messages: list[ChatMessage], where: str, mask_observations: bool) -> Conversation:
    # Tool results are observations; user/system turns are never the model's output.
    trainable = [m.role == "assistant" or (m.role == "tool" and not mask_observations) for m in messages]
    rewards = [m.reward for m in messages if m.role == "assistant"]
    known = [r for r in rewards if r is not None]
    complete = known and len(known) == len(rewards)
    per_step = iter(_step_weights(known, where, "messages[*].reward")) if complete else None
    weights = [next(per_step) if per_step and m.role == "assistant" else 1.0 for m in messages]
    return Conversation([m.chat() for m in messages], trainable, weights, step_rewards=known if per_step else [])


def sft_conversation(
    record: SFTRecord | dict[str, Any], where: str, *, agent_format: bool = True, mask_observations: bool = True
) -> Conversation:
    """One SFT record (an :class:`~knowlyrcore.datasets.SFTRecord` or its dict) as a :class:`Conversation`."""
    record = _validated(SFTRecord, record, where)
    if record.shape == "messages":
        conv = _chat_conversation(record.messages, where, mask_observations)
        conv.tools = record.tools
    elif record.shape == "steps" and agent_format:
        conv = _steps_conversation(_task_text(record), record.steps, where, mask_observations)
    elif record.shape == "steps":
        text = "\n".join(
            f"Step {j + 1}:\nThought: {s.thought or ''}\nAction: {_action_text(s.action)}"
            f"\nObservation: {_observation_text(s.observation)}"
            for j, s in enumerate(record.steps)
        )
        conv = _single_turn(_task_text(record), text)
    else:
        steps = _parsed_steps(record.response) if agent_format else []
        if steps:
            conv = _steps_conversation(_task_text(record), steps, where, mask_observations)
        else:
            conv = _single_turn(_task_text(record), record.response)
    metadata = record.metadata
    conv.source = where
    conv.task_id = record.task_id
    conv.task_type = record.task_type or (metadata.task_type if metadata else None)
    conv.reward = record.reward
    conv.loss_hint = metadata.loss if metadata else None
    return conv


def _single_turn(task: str, answer: str) -> Conversation:
    return Conversation(
        [{"role": "user", "content": task}, {"role": "assistant", "content": answer}], [False, True], [1.0, 1.0]
    )


def _as_messages(value: str | list[ChatMessage], role: str) -> list[dict[str, Any]]:
    """A prompt (``role="user"``) or completion (``"assistant"``) given as text or as messages."""
    return [{"role": role, "content": value}] if isinstance(value, str) else [m.chat() for m in value]


def _completion_conversation(
    prompt: list[dict[str, Any]], completion: list[dict[str, Any]], where: str
) -> Conversation:
    messages = prompt + completion
    trainable = [False] * len(prompt) + [m["role"] == "assistant" for m in completion]
    return Conversation(messages, trainable, [1.0] * len(messages), source=where)


def _keep_recorded(
    conv: Conversation, prompt: list[dict[str, Any]], recorded: list[list[int]] | None, messages: Any
) -> None:
    """Train ``conv`` on the ids the policy saw when they were all recorded (``recorded``: the
    prompt's, then each completion message's); the prompt's ids go on its last message, which is
    never trained on."""
    if recorded is not None:
        conv.token_ids = [[] for _ in prompt[:-1]] + recorded
        conv.logprobs = [None] * len(prompt) + [m.logprobs for m in messages]


def dpo_pair(record: DPORecord | dict[str, Any], where: str) -> tuple[Conversation, Conversation]:
    """``(chosen, rejected)`` conversations sharing the prompt; only completion turns are trainable.
    A side whose whole sequence was recorded (``DPORecord.recorded_token_ids``) keeps its ids."""
    record = _validated(DPORecord, record, where)
    prompt = _as_messages(record.prompt, "user")
    chosen, rejected = (
        _completion_conversation(prompt, _as_messages(completion, "assistant"), where)
        for completion in (record.chosen, record.rejected)
    )
    _keep_recorded(chosen, prompt, record.recorded_token_ids("chosen"), record.chosen)
    _keep_recorded(rejected, prompt, record.recorded_token_ids("rejected"), record.rejected)
    chosen.task_id = rejected.task_id = record.task_id
    return chosen, rejected


def grpo_group(record: GRPORecord | dict[str, Any], where: str) -> list[Conversation]:
    """The trajectories of one task; each carries ``reward`` and per-message step weights, and
    ``token_ids`` when the whole sequence the policy saw was recorded (then trained on as is)."""
    record = _validated(GRPORecord, record, where)
    prompt = _as_messages(record.prompt, "user")
    group = []
    for i, traj in enumerate(record.trajectories):
        name = f"trajectories[{i}]"
        if traj.messages is not None:
            completion = [m.chat() for m in traj.messages]
        elif isinstance(traj.response, str) and (steps := _parsed_steps(traj.response)):
            completion = _steps_conversation("", steps, where, True).messages[1:]  # thought+action, not observations
        else:
            completion = _as_messages(traj.response, "assistant")
        conv = _completion_conversation(prompt, completion, where)
        step_rewards = traj.step_rewards or []
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
        _keep_recorded(conv, prompt, traj.recorded_token_ids(), traj.messages)
        conv.reward, conv.step_rewards, conv.task_id = traj.reward, step_rewards, record.task_id
        group.append(conv)
    return group
