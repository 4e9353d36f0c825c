"""Packed attention and the hidden-state forward that uses it.

A packed row holds several sequences back to back (``seq_ids`` says which is which).
:class:`HiddenStates` runs a causal LM's backbone over such rows and returns the final hidden
states; the LM head is left to the loss, which applies it at label positions only, chunk by chunk.
On an SDPA model it routes attention through :data:`PACKED_ATTENTION`, a kernel that attends
within each sequence separately (cost ``sum(L_i^2)``, not ``(sum L_i)^2``).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import torch
from torch import nn

from agenttrainer.data.batching import attention_allowed, attention_bias
from agenttrainer.losses.sft import compute_dtype


def base_model(lm: Any) -> Any:
    """The transformers model under a PEFT wrapper (or ``lm`` itself)."""
    return lm.get_base_model() if hasattr(lm, "get_base_model") else lm


PACKED_ATTENTION = "knowlyr_packed"


# Up to this length, explicit attention (two batched matmuls and a softmax in the compute dtype)
# beats the CPU flash kernel, forward + backward, by 1.4-4x on this project's 2-core AMX machine
# (bf16, 9 query / 3 kv heads: 2.9 vs 6.2 ms at 315 tokens, 24 vs 33 ms at 1024); beyond it flash's
# O(L) memory and tiling win.
_EXPLICIT_ATTENTION_MAX_LEN = 1024


@functools.lru_cache(maxsize=16)
def _causal_bias(length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``(L, L)`` additive mask: 0 on and below the diagonal, -inf above (shared by every layer)."""
    future = torch.ones(length, length, dtype=torch.bool, device=device).triu_(1)
    return torch.zeros(length, length, dtype=dtype, device=device).masked_fill_(future, float("-inf"))


def _causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, dropout: float, softcap: float | None = None
) -> torch.Tensor:
    """Causal attention of one sequence: ``q (1, Hq, L, D)``, ``k``/``v`` ``(1, Hkv, L, D)`` -> ``(1, Hq, L, D)``.

    The explicit path keeps the softmax in the compute dtype: PyTorch accumulates a bf16 softmax in
    float32 and rounds once, which is what transformers' eager attention does under autocast
    (float32 softmax, then a cast to bf16) to within one bf16 ulp, at a third of the memory passes.
    """
    _, hq, length, dim = q.shape
    hkv = k.shape[1]
    if length > _EXPLICIT_ATTENTION_MAX_LEN and softcap is None:
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=dropout, scale=scale, enable_gqa=hkv != hq
        )
    group = hq // hkv  # query heads sharing a key/value head (GQA): one matmul per kv head
    scores = (q * scale).reshape(1, hkv, group * length, dim) @ k.transpose(-1, -2)  # (1, Hkv, G*L, L)
    scores = scores.view(1, hkv, group, length, length)
    if softcap is not None:  # Gemma-2 style logit soft-capping
        scores = torch.tanh(scores / softcap) * softcap
    probs = torch.softmax(scores + _causal_bias(length, scores.dtype, scores.device), dim=-1)
    if dropout:
        probs = torch.nn.functional.dropout(probs, p=dropout)
    return (probs.view(1, hkv, group * length, length) @ v).view(1, hq, length, dim)


def _packed_sdpa(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, **kwargs: Any
):
    """Causal attention over each packed sequence separately (no cross-sequence attention, no wasted blocks).

    ``cu_seq_lens_q`` (sequence boundaries in the packed row) selects this path; without it the
    call is plain transformers SDPA, so generation and padded batches behave as with ``sdpa``.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    tree = kwargs.get("prefix_tree")
    if tree is not None:  # rows sharing prefixes in one tree row (models/shared_prefix.py)
        return tree.attention(module, query, key, value, **kwargs)
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None or query.shape[0] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    bounds = cu.tolist()
    window = kwargs.get("sliding_window")
    longest = max(e - s for s, e in itertools.pairwise(bounds))
    if window is not None and longest > window:
        raise ValueError(
            f"packed training does not implement sliding-window attention: a sequence of {longest} tokens "
            f"exceeds the model's window of {window}; set max_length <= {window} or packing=False"
        )
    dropout = kwargs.get("dropout", 0.0) if module.training else 0.0
    scale = kwargs.get("scaling")
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    # Under autocast, rotary embeddings leave q/k in float32 while v is bf16; cast all three once to
    # the autocast dtype (what SDPA and the matmuls would each do again per call).
    dtype = compute_dtype(query, query.dtype)
    query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    outs = [
        _causal_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], scale, dropout, kwargs.get("softcap"))
        for s, e in itertools.pairwise(bounds)
    ]  # each (1, H, L_i, D)
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None  # (1, N, H, D)


def register_packed_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PACKED_ATTENTION, _packed_sdpa)
    AttentionMaskInterface.register(PACKED_ATTENTION, sdpa_mask)


class HiddenStates(nn.Module):
    """Runs a causal LM's backbone and returns final hidden states ``(B, T, H)``.

    The LM head is applied by the loss (chunked, label positions only), so full logits never
    exist. Wrapping (rather than calling the backbone directly) keeps DDP's gradient hooks intact.

    Packed rows (``B == 1``) on an SDPA model run attention per sequence through
    ``PACKED_ATTENTION`` (a superset of SDPA, so the model still generates normally): cost is
    ``sum(L_i^2)``, not ``(sum L_i)^2``. Other layouts get an explicit block-diagonal mask.
    """

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm
        config = base_model(lm).config
        if getattr(config, "_attn_implementation", None) == "sdpa":
            register_packed_attention()
            config._attn_implementation = PACKED_ATTENTION

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, seq_ids: torch.Tensor, prefix_tree: Any = None
    ) -> torch.Tensor:
        base = base_model(self.lm)
        backbone = getattr(base, base.base_model_prefix)
        impl = getattr(base.config, "_attn_implementation", None)
        if prefix_tree is not None:  # a row whose sequences share prefixes (models/shared_prefix.py)
            return prefix_tree.hidden_states(backbone, input_ids, position_ids, impl)
        if impl == PACKED_ATTENTION and seq_ids.shape[0] == 1 and bool((seq_ids >= 0).all()):
            counts = torch.bincount(seq_ids[0])
            cu = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # sequence boundaries
            out = backbone(input_ids=input_ids, position_ids=position_ids, use_cache=False, cu_seq_lens_q=cu)
            return out.last_hidden_state
        if impl in ("sdpa", PACKED_ATTENTION):
            mask = attention_allowed(seq_ids)[:, None]  # (B, 1, T, T) bool: a quarter of a float mask
        else:
            mask = attention_bias(seq_ids, torch.float32)  # (B, 1, T, T) additive, for eager attention
        out = backbone(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=False)
        return out.last_hidden_state

    def lm_head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        head = base_model(self.lm).get_output_embeddings()
        return head.weight, head.bias
