"""Deprecated: the recipes' shared helpers under their former names (``common.X``).

Each lives in a module with one job, and importing it from here warns once, naming that module:
:mod:`~agenttrainer.trainers.setup` (accelerator, policy, optimizer), :mod:`~agenttrainer.trainers.plan`
(batch planning), :mod:`~agenttrainer.trainers.guards` (the non-finite step guard),
:mod:`agenttrainer.checkpoints`, :mod:`agenttrainer.models.attention` (hidden-state forward, packed
attention) and :mod:`agenttrainer.packed`.
"""

from knowlyrcore.deprecation import moved_names

_OWNERS = {
    "agenttrainer.trainers.setup": ("load_policy", "make_accelerator", "make_optimizer_and_scheduler"),
    "agenttrainer.trainers.plan": ("epoch_windows", "global_batches", "shard"),
    "agenttrainer.trainers.guards": ("NonFiniteLossError", "check_finite"),
    "agenttrainer.checkpoints": (
        "CHECKPOINT_PREFIX",
        "list_checkpoints",
        "load_checkpoint",
        "resolve_checkpoint",
        "save_checkpoint",
        "trainable_state",
    ),
    "agenttrainer.models.attention": ("PACKED_ATTENTION", "HiddenStates"),
    "agenttrainer.packed": ("sequence_sums", "to_device", "unpack_tokens"),
}

__getattr__ = moved_names(__name__, {name: owner for owner, names in _OWNERS.items() for name in names})
