"""Data: read JSONL exports, format with the chat template, mask, chunk, batch, select."""

from agenttrainer.data.batching import (
    attention_allowed,
    attention_bias,
    collate,
    length_grouped_batches,
    pack,
    pad,
    shuffled_batches,
)
from agenttrainer.data.formatting import Example, chunk_conversation, message_spans, tokenize_conversation
from agenttrainer.data.readers import (
    Conversation,
    DataError,
    dpo_pair,
    grpo_group,
    parse_step_text,
    read_located_records,
    sft_conversation,
)
from agenttrainer.data.selection import (
    CORESET_STRATEGIES,
    ReplayBuffer,
    coreset_indices,
    curriculum_fraction,
    curriculum_indices,
    task_weighted_indices,
)

__all__ = [
    # reading
    "Conversation",
    "DataError",
    "dpo_pair",
    "grpo_group",
    "parse_step_text",
    "read_located_records",
    "sft_conversation",
    # formatting
    "Example",
    "chunk_conversation",
    "message_spans",
    "tokenize_conversation",
    # batching
    "attention_allowed",
    "attention_bias",
    "collate",
    "length_grouped_batches",
    "pack",
    "pad",
    "shuffled_batches",
    # selection
    "CORESET_STRATEGIES",
    "ReplayBuffer",
    "coreset_indices",
    "curriculum_fraction",
    "curriculum_indices",
    "task_weighted_indices",
]
