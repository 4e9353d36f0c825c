"""Tiny randomly initialised Llama models with the real SmolLM2 tokenizer, for fast tests.

The architecture matches SmolLM2 (Llama: RMSNorm, SwiGLU MLP, rotary embeddings, grouped-query
attention, tied embeddings) at a few thousand parameters per layer, so code paths that depend
on module names (LoRA targets), the chat template or special tokens are exercised for real,
in milliseconds. The tokenizer comes from the converted SmolLM2 cache and is loaded once per
process; each call gets its own copy, so tests may change padding side etc. freely.

Example:
    >>> model, tokenizer = build_tiny_model(seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import torch

from agenttrainer.models.aliases import resolve_model_path
from agenttrainer.models.loading import load_tokenizer


@functools.lru_cache(maxsize=1)
def _smollm2_tokenizer() -> Any:
    return load_tokenizer(resolve_model_path("smollm2-135m"))


def build_tiny_model(
    tokenizer: Any = None,
    *,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
) -> tuple[Any, Any]:
    """A ``LlamaForCausalLM`` with random weights and ``tokenizer`` (default: SmolLM2's).

    The same ``seed`` gives the same weights; the global RNG state is left untouched.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} must be divisible by num_heads {num_heads}")
    if tokenizer is None:
        tokenizer = copy.deepcopy(_smollm2_tokenizer())
    # Grouped-query attention like SmolLM2 (9 heads, 3 KV heads) so k/v LoRA shapes differ from q.
    num_kv_heads = num_heads // 2 if num_heads % 2 == 0 else num_heads
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype=torch.float32,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer
