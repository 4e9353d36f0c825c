"""Shared-prefix training: rows that open with the same tokens compute them once.

A GRPO group's samples share their prompt, a DPO pair its prompt, SFT rows their system turn and
tool schemas. :func:`collate_rows` lays a micro-batch out as a *prefix tree* in one packed row:
each shared run of tokens appears once, followed by the runs that continue it
(``[system | prompt_a | answer_a1 | answer_a2 | prompt_b | answer_b1 | ...]``), every token at
its position in its own sequence (the position ids of a continuation go on from its prefix).
In attention (:meth:`PrefixTree.attention`) a span's queries see its ancestors' keys and values
and, causally, its own: its rows' hidden states are exactly their unshared ones, and autograd
carries every row's gradient back into the shared keys and values (the expanded-prefix scheme of
Prefix Grouper, without FlexAttention, whose backward does not run on a CPU). Loss and every
gradient equal the unshared computation (``tests/test_shared_prefix*.py``: 1e-5 relative in fp32).

Labels: the logit that predicts token ``t`` comes from the state at ``t - 1``. In the tree row
that state may sit in a shared span (or, for a span's first token, at the end of its parent), so
the batch carries a label table — for each row's trained token, where its predicting state is —
instead of the packed row's shift-by-one labels. Rows may then share everything they have in
common, trained tokens included (a DPO pair's chosen and rejected answers often open with the
same tool calls): a label both rows train at the same position is computed once and counted for
each (:func:`distinct_labels`). Each row keeps at least its last token. A span is shared only when
it is at least ``MIN_SHARED_PREFIX`` (16) tokens long: it then saves ``(n - 1) * length`` token
computations of ``n`` rows (projections and MLP, forward and backward) against one more attention
call per layer; shorter common runs are repeated in each branch. :func:`token_logps` is the one
place log-probs of rows are computed (DPO, offline GRPO, online RL: policy, old and reference
passes, SFT evaluation); the SFT loss takes the same table (:func:`label_states`).

Simplifications: the tree is an exact-token radix tree built in Python per micro-batch; on
SDPA models (the ``knowlyr_packed`` kernel) each span costs its queries times its context, while
eager attention gets a full ``(N, N)`` mask over the tree row (correct, and no slower than the
packed unshared row, whose ``N`` is larger); other attention implementations (flash, flex) are
left on the unshared path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agenttrainer.data.batching import collate, pack
from agenttrainer.data.formatting import Example
from agenttrainer.losses.sft import IGNORE_INDEX, chunked_token_logps, compute_dtype, gathered_token_logps
from agenttrainer.models import attention
from agenttrainer.models.attention import PACKED_ATTENTION, base_model

#: Shortest run of tokens worth computing once for several rows (see the module docstring).
MIN_SHARED_PREFIX = 16


@dataclass(frozen=True)
class Span:
    """Tokens ``[begin, end)`` of example ``row`` at ``start`` in the tree row, continuing span ``parent``
    (-1: a root); ``leaf``: the row's own tail, where its label positions are."""

    row: int
    begin: int
    end: int
    parent: int
    leaf: bool
    start: int = 0


def plan_spans(rows: Sequence[Sequence[int]], min_prefix: int = MIN_SHARED_PREFIX) -> list[Span]:
    """The prefix tree of ``rows`` (token ids), depth first: a span where a set of rows agree for at
    least ``min_prefix`` tokens (each row keeping at least its last token), then each row's tail."""
    spans: list[Span] = []
    limits = [len(r) - 1 for r in rows]

    def place(members: list[int], begin: int, parent: int) -> None:
        if len(members) == 1:
            spans.append(Span(members[0], begin, len(rows[members[0]]), parent, True))
            return
        first, cap, end = rows[members[0]], min(limits[r] for r in members), begin
        while end < cap and all(rows[r][end] == first[end] for r in members[1:]):
            end += 1
        if end - begin >= min_prefix:  # shared: the members continue from its end
            spans.append(Span(members[0], begin, end, parent, False))
            parent, begin = len(spans) - 1, end
        branches: dict[Any, list[int]] = {}  # rows cut here go alone; the others by their next token
        for r in members:
            branches.setdefault(("cut", r) if limits[r] == end else rows[r][end], []).append(r)
        for branch in branches.values():  # always >= 2 branches, each smaller: the recursion ends
            place(branch, begin, parent)

    place(list(range(len(rows))), 0, -1)
    start = 0
    for i, s in enumerate(spans):
        spans[i] = Span(s.row, s.begin, s.end, s.parent, s.leaf, start)
        start += s.end - s.begin
    return spans


