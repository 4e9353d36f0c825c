"""The acting engine: every prompt token is computed once, across turns and across calls.

Acting is token-in/token-out: an episode's next prompt is its last prompt, the answer sampled for
it and the new observation's tokens. ``ActingEngine`` keeps the keys and values of the last call's
rows (one row per prompt) and, for each new prompt, reuses the row it shares the longest prefix
with: only the tokens after that prefix are prefilled. Nothing is keyed by episode: matching is by
tokens, so it works for any caller (a chat request rendered from text, as ``knowlyr-trainer
serve``'s chat endpoint gets them, reuses as much as its re-tokenised history still matches; a
template that re-renders earlier turns, e.g. dropping past reasoning, is detected as a shorter
match and recomputed from where it differs, counted in ``stats["recomputed_tokens"]``).

Layout (why it is cheap): one store per layer, keys and values ``(R, Hkv, C, D)`` for R rows and C
columns, and a row mask ``(R, C)`` saying which columns hold that row's tokens. All rows append at
the same column: a call's new tokens go right-aligned into one block of columns, decoding adds one
column per step. A row with fewer new tokens than the block, or a row that stopped decoding, leaves
masked holes, and a reused row that matched only part of its tokens simply masks the rest; holes
are packed away when they exceed the valid columns. Each row's tokens keep positions 0..n-1 (the
position ids are passed explicitly), so a row computes exactly what a fresh prefill of its tokens
would, up to float rounding of the batched matmuls.

One call:
1. match: each prompt takes the row with the longest common prefix (the longest claim owns the
   row, other prompts fork a copy: the G samples of a GRPO group, a prompt and its variants);
   prompts no row matches share their own common prefix (the system turn, the tool schemas),
   prefilled once. Rows no prompt matched are freed (their episodes ended).
2. prefill the new tokens, in chunks of at most ``prefill_tokens`` (new + padding) per forward;
   the logits of each row's last token give its first answer token (the LM head runs on that
   position only).
3. decode all unfinished rows one token per step; when a quarter of them have finished, the store
   is reordered so the unfinished rows are a contiguous block and only they are decoded. A row
   finishes at an end-of-turn token, at ``max_new_tokens``, or when the caller's ``stop`` check
   says so (the chat endpoint's stop strings, a closed stream).

Attention runs through SDPA with grouped-query heads (``enable_gqa``), which reads each key/value
head once: transformers' own SDPA path repeats the keys and values per query head when a mask is
given, and on a CPU that copy costs ~13x the attention itself (SmolLM2: 3 kv / 9 query heads).

``cache_bytes`` bounds the store. Rows that would take it over are served by a full re-prefill in a
scratch store that is freed after the call (counted in ``stats["over_budget_rows"]``); the rows
kept are the ones that match the most tokens.

Simplifications: Llama-like decoder models as transformers implements them (a ``cache`` or
``past_key_values`` whose ``update`` returns the keys and values to attend to; rotary positions
from ``position_ids``), no sliding-window layers; one row per prompt, so the cache holds what the
last call's prompts became, not an LRU of older calls.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from agenttrainer.models.attention import base_model

# A shared prefix shorter than this is not worth a separate forward pass and a copy.
MIN_SHARED_PREFIX_TOKENS = 16
# Tokens (new + padding) per prefill forward: bounds the activations and the mask of one pass.
DEFAULT_PREFILL_TOKENS = 4096
# Fewer tokens than this in a prefill forward and splitting it to save padding costs more than it saves.
MIN_CHUNK_TOKENS = 256
GQA_ATTENTION = "knowlyr_gqa_sdpa"


def cache_keyword(model: Any) -> str:
    """The keyword ``model``'s forward and ``generate`` take a KV cache under: ``cache`` where
    transformers has renamed it (5.x, where ``past_key_values`` warns on every call), else
    ``past_key_values`` (4.x, which has no ``cache``)."""
    return "cache" if "cache" in inspect.signature(base_model(model).forward).parameters else "past_key_values"


def default_cache_bytes() -> int:
    """A quarter of the machine's memory, at most 8 GiB."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 8 << 30
    return min(8 << 30, physical // 4)


@dataclass
class EngineSample:
    """One answer: sampled ids (through the end-of-turn token), their log-probs, why it stopped."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (an end-of-turn token, or the caller's ``stop`` check) | "length"
    entropy: float | None
    # with ``generate(top_logprobs=k)``: per answer token, the k likeliest (id, log-prob) pairs of
    # the raw distribution it was drawn from, likeliest first
    top_logprobs: list[list[tuple[int, float]]] | None = None


def _gqa_sdpa(module: Any, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """SDPA with grouped-query heads read in place (no per-head copy of keys and values)."""
    out = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (None elsewhere: other C libraries, other systems)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name and os.uname().sysname == "Linux" else None
    except (OSError, AttributeError):
        return None


def _release_freed() -> None:
    """Hand the heap's free pages back to the system.

    Why: glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), so
    after the first store is freed the per-layer key/value blocks of later stores come from the
    heap, where freed blocks stay with the allocator; a store that grew by a few columns cannot
    reuse its predecessor's smaller blocks. Measured on 50 retail episodes: peak RSS 4.9 GB for a
    1.9 GB store, the process keeping every store it had held; trimmed when a store's layers are
    released, 3.0 GB.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _register_attention() -> None:
    """Register ``_gqa_sdpa`` with transformers once per process."""
    from transformers import AttentionInterface

    AttentionInterface.register(GQA_ATTENTION, _gqa_sdpa)


