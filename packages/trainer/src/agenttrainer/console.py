"""What the trainer's commands print: transformers' known noisy warnings hidden, the trainer's
own info lines shown.

``knowlyr-trainer`` calls ``quiet_library_warnings`` first, and so does everything that loads a
model for a command line (``agenttrainer.acting.policy_from_spec``, which ``knowlyr-hub evaluate``
calls; the examples). Importing the library does not: a program that imports it keeps its own
warning filters and logging.
"""

from __future__ import annotations

import logging
import warnings

# Deprecation notices transformers (5.x) raises on every LoRA run (peft reads is_gradient_checkpointing),
# every rollout or generation (the KV cache passed as past_key_values, which transformers 4.x needs) and
# old configs; nothing the user wrote triggers them. Silenced here only, for the command line.
NOISY_FUTURE_WARNINGS = (
    r"`past_key_values` is deprecated",
    r"`is_gradient_checkpointing` is deprecated",
    r"`gradient_checkpointing_(enable|disable)` is deprecated",
    r"`rope_scaling` is deprecated",
)


def quiet_library_warnings() -> None:
    """Hide the known noisy FutureWarnings and show knowlyr-trainer's own info lines (which model a
    run directory resolved to, a model conversion) on stderr."""
    for message in NOISY_FUTURE_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)
    logger = logging.getLogger("agenttrainer")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        logger.propagate = False  # printed once, even where the root logger has a handler too
