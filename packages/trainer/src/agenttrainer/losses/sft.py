"""Token log-probabilities and the SFT cross-entropy, without materialising full-vocab logits.

A causal LM's loss only needs logits at positions that have a label. We take the final hidden
states and the LM-head weight, gather the positions whose (shifted) label is not ``IGNORE_INDEX``
and compute ``log_softmax`` over the vocabulary one chunk of positions at a time. In
:func:`chunked_token_logps` (DPO, GRPO, evaluation) each chunk runs under activation
checkpointing, so only its ``(chunk, H)`` hidden slice is kept for backward and the ``(chunk, V)``
logits are rebuilt there; :func:`sft_loss` instead forms each chunk's gradients during the
forward pass. Either way peak memory is one chunk of logits, not ``B*T*V``.

Label convention is Hugging Face's: ``labels[b, t]`` is the token at position ``t`` and is
predicted from ``hidden[b, t - 1]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100


def _chunk_logps(hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    logits = hidden @ weight.t()  # (n, V)
    if bias is not None:
        logits = logits + bias
    logits = logits.float()
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (n,)


def _label_positions(hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states that predict a label, their targets and the ``(B, T-1)`` mask that picked them.

    Returns ``(h (N, H), y (N,), mask)``: ``h[i]`` is ``hidden[b, t]`` and ``y[i]`` is ``labels[b, t + 1]``
    for every position whose shifted label is not ``IGNORE_INDEX``.
    """
    shift_labels = labels[:, 1:]  # (B, T-1)
    mask = shift_labels != IGNORE_INDEX
    return hidden[:, :-1][mask], shift_labels[mask], mask


def chunked_token_logps(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    lm_head_bias: torch.Tensor | None = None,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of every label token, computed chunk by chunk.

    Args:
        hidden: final hidden states ``(B, T, H)`` (after the last norm).
        lm_head_weight: ``(V, H)``.
        labels: ``(B, T)``, ``IGNORE_INDEX`` where no loss is wanted.

    Returns:
        ``(logps, mask)``, both ``(B, T - 1)``: ``logps[b, t]`` is ``log p(labels[b, t + 1])`` (float32,
        0 where masked) and ``mask`` is the boolean label mask.

    Example:
        >>> import torch
        >>> w = torch.eye(2)                               # logits = hidden
        >>> h = torch.tensor([[[0.0, 0.0], [0.0, 0.0]]])  # uniform over 2 tokens
        >>> logps, mask = chunked_token_logps(h, w, torch.tensor([[-100, 1]]))
        >>> round(logps[0, 0].item(), 4), mask.tolist()
        (-0.6931, [[True]])
    """
    h, y, mask = _label_positions(hidden, labels)
    flat = gathered_token_logps(h, y, lm_head_weight, lm_head_bias=lm_head_bias, chunk_size=chunk_size)
    logps = torch.zeros(mask.shape, dtype=torch.float32, device=hidden.device)
    logps = logps.masked_scatter(mask, flat)
    return logps, mask


def gathered_token_logps(
    h: torch.Tensor,
    targets: torch.Tensor,
    lm_head_weight: torch.Tensor,
    *,
    lm_head_bias: torch.Tensor | None = None,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """``log p(targets[i] | h[i])`` ``(n,)`` float32 for hidden states ``h`` ``(n, H)`` that each predict
    one token (``chunked_token_logps`` once it has picked them), chunk by chunk as described there."""
    pieces = []
    for start in range(0, targets.numel(), chunk_size):
        h_c, y_c = h[start : start + chunk_size], targets[start : start + chunk_size]
        if torch.is_grad_enabled() and (h_c.requires_grad or lm_head_weight.requires_grad):
            pieces.append(checkpoint(_chunk_logps, h_c, y_c, lm_head_weight, lm_head_bias, use_reentrant=False))
        else:
            pieces.append(_chunk_logps(h_c, y_c, lm_head_weight, lm_head_bias))
    return torch.cat(pieces) if pieces else h.new_zeros(0, dtype=torch.float32)


class _LinearCrossEntropy(torch.autograd.Function):
    """``sum_t coef_t * CE_t`` through the LM head, with its gradients computed in the forward pass.

    The per-token coefficients of the SFT loss (token weights / token count) are known before the
    forward pass, so the gradient of each chunk's logits, ``coef * (softmax - onehot)``, can be
    formed while the chunk's logits exist and turned straight into the gradients of the hidden
    states and the LM head. Nothing is recomputed in backward (3 matmuls per chunk instead of the
    4 of a checkpointed chunk) and no ``(n, V)`` tensor outlives its chunk. Backward only scales the
    stored gradients by the incoming scalar, so it can run once (no ``retain_graph``).
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, coef, chunk_size, dtype):
        need_h, need_w = hidden.requires_grad, weight.requires_grad
        need_b = bias is not None and bias.requires_grad
        n = targets.numel()
        nll = torch.empty(n, dtype=torch.float32, device=hidden.device)
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = None  # float32, created from the first chunk's product (saves a zero-fill pass)
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            for start in range(0, n, chunk_size):
                end = min(start + chunk_size, n)
                h_c, y_c = hidden[start:end].to(dtype), targets[start:end]
                logits = h_c @ w.t()  # (c, V)
                if b is not None:
                    logits = logits + b
                logp = torch.log_softmax(logits.float(), dim=-1)
                del logits
                rows = torch.arange(end - start, device=logp.device)
                nll[start:end] = -logp[rows, y_c]
                if not (need_h or need_w or need_b):
                    continue
                # d(coef * CE)/d logits = coef * (softmax - onehot), formed in float32 (p - 1 rounded
                # to bf16 would vanish for confident tokens), then cast once for the matmuls.
                g = logp.exp_()  # softmax, in place
                del logp
                c = coef[start:end]
                g[rows, y_c] -= 1.0
                g.mul_(c[:, None])
                if need_b:
                    grad_b += g.sum(0)
                g = g.to(dtype)
                if need_h:
                    grad_h[start:end] = g @ w
                if need_w:
                    if grad_w is None:
                        grad_w = (g.t() @ h_c).float()
                    else:
                        grad_w += g.t() @ h_c
        if need_w and grad_w is None:  # no label tokens at all
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        ctx.grads = (
            grad_h,
            None if grad_w is None else grad_w.to(weight.dtype),
            None if grad_b is None else grad_b.to(bias.dtype),
        )
        ctx.mark_non_differentiable(nll)
        return (nll * coef).sum(), nll

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        if ctx.grads is None:
            raise RuntimeError("the fused SFT loss supports a single backward pass (no retain_graph)")
        grads, ctx.grads = ctx.grads, None  # freed as soon as autograd has consumed them
        grad_h, grad_w, grad_b = (None if g is None else g.mul_(grad_loss) for g in grads)
        return grad_h, grad_w, grad_b, None, None, None, None