@contextlib.contextmanager
def _gqa_attention(model: Any) -> Iterator[None]:
    """Run ``model``'s attention layers through ``_gqa_sdpa`` for the duration."""
    _register_attention()
    configs = {id(m.config): m.config for m in base_model(model).modules() if hasattr(m, "config")}
    saved = {key: config._attn_implementation for key, config in configs.items()}
    try:
        for config in configs.values():
            config._attn_implementation = GQA_ATTENTION
        yield
    finally:
        for key, config in configs.items():
            config._attn_implementation = saved[key]


class _RowStore:
    """Keys and values of R rows in C columns per layer, with the mask of each row's columns.

    The mask says how many rows there are (R); the key and value tensors may hold more (rows of
    ended episodes, kept allocated so the next call can reuse the memory in place).

    As the model's KV cache (``update``) it writes a forward's keys and values for rows
    ``[lo, hi)`` at columns ``[start, start + q)`` and returns that block of rows over
    ``[0, start + q)``.
    """

    def __init__(self, layers: int, rows: int, kv_heads: int, head_dim: int, columns: int, dtype, device) -> None:
        shape = (rows, kv_heads, max(columns, 1), head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.mask = torch.zeros(rows, max(columns, 1), dtype=torch.bool, device=device)  # (R, C)
        self.width = 0  # columns in use
        self.tokens: list[list[int]] = [[] for _ in range(rows)]  # per row: its tokens in column order
        self.window = (0, rows, 0)  # (lo, hi, start) of the forward in progress

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    @property
    def capacity(self) -> int:
        return self.mask.shape[1]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    # -- the KV cache protocol the model calls ----------------------------------------------

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        lo, hi, start = self.window
        end = start + key_states.shape[2]
        self.keys[layer_idx][lo:hi, :, start:end] = key_states
        self.values[layer_idx][lo:hi, :, start:end] = value_states
        return self.keys[layer_idx][lo:hi, :, :end], self.values[layer_idx][lo:hi, :, :end]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.window[2]

    # -- layout ----------------------------------------------------------------------------

    def reserve(self, columns: int) -> None:
        """Make room for ``columns`` columns (grown by half again, so appends are amortised)."""
        if columns <= self.capacity:
            return
        grown = max(columns, self.capacity + self.capacity // 2)
        for store in (self.keys, self.values):
            for layer, old in enumerate(store):
                new = old.new_zeros(old.shape[0], old.shape[1], grown, old.shape[3])
                new[:, :, : self.width] = old[:, :, : self.width]
                store[layer] = new
                del old
                _release_freed()
        mask = self.mask.new_zeros(self.rows, grown)
        mask[:, : self.width] = self.mask[:, : self.width]
        self.mask = mask

    def select(self, sources: Sequence[int], keep: Sequence[int], extra_columns: int = 0) -> _RowStore:
        """A store whose row j is row ``sources[j]`` with only its first ``keep[j]`` tokens valid,
        with room for ``extra_columns`` more columns. Consumes this store (do not use it after).

        Where the rows fit the tensors already allocated (episodes end, so a call usually has no
        more rows than the last), rows are gathered in place, one layer at a time: no new store is
        allocated while the old one is alive. That matters more than it seems: freed blocks of a
        different size stay in the C allocator's heap, so copying into a fresh store each call
        grows the process by a store per call even though each old one is freed.
        """
        index = torch.tensor(list(sources), dtype=torch.long, device=self.mask.device)
        rows, width = len(sources), self.width
        out = _RowStore.__new__(_RowStore)
        allocated_rows, capacity = self.keys[0].shape[0], self.capacity
        if rows <= allocated_rows and width + extra_columns <= capacity:
            if list(sources) != list(range(rows)):
                for tensor in (*self.keys, *self.values):
                    tensor[:rows, :, :width] = tensor[:, :, :width].index_select(0, index)
            out.keys, out.values = self.keys, self.values
        else:
            capacity = max(width + extra_columns, capacity + capacity // 2, 1)
            out.keys = self._take(index, capacity, self.keys)
            out.values = self._take(index, capacity, self.values)
        mask = self.mask.new_zeros(rows, capacity)
        mask[:, :width] = self.mask.index_select(0, index)[:, :width]
        counts = mask.cumsum(1)  # (R, C): valid tokens up to and including each column
        mask &= counts <= torch.tensor(list(keep), device=mask.device).unsqueeze(1)
        out.mask = mask
        out.width = width
        out.tokens = [self.tokens[s][:k] for s, k in zip(sources, keep)]
        out.window = (0, rows, 0)
        self.keys, self.values = [], []
        return out

    def _take(self, index: torch.Tensor, capacity: int, store: list[torch.Tensor]) -> list[torch.Tensor]:
        """Rows ``index`` of each layer in ``store`` over ``capacity`` columns, releasing ``store``'s
        layers one by one (the list is emptied): the peak is one store and one layer, not two stores."""
        taken = []
        while store:
            old = store.pop(0)
            # zeros beyond the copied columns: a masked column is still read by attention (its score
            # gets -inf added), and uninitialised memory may hold NaN, which no mask cancels
            new = old.new_zeros(len(index), old.shape[1], capacity, old.shape[3])
            new[:, :, : self.width] = old[:, :, : self.width].index_select(0, index)
            del old
            _release_freed()
            taken.append(new)
        return taken

    def reorder(self, order: Sequence[int], lo: int) -> None:
        """Permute rows ``[lo, lo + len(order))`` to ``order`` (given as row indices)."""
        hi = lo + len(order)
        index = torch.tensor(list(order), dtype=torch.long, device=self.mask.device)
        for store in (self.keys, self.values):
            for tensor in store:  # the columns in use only: the rest hold nothing yet
                tensor[lo:hi, :, : self.width] = tensor[:, :, : self.width].index_select(0, index)
        self.mask[lo:hi] = self.mask.index_select(0, index)
        self.tokens[lo:hi] = [self.tokens[i] for i in order]

    def pack(self) -> None:
        """Move each row's valid columns to the right edge of ``max(valid)`` columns (no holes)."""
        counts = self.mask[:, : self.width].sum(1)  # (R,)
        width = int(counts.max()) if self.rows else 0
        # For row r, target column c takes the (c - (width - n_r))-th valid column of the row.
        order = torch.argsort((~self.mask[:, : self.width]).to(torch.int8), dim=1, stable=True)  # valid first
        target = torch.arange(width, device=self.mask.device).unsqueeze(0) - (width - counts).unsqueeze(1)  # (R, W)
        valid = target >= 0
        gather = order.gather(1, target.clamp(min=0))  # (R, W)
        for store in (self.keys, self.values):
            for tensor in store:
                index = gather[:, None, :, None].expand(-1, tensor.shape[1], -1, tensor.shape[3])
                packed = tensor[: self.rows, :, : self.width].gather(2, index)
                tensor[: self.rows, :, :width] = packed
        self.mask[:, :width] = valid
        self.mask[:, width:] = False
        self.width = width


class ActingEngine:
    """Batched sampling with an in-process causal LM that keeps its KV cache between calls."""

    def __init__(
        self,
        model: Any,
        end_token_ids: Sequence[int],
        pad_token_id: int,
        *,
        logprobs: bool = True,
        cache_bytes: int | None = None,
        prefill_tokens: int = DEFAULT_PREFILL_TOKENS,
        max_rows: int | None = None,
    ) -> None:
        if max_rows is not None and max_rows < 1:
            raise ValueError(f"max_rows must be >= 1 or None, got {max_rows}")
        self.model = model
        self.end_token_ids = list(end_token_ids)
        self.pad_token_id = pad_token_id
        self.logprobs = logprobs
        self.cache_bytes = default_cache_bytes() if cache_bytes is None else cache_bytes
        self.prefill_tokens = max(1, prefill_tokens)
        self.max_rows = max_rows
        self.store: _RowStore | None = None
        self.stats = dict.fromkeys(
            (
                "calls",
                "prompt_tokens",
                "reused_tokens",
                "prefilled_tokens",
                "recomputed_tokens",
                "mismatched_rows",
                "over_budget_rows",
                "decode_steps",
                "decoded_row_steps",
                "computed_tokens",
                "logit_rows",
                "packs",
            ),
            0,
        )
        self._cache_keyword: str | None = None

    @property
    def _config(self) -> Any:
        """The decoder's config (read when first needed: building an engine does not touch the model)."""
        config = base_model(self.model).config
        return config.get_text_config() if hasattr(config, "get_text_config") else config

    def weights_updated(self) -> None:
        """The weights changed: every cached key and value is stale."""
        self.store = None

    # -- one call -----------------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        top_logprobs: int | None = None,
        stop: Callable[[int, list[int]], bool] | None = None,
    ) -> list[EngineSample]:
        """One answer per prompt.

        ``top_logprobs=k`` also returns, per answer token, the k likeliest tokens of its raw
        distribution (and the answer's log-probs even when the engine was built without them).
        ``stop(j, answer_ids)`` is called after each token appended to prompt ``j``'s answer (the
        end-of-turn token included, so a caller can stream every token); True ends that answer
        there with finish reason "stop" and its row leaves the decode batch as an ended one does.
        """
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if not prompts:
            return []
        prompts = [list(p) for p in prompts]
        self.stats["calls"] += 1
        self.stats["prompt_tokens"] += sum(len(p) for p in prompts)
        training = self.model.training
        self.model.eval()  # no dropout while acting
        try:
            with torch.no_grad(), _gqa_attention(self.model):
                return self._generate(prompts, max_new_tokens, temperature, top_p, top_logprobs, stop)
        except BaseException:
            # A call cut short (an exception out of a forward: a cancelled request, out of memory)
            # leaves rows whose tokens and mask claim columns that were never written: nothing
            # cached can be trusted, so the next call prefills from scratch.
            self.store = None
            raise
        finally:
            self.model.train(training)

    def _generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        top_logprobs: int | None,
        stop: Callable[[int, list[int]], bool] | None,
    ) -> list[EngineSample]:
        options = {"top_logprobs": top_logprobs, "stop": stop}
        sources, keep = self._match(prompts)
        kept = self._within_budget(prompts, sources, keep, max_new_tokens)
        samples: list[EngineSample | None] = [None] * len(prompts)
        cached = [j for j in range(len(prompts)) if kept[j]]
        overflow = [j for j in range(len(prompts)) if not kept[j]]
        self.stats["over_budget_rows"] += len(overflow)
        if not cached:
            self.store = None
        # the cached rows (their store kept for the next call), then the rest in a scratch store
        # that is freed after the call
        for group, cache in ((cached, True), (overflow, False)):
            if not group:
                continue
            batch = [prompts[j] for j in group]
            store = self._rows_for(
                batch,
                [sources[j] if cache else None for j in group],
                [keep[j] if cache else 0 for j in group],
                max_new_tokens,
                keep_store=cache,
            )
            if cache:
                self.store = store
            run = self._run(store, batch, max_new_tokens, temperature, top_p, index=group, **options)
            for j, sample in zip(group, run):
                samples[j] = sample
        return samples  # type: ignore[return-value]  # every slot was filled above

    def _match(self, prompts: list[list[int]]) -> tuple[list[int | None], list[int]]:
        """Per prompt: the stored row it extends furthest (None: none) and how many of its tokens to keep."""
        sources: list[int | None] = [None] * len(prompts)
        keep = [0] * len(prompts)
        if self.store is None:
            return sources, keep
        rows = self.store.tokens
        for j, prompt in enumerate(prompts):
            best, best_len = None, 0
            # the row at the same index first: in lockstep acting it is the episode's own row
            candidates = [j] if j < len(rows) else []
            candidates += [r for r in range(len(rows)) if r != j]
            for r in candidates:
                length = _common_prefix(rows[r], prompt, len(prompt) - 1)
                if length > best_len:
                    best, best_len = r, length
                if r == j and length == len(rows[r]):
                    break  # the prompt extends its own row (lockstep acting): look no further
            if best is not None and best_len >= MIN_SHARED_PREFIX_TOKENS:
                sources[j], keep[j] = best, best_len
                if best_len < min(len(rows[best]), len(prompt) - 1):  # the prompt rewrote the row's tokens
                    self.stats["mismatched_rows"] += 1
                    self.stats["recomputed_tokens"] += len(rows[best]) - best_len
        return sources, keep

    def _within_budget(
        self, prompts: list[list[int]], sources: list[int | None], keep: list[int], max_new_tokens: int
    ) -> list[bool]:
        """Which prompts keep a cached row: all whose store fits ``cache_bytes`` (most reused first)."""
        per_token = self._bytes_per_token()
        width = (self.store.width if self.store is not None else 0) + max(len(p) for p in prompts) + max_new_tokens
        order = sorted(range(len(prompts)), key=lambda j: -keep[j])
        fits = max(1, self.cache_bytes // max(1, per_token * width))
        kept = [False] * len(prompts)
        for j in order[:fits]:
            kept[j] = True
        return kept

    def _kv_shape(self) -> tuple[int, int, int]:
        """(layers, key/value heads, head dim) of the decoder's KV cache."""
        c = self._config
        heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        return c.num_hidden_layers, heads, head_dim

    def _bytes_per_token(self) -> int:
        layers, heads, head_dim = self._kv_shape()
        return 2 * layers * heads * head_dim * next(self.model.parameters()).element_size()

    def _rows_for(
        self,
        prompts: list[list[int]],
        sources: list[int | None],
        keep: list[int],
        max_new_tokens: int,
        *,
        keep_store: bool = True,
    ) -> _RowStore:
        """A store with one row per prompt: its source row's first ``keep`` tokens, or the prompts'
        shared prefix (prefilled once here) for the prompts without a source."""
        fresh = [j for j, s in enumerate(sources) if s is None]
        base = self.store if keep_store else None
        if keep_store:
            self.store = None  # consumed below (stacked, selected): one store in memory, not two
        shared = _shared_prefix(prompts, fresh)
        if shared >= MIN_SHARED_PREFIX_TOKENS:
            seed = self._empty_store(1, shared)
            self._prefill(seed, [prompts[fresh[0]][:shared]])
            base = seed if base is None else _stack(base, seed)
            seed_row = base.rows - 1
            sources = [seed_row if s is None else s for s in sources]
            keep = [shared if j in fresh else k for j, k in enumerate(keep)]
        if base is None:
            return self._empty_store(len(prompts), max(len(p) for p in prompts) + max_new_tokens)
        rows = base.select(
            [0 if s is None else s for s in sources],
            [k if s is not None else 0 for s, k in zip(sources, keep)],
            extra_columns=max(len(p) - k for p, k in zip(prompts, keep)) + max_new_tokens,
        )
        self.stats["reused_tokens"] += sum(k for s, k in zip(sources, keep) if s is not None)
        return rows

    def _empty_store(self, rows: int, columns: int) -> _RowStore:
        layers, heads, head_dim = self._kv_shape()
        parameter = next(self.model.parameters())
        return _RowStore(layers, rows, heads, head_dim, columns, parameter.dtype, parameter.device)

    # -- forward passes -------------------------------------------------------------------

    def _forward(self, store: _RowStore, lo: int, hi: int, ids: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Run rows ``[lo, hi)`` on ``ids`` ``(B, q)`` (``real`` marks non-pad tokens) appended at
        ``store.width``; returns the last position's logits ``(B, V)`` and commits the columns."""
        q = ids.shape[1]
        start = store.width
        store.reserve(start + q)
        store.mask[lo:hi, start : start + q] = real
        mask = store.mask[lo:hi, : start + q]  # (B, K)
        # position of each new token: the row's valid tokens before it
        positions = mask.cumsum(1)[:, start:] - 1  # (B, q)
        positions = positions.clamp(min=0)
        allowed = mask.unsqueeze(1).expand(-1, q, -1).clone()  # (B, q, K)
        if q > 1:
            future = torch.ones(q, q, dtype=torch.bool, device=mask.device).triu_(1)
            allowed[:, :, start:] &= ~future
        diagonal = torch.arange(q, device=mask.device)
        allowed[:, diagonal, start + diagonal] = True  # a pad query attends to itself: never an empty row
        bias = torch.zeros(allowed.shape, dtype=store.keys[0].dtype, device=mask.device)
        bias.masked_fill_(~allowed, torch.finfo(bias.dtype).min)
        store.window = (lo, hi, start)
        kwargs = {self._cache_kw(): store}
        out = self.model(
            input_ids=ids,
            attention_mask=bias.unsqueeze(1),
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        self.stats["computed_tokens"] += ids.numel()  # pads included: what the matmuls ran on
        self.stats["logit_rows"] += ids.shape[0]
        return out.logits[:, -1].float()

    def _cache_kw(self) -> str:
        if self._cache_keyword is None:
            self._cache_keyword = cache_keyword(self.model)
        return self._cache_keyword

    def _prefill(self, store: _RowStore, new: list[list[int]]) -> torch.Tensor:
        """Append each row's ``new`` tokens, right-aligned in one block of columns; the last
        token's logits per row ``(R, V)``.

        Rows go in chunks of at most ``prefill_tokens`` (rows x the chunk's longest), each padded
        only to its own longest row (a row over 5/4 of the chunk's first starts the next chunk,
        once the chunk holds ``MIN_CHUNK_TOKENS``): the chunk writes the block's last columns and its rows leave
        the block's first ones masked. With rows in order of length (``_run`` sorts them) padding
        all but disappears; padding every row to the call's longest cost a quarter of the tokens
        computed on 50 retail episodes, whose observations differ in length.
        """
        device = store.mask.device
        width = max(len(t) for t in new)
        start = store.width
        logits = []
        lo = 0
        while lo < len(new):
            hi, longest = lo, 0
            while hi < len(new) and (hi == lo or (hi + 1 - lo) * max(longest, len(new[hi])) <= self.prefill_tokens):
                if self.max_rows and hi - lo >= self.max_rows:
                    break
                # a row much longer than the chunk's first starts a new chunk, once this one is big
                # enough to keep the matmuls efficient: pads stay under a fifth of the chunk
                if (hi - lo) * longest >= MIN_CHUNK_TOKENS and len(new[hi]) * 4 > max(len(new[lo]), 1) * 5:
                    break
                longest = max(longest, len(new[hi]))
                hi += 1
            q = max(longest, 1)
            ids = torch.full((hi - lo, q), self.pad_token_id, dtype=torch.long, device=device)  # (B, q)
            real = torch.zeros(hi - lo, q, dtype=torch.bool, device=device)  # (B, q)
            for b, tokens in enumerate(new[lo:hi]):
                if tokens:
                    ids[b, q - len(tokens) :] = torch.tensor(tokens, device=device)
                    real[b, q - len(tokens) :] = True
            store.width = start + width - q  # the chunk writes the block's last q columns
            logits.append(self._forward(store, lo, hi, ids, real))
            lo = hi
        for row, tokens in enumerate(new):
            store.tokens[row] = store.tokens[row] + tokens
        store.width = start + width
        self.stats["prefilled_tokens"] += sum(len(t) for t in new)
        return torch.cat(logits)

    def _run(
        self,
        store: _RowStore,
        prompts: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        *,
        index: list[int],
        top_logprobs: int | None = None,
        stop: Callable[[int, list[int]], bool] | None = None,
    ) -> list[EngineSample]:
        """Prefill what each row lacks of its prompt, then sample every row to its end
        (``index[j]``: prompt j's index in the call, as ``stop`` is told)."""
        if store.width > 2 * max(1, int(store.mask[:, : store.width].sum(1).max())) + 64:
            store.pack()
            self.stats["packs"] += 1
        rows = len(prompts)
        new = [prompt[len(tokens) :] for prompt, tokens in zip(prompts, store.tokens)]
        # store rows in order of how much they prefill, so each prefill chunk pads to its own longest
        slot = sorted(range(rows), key=lambda j: len(new[j]))  # slot[k]: which prompt store row k holds
        if slot != list(range(rows)):
            store.reorder(slot, 0)
        logits = self._prefill(store, [new[j] for j in slot])  # (R, V), in store order
        answers: list[list[int]] = [[] for _ in range(rows)]
        logps: list[list[float]] = [[] for _ in range(rows)]
        entropies: list[list[float]] = [[] for _ in range(rows)]
        alternatives: list[list[list[tuple[int, float]]]] = [[] for _ in range(rows)]
        record = self.logprobs or top_logprobs is not None
        finished = [False] * rows
        stopped = [False] * rows  # ended by the caller's stop check
        active = rows  # store rows [0, active) are still decoding
        ends = torch.tensor(self.end_token_ids, device=store.mask.device)
        for step in range(max_new_tokens):
            tokens, token_logps, token_entropy, top = self._pick_in_prompt_order(
                logits, slot[:active], temperature, top_p, top_logprobs
            )
            top_values, top_ids = (top[0].tolist(), top[1].tolist()) if top is not None else ([], [])
            done = torch.isin(tokens, ends).tolist()
            for k in range(active):
                j = slot[k]
                if finished[j]:
                    continue
                answers[j].append(int(tokens[k]))
                if record:
                    logps[j].append(float(token_logps[k]))
                    entropies[j].append(float(token_entropy[k]))
                if top is not None:
                    alternatives[j].append(list(zip(top_ids[k], top_values[k])))
                halt = stop is not None and stop(index[j], answers[j])  # called for every token, the end one too
                finished[j] = done[k] or halt
                stopped[j] = halt and not done[k]
            still = [k for k in range(active) if not finished[slot[k]]]
            if not still or step == max_new_tokens - 1:
                break
            if len(still) <= active - max(1, active // 4):  # a quarter finished: decode only the rest
                order = still + [k for k in range(active) if finished[slot[k]]]
                store.reorder(order, 0)
                slot[:active] = [slot[k] for k in order]
                keep = torch.tensor(still, device=tokens.device)
                tokens = tokens.index_select(0, keep)
                active = len(still)
            ids = tokens[:active].unsqueeze(1)  # (A, 1)
            real = torch.tensor([not finished[slot[k]] for k in range(active)], device=ids.device).unsqueeze(1)
            for k in range(active):
                if not finished[slot[k]]:
                    store.tokens[k].append(int(ids[k, 0]))
            logits = self._forward(store, 0, active, ids, real)
            store.width += 1
            self.stats["decode_steps"] += 1
            self.stats["decoded_row_steps"] += active
        # the store's rows back in prompt order, so the next call finds row j at j
        inverse = [0] * rows
        for k, j in enumerate(slot):
            inverse[j] = k
        if inverse != list(range(rows)):
            store.reorder(inverse, 0)
        samples = []
        for j in range(rows):
            ids = answers[j]
            ended = (bool(ids) and ids[-1] in self.end_token_ids) or stopped[j]
            entropy = sum(entropies[j]) / len(entropies[j]) if record and entropies[j] else None
            samples.append(
                EngineSample(
                    ids,
                    logps[j] if record else [0.0] * len(ids),
                    "stop" if ended else "length",
                    entropy,
                    alternatives[j] if top_logprobs is not None else None,
                )
            )
        return samples

    def _pick_in_prompt_order(
        self, logits: torch.Tensor, prompts: list[int], temperature: float, top_p: float, top_logprobs: int | None
    ):
        """``_pick`` with the random draws made in prompt order (``prompts[k]``: store row k's prompt).

        Store rows are sorted for the prefill, so their order depends on what the cache held; a
        sampled answer must not: one seed gives the same answers whatever the cache.
        """
        if temperature <= 0 or prompts == sorted(prompts):
            return self._pick(logits, temperature, top_p, top_logprobs)
        order = torch.tensor(sorted(range(len(prompts)), key=prompts.__getitem__), device=logits.device)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order), device=order.device)
        tokens, token_logps, token_entropy, top = self._pick(
            logits.index_select(0, order), temperature, top_p, top_logprobs
        )
        tokens = tokens.index_select(0, inverse)
        if token_logps is not None:
            token_logps, token_entropy = token_logps.index_select(0, inverse), token_entropy.index_select(0, inverse)
        if top is not None:
            top = tuple(x.index_select(0, inverse) for x in top)
        return tokens, token_logps, token_entropy, top

    def _pick(self, logits: torch.Tensor, temperature: float, top_p: float, top_k: int | None = None):
        """Next token per row from raw logits ``(B, V)``; its log-prob and the entropy at temperature 1;
        with ``top_k`` the k likeliest tokens' (log-probs, ids) ``(B, k)`` of that same distribution."""
        if temperature > 0:
            scaled = logits / temperature
            if top_p < 1.0:
                ordered, order = scaled.sort(-1, descending=False)
                cumulative = ordered.softmax(-1).cumsum(-1)
                drop = cumulative <= 1 - top_p
                drop[:, -1] = False  # keep at least the most likely token
                scaled = scaled.scatter(1, order, ordered.masked_fill(drop, float("-inf")))
            tokens = torch.multinomial(scaled.softmax(-1), 1).squeeze(1)
        else:
            tokens = logits.argmax(-1)
        if not self.logprobs and top_k is None:
            return tokens, None, None, None
        dist = logits.log_softmax(-1)  # (B, V)
        token_logps = dist.gather(1, tokens.unsqueeze(1)).squeeze(1)
        entropy = -(dist.exp() * dist).sum(-1)
        # only when asked: a top-k over the vocabulary per step is not free
        top = dist.topk(min(top_k, dist.shape[-1]), dim=-1) if top_k is not None else None  # each (B, k)
        return tokens, token_logps, entropy, top


def _common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, at most ``limit``."""
    n = min(len(a), len(b), limit)
    if n <= 0:
        return 0
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _shared_prefix(prompts: list[list[int]], among: list[int]) -> int:
    """Tokens the prompts ``among`` all start with, leaving each at least one to prefill (0 if < 2)."""
    if len(among) < 2:
        return 0
    first = prompts[among[0]]
    length = len(first) - 1
    for j in among[1:]:
        length = _common_prefix(first, prompts[j], min(length, len(prompts[j]) - 1))
    return max(length, 0)


def _stack(a: _RowStore, b: _RowStore) -> _RowStore:
    """One store holding ``a``'s rows then ``b``'s (columns aligned at the right edge).

    Consumes both stores layer by layer (the peak is the result and one layer of the inputs)."""
    width = max(a.width, b.width)
    out = _RowStore.__new__(_RowStore)

    def stacked(x: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
        shape = list(x.shape)
        shape[0], shape[dim] = a.rows + b.rows, width
        joined = x.new_zeros(shape)
        joined[: a.rows].narrow(dim, width - a.width, a.width).copy_(x[: a.rows].narrow(dim, 0, a.width))
        joined[a.rows :].narrow(dim, width - b.width, b.width).copy_(y[: b.rows].narrow(dim, 0, b.width))
        return joined

    out.keys, out.values = [], []
    for source, target in ((a.keys, out.keys), (a.values, out.values)):
        other = b.keys if source is a.keys else b.values
        while source:
            target.append(stacked(source.pop(0), other.pop(0), 2))
            _release_freed()
    out.mask = stacked(a.mask, b.mask, 1)
    out.width = width
    out.tokens = a.tokens + b.tokens
    out.window = (0, out.rows, 0)
    return out
