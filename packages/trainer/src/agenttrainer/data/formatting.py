"""Render conversations with the tokenizer's chat template and label only trainable spans.

Assistant spans are found by rendering prefixes of the chat: message ``i`` starts where
``messages[:i]`` rendered with the generation prompt ends (for assistant turns, so the role
header is not trained on) and ends where ``messages[:i + 1]`` ends. Each rendering must be a
prefix of the full text; templates that rewrite earlier turns (e.g. drop past reasoning) are
rejected with a clear error rather than mislabelled. The full text is tokenised once and
character spans are mapped to tokens through the offset mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agenttrainer.data.readers import Conversation, DataError
from agenttrainer.losses.sft import IGNORE_INDEX


@dataclass
class Example:
    """A tokenised training sequence. ``labels`` is ``IGNORE_INDEX`` on untrained tokens."""

    input_ids: list[int]
    labels: list[int]
    weights: list[float]
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_trainable(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE_INDEX)


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, *, generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt)


def message_spans(tokenizer: Any, conv: Conversation) -> tuple[str, list[tuple[int, int]]]:
    """The rendered text and, per message, the character span whose tokens belong to it."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise DataError("the tokenizer has no chat template; use an instruct model or set tokenizer.chat_template")
    text = _render(tokenizer, conv.messages, conv.tools)
    spans = []
    for i, m in enumerate(conv.messages):
        if m["role"] == "assistant":
            start_text = _render(tokenizer, conv.messages[:i], conv.tools, generation_prompt=True)
        else:
            start_text = _render(tokenizer, conv.messages[:i], conv.tools) if i else ""
        end_text = _render(tokenizer, conv.messages[: i + 1], conv.tools)
        for part in (start_text, end_text):
            if not text.startswith(part):
                raise DataError(
                    f"{conv.source}: the chat template renders message {i} differently inside the full chat; "
                    "cannot locate the assistant tokens"
                )
        spans.append((len(start_text), len(end_text)))
    return text, spans


def tokenize_conversation(tokenizer: Any, conv: Conversation, *, max_length: int | None = None) -> Example:
    """Tokenise ``conv``: labels on trainable messages only, per-token loss weights.

    A conversation with recorded ``token_ids`` (the exact sequence a policy sampled, see
    ``grpo_group``) is taken as it is, the chat template not rendered, and
    ``meta["sampled_logprobs"]`` holds each token's sampling-time log-prob (None where not
    recorded). Truncates to ``max_length`` (from the right). Raises :class:`DataError` when
    nothing is left to train on.
    """
    meta = _meta(conv)
    if conv.token_ids is not None:
        ids, labels, weights, logprobs = _recorded(tokenizer, conv)
        meta["sampled_logprobs"] = logprobs[:max_length]
    else:
        ids, labels, weights = _rendered(tokenizer, conv)
    if max_length is not None and len(ids) > max_length:
        ids, labels, weights = ids[:max_length], labels[:max_length], weights[:max_length]
    labels[0] = IGNORE_INDEX  # nothing predicts the first token
    example = Example(ids, labels, weights, source=conv.source, meta=meta)
    if example.num_trainable == 0:
        raise DataError(f"{conv.source}: no trainable tokens left (all masked or cut by max_length={max_length})")
    return example


def _rendered(tokenizer: Any, conv: Conversation) -> tuple[list[int], list[int], list[float]]:
    """Ids, labels and weights of ``conv`` rendered with the chat template."""
    text, spans = message_spans(tokenizer, conv)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    labels = [IGNORE_INDEX] * len(ids)
    weights = [0.0] * len(ids)
    starts = [s for s, _ in offsets]
    tok = 0
    for (start, end), trainable, weight in zip(spans, conv.trainable, conv.weights):
        while tok < len(ids) and starts[tok] < start:
            tok += 1
        while tok < len(ids) and starts[tok] < end:
            if trainable:
                labels[tok], weights[tok] = ids[tok], weight
            tok += 1
    return ids, labels, weights


