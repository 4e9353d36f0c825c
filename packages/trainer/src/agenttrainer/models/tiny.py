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


def overfit_tiny_model(
    model: Any, tokenizer: Any, examples: list[dict[str, Any]], *, lr: float = 1e-2, max_optimizer_steps: int = 300
) -> Any:
    """Train ``model`` until greedy decoding reproduces each example's answer exactly.

    ``examples``: ``{"messages": [...], "answer": str, "tools": [...] (optional)}``. This gives
    tests a real model with known output (a tool call, an ``Action:`` line) to drive the
    inference bridge, the server and the clients end to end. Full-batch AdamW on the answer
    tokens only; stops as soon as every answer token is the argmax under teacher forcing
    (a 64-wide model needs ~70 steps). Raises ``RuntimeError`` if ``max_optimizer_steps`` do not suffice.
    """
    sequences = []  # (ids (1, T), labels (1, T))
    for example in examples:
        prompt = tokenizer.apply_chat_template(
            example["messages"], tools=example.get("tools"), add_generation_prompt=True, return_dict=True
        )["input_ids"]
        answer = tokenizer(example["answer"] + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + answer])
        labels = ids.clone()
        labels[0, : len(prompt)] = -100  # learn the answer, not the prompt
        sequences.append((ids, labels))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(max_optimizer_steps):
        # One sequence per forward: the prompts differ a lot in length, so padding would waste work.
        outputs = [model(input_ids=ids, labels=labels) for ids, labels in sequences]
        # Checked on these logits, before the update: if they fit, these are the weights returned.
        if all(_argmax_matches(out.logits, labels) for out, (_, labels) in zip(outputs, sequences)):
            return model.eval()
        optimizer.zero_grad()
        sum(out.loss for out in outputs).backward()
        optimizer.step()
    raise RuntimeError(f"tiny model did not fit {len(examples)} examples in {max_optimizer_steps} steps")


def _argmax_matches(logits: torch.Tensor, labels: torch.Tensor) -> bool:
    """Whether every labelled token is the argmax of the logits one position earlier."""
    predicted = logits[0, :-1].argmax(-1)  # (T-1,): logits at t predict token t+1
    targets = labels[0, 1:]  # (T-1,)
    learned = targets != -100
    return torch.equal(predicted[learned], targets[learned])
