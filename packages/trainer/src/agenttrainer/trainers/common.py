"""The recipes' shared helpers under their former names (``common.X``), for code written against them.

Each lives in a module with one job: :mod:`~agenttrainer.trainers.setup` (accelerator, policy,
optimizer), :mod:`~agenttrainer.trainers.plan` (batch planning), :mod:`~agenttrainer.trainers.guards`
(the non-finite step guard), :mod:`agenttrainer.checkpoints`, :mod:`agenttrainer.models.attention`
(hidden-state forward, packed attention) and :mod:`agenttrainer.packed`. New code imports from those.
"""

from agenttrainer.checkpoints import (
    CHECKPOINT_PREFIX,
    list_checkpoints,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
    trainable_state,
)
from agenttrainer.models.attention import (
    _EXPLICIT_ATTENTION_MAX_LEN,
    PACKED_ATTENTION,
    HiddenStates,
    _causal_attention,
    _packed_sdpa,
)
from agenttrainer.models.attention import base_model as _base
from agenttrainer.packed import sequence_sums, to_device, unpack_tokens
from agenttrainer.trainers.guards import NonFiniteLossError, check_finite
from agenttrainer.trainers.plan import epoch_windows, global_batches, shard
from agenttrainer.trainers.setup import load_policy, make_accelerator, make_optimizer_and_scheduler

__all__ = [
    # setup
    "load_policy",
    "make_accelerator",
    "make_optimizer_and_scheduler",
    # batch planning
    "epoch_windows",
    "global_batches",
    "shard",
    # step guard
    "NonFiniteLossError",
    "check_finite",
    # checkpoints
    "CHECKPOINT_PREFIX",
    "list_checkpoints",
    "load_checkpoint",
    "resolve_checkpoint",
    "save_checkpoint",
    "trainable_state",
    # forward
    "PACKED_ATTENTION",
    "HiddenStates",
    # private kernel names, patched or called by tests/test_packed_attention.py
    "_EXPLICIT_ATTENTION_MAX_LEN",
    "_base",
    "_causal_attention",
    "_packed_sdpa",
    # packed batches
    "sequence_sums",
    "to_device",
    "unpack_tokens",
]