def _recorded(tokenizer: Any, conv: Conversation) -> tuple[list[int], list[int], list[float], list[float | None]]:
    """Ids, labels, weights and sampling log-probs from the recorded ids of each message."""
    ids: list[int] = []
    labels: list[int] = []
    weights: list[float] = []
    logprobs: list[float | None] = []
    recorded_logprobs = conv.logprobs or [None] * len(conv.token_ids)
    for span, trainable, weight, span_logprobs in zip(conv.token_ids, conv.trainable, conv.weights, recorded_logprobs):
        ids += span
        labels += span if trainable else [IGNORE_INDEX] * len(span)
        weights += [weight if trainable else 0.0] * len(span)
        logprobs += span_logprobs if span_logprobs is not None else [None] * len(span)
    vocabulary = len(tokenizer)
    unknown = next((i for i in ids if i >= vocabulary), None)
    if unknown is not None:  # recorded with another tokenizer: the embedding lookup would fail
        raise DataError(
            f"{conv.source}: recorded token id {unknown} is not in the tokenizer's vocabulary ({vocabulary} tokens)"
        )
    return ids, labels, weights, logprobs


def _meta(conv: Conversation) -> dict[str, Any]:
    return {
        "task_id": conv.task_id,
        "task_type": conv.task_type,
        "reward": conv.reward,
        "num_steps": conv.num_steps,
        "loss": conv.loss_hint,
    }


def _units(conv: Conversation) -> tuple[int, list[list[int]]]:
    """Index where the first assistant turn starts, and message indices grouped per step."""
    first = next(i for i, m in enumerate(conv.messages) if m["role"] == "assistant")
    units: list[list[int]] = []
    for i in range(first, len(conv.messages)):
        if conv.messages[i]["role"] == "assistant" or not units:
            units.append([])
        units[-1].append(i)
    return first, units


def _sub(conv: Conversation, head: int, context: list[list[int]], current: list[list[int]]) -> Conversation:
    idx = list(range(head)) + [i for u in context for i in u] + [i for u in current for i in u]
    trainable = (
        list(conv.trainable[:head])
        + [False for u in context for _ in u]
        + [conv.trainable[i] for u in current for i in u]
    )
    return Conversation(
        messages=[conv.messages[i] for i in idx],
        trainable=trainable,
        weights=[conv.weights[i] for i in idx],
        tools=conv.tools,
        source=conv.source,
        task_id=conv.task_id,
        task_type=conv.task_type,
        reward=conv.reward,
        loss_hint=conv.loss_hint,
        step_rewards=conv.step_rewards,
    )


def chunk_conversation(tokenizer: Any, conv: Conversation, max_length: int) -> list[Example]:
    """Split a trajectory longer than ``max_length`` tokens at step boundaries.

    Each chunk keeps the task (everything before the first assistant turn), then as many of the
    directly preceding steps as fit as untrained context, then the chunk's own steps (trained;
    at most half the room after the task). A single step that alone exceeds ``max_length`` is
    truncated.
    """
    whole = tokenize_conversation(tokenizer, conv)
    if len(whole) <= max_length:
        return [whole]
    head, units = _units(conv)

    def length(context: list[list[int]], current: list[list[int]]) -> int:
        return len(
            tokenizer(
                _render(tokenizer, _sub(conv, head, context, current).messages, conv.tools), add_special_tokens=False
            )["input_ids"]
        )

    # A chunk's own steps take at most half the room left after the task, so that the other
    # half can hold the preceding steps as context.
    head_length = length([], [])
    segment_budget = head_length + (max_length - head_length) // 2
    chunks, i = [], 0
    while i < len(units):
        j = i + 1
        while j < len(units) and length([], units[i : j + 1]) <= segment_budget:
            j += 1
        k = i
        while k > 0 and length(units[k - 1 : i], units[i:j]) <= max_length:
            k -= 1
        chunks.append(tokenize_conversation(tokenizer, _sub(conv, head, units[k:i], units[i:j]), max_length=max_length))
        i = j
    return chunks