class PrefixTree:
    """The spans of a tree row and the attention over them (``HiddenStates(..., prefix_tree=tree)``)."""

    def __init__(self, spans: list[Span]):
        self.spans = spans
        # per span, the row slices of its context: its ancestors' spans from the root, then itself
        self.context: list[list[tuple[int, int]]] = []
        for s in spans:
            chain, p = [(s.start, s.start + s.end - s.begin)], s.parent
            while p >= 0:
                chain.insert(0, (spans[p].start, spans[p].start + spans[p].end - spans[p].begin))
                p = spans[p].parent
            self.context.append(chain)

    @property
    def saved_tokens(self) -> int:
        """Token computations the tree saves: its rows' full lengths minus the tree row's length."""
        full = sum(s.end for s in self.spans if s.leaf)
        return full - sum(s.end - s.begin for s in self.spans)

    def hidden_states(self, backbone: Any, input_ids: torch.Tensor, position_ids: torch.Tensor, impl: str) -> Any:
        """The backbone over the tree row ``(1, N)`` -> final hidden states ``(1, N, H)``."""
        if impl == PACKED_ATTENTION:
            out = backbone(input_ids=input_ids, position_ids=position_ids, use_cache=False, prefix_tree=self)
        else:  # eager (or plain SDPA): an explicit mask of what each token may see
            allowed = self.allowed(input_ids.device)[None, None]  # (1, 1, N, N)
            mask = allowed
            if impl != "sdpa":
                mask = torch.zeros(allowed.shape, device=input_ids.device).masked_fill(
                    ~allowed, torch.finfo(torch.float32).min
                )
            out = backbone(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=False)
        return out.last_hidden_state

    def allowed(self, device: torch.device) -> torch.Tensor:
        """``(N, N)`` bool: token ``i`` sees ``j <= i`` in its own span or any of its ancestors."""
        sizes = torch.tensor([s.end - s.begin for s in self.spans], device=device)
        span_of = torch.repeat_interleave(torch.arange(len(self.spans), device=device), sizes)  # (N,)
        lineage = torch.eye(len(self.spans), dtype=torch.bool, device=device)  # (S, S): [s, t] t is s or above it
        for i, s in enumerate(self.spans):
            if s.parent >= 0:
                lineage[i] |= lineage[s.parent]
        n = span_of.numel()
        causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        return lineage[span_of][:, span_of] & causal

    def attention(self, module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kwargs: Any):
        """Each span's queries against its context: ``query (1, Hq, N, D)``, ``key``/``value``
        ``(1, Hkv, N, D)`` -> ``(1, N, Hq, D)`` (the attention interface of ``knowlyr_packed``)."""
        window = kwargs.get("sliding_window")
        longest = max(sum(e - s for s, e in chain) for chain in self.context)  # the longest row
        if window is not None and longest > window:
            raise ValueError(
                f"shared-prefix training does not implement sliding-window attention: a sequence of {longest} "
                f"tokens exceeds the model's window of {window}; set max_length <= {window} or share_prefix=False"
            )
        dropout = kwargs.get("dropout", 0.0) if module.training else 0.0
        scale = kwargs.get("scaling")
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        dtype = compute_dtype(query, query.dtype)
        query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
        softcap, outs = kwargs.get("softcap"), []
        for chain in self.context:
            a, b = chain[-1]
            if len(chain) == 1:  # a root: plain causal attention, as in the unshared row
                outs.append(
                    attention._causal_attention(
                        query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], scale, dropout, softcap
                    )
                )
                continue
            k = torch.cat([key[:, :, s:e] for s, e in chain], dim=2)  # (1, Hkv, T, D): ancestors, then the span
            v = torch.cat([value[:, :, s:e] for s, e in chain], dim=2)
            outs.append(_attend(query[:, :, a:b], k, v, scale, dropout, softcap))
        return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None  # (1, N, Hq, D)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, dropout: float, softcap: float | None):
    """The last ``L`` positions of a causal sequence of ``T``: ``q (1, Hq, L, D)``, ``k``/``v`` ``(1, Hkv, T, D)``.

    Query ``i`` sees keys ``j <= T - L + i``; the same two matmuls and softmax as the unshared
    kernel (``attention._causal_attention``), SDPA with that mask beyond its explicit-path length.
    """
    _, hq, length, dim = q.shape
    hkv, total = k.shape[1], k.shape[2]
    if total > attention._EXPLICIT_ATTENTION_MAX_LEN and softcap is None:
        allowed = torch.ones(length, total, dtype=torch.bool, device=q.device).tril(total - length)  # (L, T)
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, dropout_p=dropout, scale=scale, enable_gqa=hkv != hq
        )
    group = hq // hkv
    scores = (q * scale).reshape(1, hkv, group * length, dim) @ k.transpose(-1, -2)  # (1, Hkv, G*L, T)
    scores = scores.view(1, hkv, group, length, total)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    bias = attention._causal_bias(total, scores.dtype, scores.device)[total - length :]  # (L, T)
    probs = torch.softmax(scores + bias, dim=-1)
    if dropout:
        probs = torch.nn.functional.dropout(probs, p=dropout)
    return (probs.view(1, hkv, group * length, total) @ v).view(1, hq, length, dim)