def compute_dtype(tensor: torch.Tensor, default: torch.dtype) -> torch.dtype:
    """The dtype autocast runs matmuls in on ``tensor``'s device (e.g. bf16), else ``default``."""
    device = tensor.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else default


def sft_loss(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    token_weights: torch.Tensor | None = None,
    num_items: float | torch.Tensor | None = None,
    lm_head_bias: torch.Tensor | None = None,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy summed over trainable tokens and divided by the number of trainable tokens.

    ``loss = sum_t w_t * CE_t / num_items`` where ``w_t`` is ``token_weights`` (1 if not given,
    e.g. ``step_reward / mean(step_rewards)`` for ``step_weighted_loss``) and ``num_items`` is the
    trainable-token count of the whole optimizer step (defaults to this batch's count).
    ``token_weights`` and ``num_items`` are constants (no gradient flows to them). Logits exist
    only for label positions, one chunk at a time, and the gradients are formed in the same pass
    (see :class:`_LinearCrossEntropy`); under autocast the matmuls run in the autocast dtype and
    the softmax in float32.

    Hand-derived check (the unit test uses these numbers): with ``lm_head_weight = I`` (V = H = 2)
    the logits equal the hidden state. Hidden ``[0, ln 3]`` gives ``p = [1/4, 3/4]``; a label 1
    costs ``ln(4/3) = 0.28768`` and a label 0 costs ``ln 4 = 1.38629``. Two such tokens with
    weights ``[2, 1]`` give ``(2 * 0.28768 + 1.38629) / 2 = 0.98083``.

    Returns:
        ``(loss, metrics)`` with ``metrics["loss/ce"]`` the unweighted mean CE over this batch's
        tokens and ``metrics["train/num_tokens"]`` their count.
    """
    h, y, mask = _label_positions(hidden, labels)
    weights = None if token_weights is None else token_weights[:, 1:][mask]
    return gathered_sft_loss(
        h,
        y,
        lm_head_weight,
        token_weights=weights,
        num_items=num_items,
        lm_head_bias=lm_head_bias,
        chunk_size=chunk_size,
    )


def gathered_sft_loss(
    h: torch.Tensor,
    targets: torch.Tensor,
    lm_head_weight: torch.Tensor,
    *,
    token_weights: torch.Tensor | None = None,
    num_items: float | torch.Tensor | None = None,
    lm_head_bias: torch.Tensor | None = None,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`sft_loss` of hidden states ``h`` ``(n, H)`` that each predict ``targets[i]``, with
    ``token_weights`` ``(n,)``: ``sum_i w_i * CE_i / num_items``."""
    y, n_tokens = targets, int(targets.numel())
    if num_items is None:
        num_items = max(n_tokens, 1)
    coef = torch.ones(n_tokens, dtype=torch.float32, device=h.device)
    if token_weights is not None:
        coef = token_weights.detach().to(torch.float32)
    coef = coef / (num_items.detach() if isinstance(num_items, torch.Tensor) else num_items)
    dtype = compute_dtype(h, lm_head_weight.dtype)
    loss, nll = _LinearCrossEntropy.apply(h, lm_head_weight, lm_head_bias, y, coef, chunk_size, dtype)
    metrics = {
        "loss/ce": float(nll.sum() / max(n_tokens, 1)),
        "train/num_tokens": float(n_tokens),
    }
    return loss, metrics


def step_weights(step_rewards: Sequence[float]) -> list[float]:
    """``r_j / mean(r)`` per step, the weight of step ``j``'s tokens (or its advantage scale).

    Rewards ``[0.7, 0.9]`` (mean 0.8) give ``[0.875, 1.125]``. The ratio is undefined when the
    mean is not positive (all-zero or net-negative process rewards); every step then weighs 1.

    >>> [round(w, 6) for w in step_weights([0.7, 0.9])]
    [0.875, 1.125]
    """
    if not step_rewards:
        return []
    mean = sum(step_rewards) / len(step_rewards)
    if mean <= 0:
        return [1.0] * len(step_rewards)
    return [r / mean for r in step_rewards]