def supports_sharing(module: Any) -> bool:
    """Whether ``module`` (a ``HiddenStates``, possibly wrapped by DDP) runs tree rows: SDPA or eager attention."""
    lm = getattr(module, "module", module).lm
    return getattr(base_model(lm).config, "_attn_implementation", None) in (PACKED_ATTENTION, "sdpa", "eager")


def share_prefixes(
    examples: Sequence[Example], min_prefix: int = MIN_SHARED_PREFIX
) -> tuple[dict[str, torch.Tensor], PrefixTree | None]:
    """``examples`` as one tree row and its tree, or ``(pack(examples), None)`` when no span is shared.

    The tree row has ``input_ids``, ``position_ids`` and ``seq_ids`` ``(1, N)`` (the row on its
    tail's tokens, -1 on shared spans) and a label table, one entry per trained token of each row,
    rows one after another: ``label_positions`` (where its predicting hidden state is in the tree
    row: the token before it, wherever that was computed), ``label_targets``, ``label_rows`` and
    ``label_weights`` (``(n,)`` each)."""
    spans = plan_spans([ex.input_ids for ex in examples], min_prefix)
    if all(s.leaf for s in spans):
        return pack(examples), None
    ids: list[int] = []
    pos: list[int] = []
    seq: list[int] = []
    for s in spans:
        ids += examples[s.row].input_ids[s.begin : s.end]
        pos += range(s.begin, s.end)
        seq += [s.row if s.leaf else -1] * (s.end - s.begin)
    where, targets, rows, weights = [], [], [], []
    for s in spans:
        if not s.leaf:
            continue
        ex, path, p = examples[s.row], [s], s.parent
        while p >= 0:
            path.insert(0, spans[p])
            p = spans[p].parent
        at = [a.start + i for a in path for i in range(a.end - a.begin)]  # tree position of each of its tokens
        for t in range(1, len(ex)):
            if ex.labels[t] != IGNORE_INDEX:
                where.append(at[t - 1])
                targets.append(ex.labels[t])
                rows.append(s.row)
                weights.append(ex.weights[t])
    order = sorted(range(len(rows)), key=rows.__getitem__)  # rows one after another, each in order (stable)
    batch = {
        "input_ids": torch.tensor([ids]),
        "position_ids": torch.tensor([pos]),
        "seq_ids": torch.tensor([seq]),
        "label_positions": torch.tensor([where[i] for i in order], dtype=torch.long),
        "label_targets": torch.tensor([targets[i] for i in order], dtype=torch.long),
        "label_rows": torch.tensor([rows[i] for i in order], dtype=torch.long),
        "label_weights": torch.tensor([weights[i] for i in order], dtype=torch.float32),
    }
    return batch, PrefixTree(spans)


def collate_rows(
    examples: Sequence[Example], *, share_prefix: bool, module: Any, packing: bool = True, pad_token_id: int = 0
) -> tuple[dict[str, torch.Tensor], PrefixTree | None]:
    """The batch of ``examples`` for ``module``: a tree row when ``share_prefix`` and some prefix is
    shared (and ``module``'s attention runs trees), else ``collate(examples, packing=...)``."""
    if share_prefix and supports_sharing(module):
        batch, tree = share_prefixes(examples)
        if tree is not None:
            return batch, tree
    return collate(examples, packing=packing, pad_token_id=pad_token_id), None


def distinct_labels(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tree row's distinct ``(position, target)`` label pairs ``(m,)`` and, per label entry, its
    pair ``(n,)``: rows that share a span share the logits there, computed once."""
    key = batch["label_positions"] * (1 << 32) + batch["label_targets"]
    distinct, inverse = torch.unique(key, return_inverse=True)
    return distinct >> 32, distinct & ((1 << 32) - 1), inverse


def label_states(
    hidden: torch.Tensor, batch: dict[str, torch.Tensor], weights: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A tree row's distinct label pairs for a summed token loss: their predicting states ``(m, H)``,
    targets ``(m,)`` and each pair's summed weight over its rows ``(m,)`` (``label_weights``, or 1
    per row without ``weights``)."""
    where, targets, inverse = distinct_labels(batch)
    w = batch["label_weights"] if weights else torch.ones_like(batch["label_weights"])
    summed = torch.zeros(where.numel(), dtype=w.dtype, device=w.device).index_add(0, inverse, w)
    return hidden.flatten(0, 1)[where], targets, summed


@dataclass
class RowLogps:
    """The log-prob of every label token of a batch of rows: ``logps``, ``rows``, ``weights`` and
    ``positions`` ``(n,)``, rows one after another, each row's tokens in order (``positions``: its
    predicting state in ``hidden`` ``(B, T, H)`` flattened)."""

    logps: torch.Tensor
    rows: torch.Tensor
    weights: torch.Tensor
    positions: torch.Tensor
    hidden: torch.Tensor
    num_rows: int

    def per_row(self, values: torch.Tensor | None = None) -> torch.Tensor:
        """``values`` ``(n,)`` (default the log-probs) as a right-padded ``(S, L)`` tensor, one row each."""
        values = self.logps if values is None else values
        counts = torch.bincount(self.rows, minlength=self.num_rows)
        pos = torch.arange(self.rows.numel(), device=self.rows.device) - (torch.cumsum(counts, 0) - counts)[self.rows]
        width = int(counts.max()) if self.rows.numel() else 0
        out = torch.zeros(self.num_rows, width, dtype=values.dtype, device=values.device)
        return out.index_put((self.rows, pos), values)

    def row_mask(self) -> torch.Tensor:
        """``(S, L)``: 1.0 where :meth:`per_row` holds a label token."""
        return self.per_row(torch.ones_like(self.logps))

    def sums(self) -> torch.Tensor:
        """Each row's summed log-probs ``(S,)``."""
        return torch.zeros(self.num_rows, dtype=self.logps.dtype, device=self.logps.device).index_add(
            0, self.rows, self.logps
        )

    def states(self) -> torch.Tensor:
        """The hidden state that predicts each label token ``(n, H)`` (e.g. for a value head)."""
        return self.hidden.flatten(0, 1)[self.positions]


def token_logps(
    module: Any,
    examples: Sequence[Example],
    head: tuple[torch.Tensor, torch.Tensor | None],
    *,
    share_prefix: bool,
    device: torch.device,
    chunk_size: int = 1024,
    packing: bool = True,
    pad_token_id: int = 0,
) -> RowLogps:
    """Log-probs of every label token of ``examples`` under ``module`` (a ``HiddenStates``) with the
    LM ``head`` ``(weight, bias)``; rows that share a prefix compute it once when ``share_prefix``
    (otherwise the rows are packed, or padded with ``packing=False``)."""
    weight, bias = head
    batch, tree = collate_rows(
        examples, share_prefix=share_prefix, module=module, packing=packing, pad_token_id=pad_token_id
    )
    batch = {k: v.to(device) for k, v in batch.items()}
    hidden = module(batch["input_ids"], batch["position_ids"], batch["seq_ids"], prefix_tree=tree)  # (B, T, H)
    if tree is not None:
        where, targets, inverse = distinct_labels(batch)
        states = hidden.flatten(0, 1)[where]  # (m, H)
        logps = gathered_token_logps(states, targets, weight, lm_head_bias=bias, chunk_size=chunk_size)[inverse]
        rows, weights, positions = batch["label_rows"], batch["label_weights"], batch["label_positions"]
    else:  # each label token is predicted by the state before it in the same row
        token, mask = chunked_token_logps(hidden, weight, batch["labels"], lm_head_bias=bias, chunk_size=chunk_size)
        logps, rows, weights = token[mask], batch["seq_ids"][:, 1:][mask], batch["weights"][:, 1:][mask]
        positions = mask.nonzero()  # (n, 2): batch row, position
        positions = positions[:, 0] * hidden.shape[1] + positions[:, 1]
    return RowLogps(logps, rows, weights, positions, hidden, len(examples))
