"""Losses against numbers derived by hand (derivations in each test's docstring)."""

import math

import pytest
import torch

from agenttrainer.algorithms.dpo import dpo_loss
from agenttrainer.algorithms.grpo import group_advantages, grpo_loss
from agenttrainer.algorithms.steps import step_level_advantages
from agenttrainer.losses import chunked_token_logps, sft_loss, step_weights


def _two_token_case():
    # lm_head = I so logits == hidden. Positions 0 and 1 carry hidden [0, ln 3] -> p = [1/4, 3/4].
    w = torch.eye(2)
    h = torch.tensor([[[0.0, math.log(3)], [0.0, math.log(3)], [5.0, 5.0]]], requires_grad=True)
    labels = torch.tensor([[-100, 1, 0]])  # token 1 predicted from pos 0, token 0 from pos 1
    return h, w, labels


def test_sft_loss_hand_derived():
    """CE(label 1) = ln(4/3) = 0.287682, CE(label 0) = ln 4 = 1.386294; mean = 0.836988."""
    h, w, labels = _two_token_case()
    loss, metrics = sft_loss(h, w, labels)
    assert loss.item() == pytest.approx((math.log(4 / 3) + math.log(4)) / 2, abs=1e-6)
    assert metrics["train/num_tokens"] == 2


def test_sft_loss_token_weights_and_num_items():
    """Weights [2, 1]: (2 * 0.287682 + 1.386294) / 2 = 0.980829; num_items=4 halves it to 0.490415."""
    h, w, labels = _two_token_case()
    weights = torch.tensor([[0.0, 2.0, 1.0]])  # aligned with labels
    loss, _ = sft_loss(h, w, labels, token_weights=weights)
    assert loss.item() == pytest.approx((2 * math.log(4 / 3) + math.log(4)) / 2, abs=1e-6)
    loss4, _ = sft_loss(h, w, labels, token_weights=weights, num_items=4)
    assert loss4.item() == pytest.approx(loss.item() / 2, abs=1e-6)


def test_chunked_equals_full_vocab_cross_entropy_and_grads():
    """Chunk size 3 over 11 tokens must equal F.cross_entropy on the full logits, values and grads."""
    torch.manual_seed(0)
    h = torch.randn(2, 7, 8, requires_grad=True)
    w = torch.randn(13, 8, requires_grad=True)
    labels = torch.randint(0, 13, (2, 7))
    labels[0, :2] = -100
    loss, _ = sft_loss(h, w, labels, chunk_size=3)
    loss.backward()
    g_h, g_w = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    ref = torch.nn.functional.cross_entropy((h @ w.t())[:, :-1].reshape(-1, 13), labels[:, 1:].reshape(-1))
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), abs=1e-6)
    assert torch.allclose(g_h, h.grad, atol=1e-6) and torch.allclose(g_w, w.grad, atol=1e-6)


def test_sft_loss_gradients_equal_autograd_reference_with_bias_and_weights():
    """The fused loss (grads formed in forward) equals autograd through full logits: loss and every grad."""
    torch.manual_seed(1)
    h = torch.randn(2, 9, 8, requires_grad=True)
    w = torch.randn(17, 8, requires_grad=True)
    b = torch.randn(17, requires_grad=True)
    labels = torch.randint(0, 17, (2, 9))
    labels[1, 3:6] = -100
    weights = torch.rand(2, 9) * 2
    loss, metrics = sft_loss(h, w, labels, lm_head_bias=b, token_weights=weights, num_items=7.0, chunk_size=4)
    (3.0 * loss).backward()  # a non-unit upstream gradient must scale every stored gradient
    got = [t.grad.clone() for t in (h, w, b)]
    for t in (h, w, b):
        t.grad = None
    logits = (h @ w.t() + b)[:, :-1]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 17), labels[:, 1:].reshape(-1), reduction="none")
    ref = (ce * weights[:, 1:].reshape(-1)).sum() / 7.0
    (3.0 * ref).backward()
    assert loss.item() == pytest.approx(ref.item(), abs=1e-5)
    mask = labels[:, 1:].reshape(-1) != -100
    assert metrics["loss/ce"] == pytest.approx(ce[mask].mean().item(), abs=1e-5)
    for g, t in zip(got, (h, w, b)):
        assert torch.allclose(g, t.grad, atol=1e-5)


def test_sft_loss_under_bf16_autocast_matches_fp32_and_frozen_head():
    """Autocast runs the matmuls in bf16 (close to fp32); a frozen LM head gets no gradient."""
    torch.manual_seed(2)
    h = torch.randn(1, 33, 16, requires_grad=True)
    w = torch.randn(50, 16) * 0.3  # frozen (LoRA-style)
    labels = torch.randint(0, 50, (1, 33))
    ref, _ = sft_loss(h, w, labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = sft_loss(h, w, labels, chunk_size=8)
    assert got.item() == pytest.approx(ref.item(), rel=2e-2)
    got.backward()
    assert h.grad is not None and h.grad.dtype == torch.float32 and w.grad is None


def test_sft_loss_single_backward_only():
    h, w, labels = _two_token_case()
    loss, _ = sft_loss(h, w, labels)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="single backward"):
        loss.backward()


def test_token_logps_layout():
    h, w, labels = _two_token_case()
    logps, mask = chunked_token_logps(h, w, labels)
    assert mask.tolist() == [[True, True]]
    assert logps[0].tolist() == pytest.approx([math.log(3 / 4), math.log(1 / 4)], abs=1e-6)


def test_step_weights():
    """[0.7, 0.9] has mean 0.8 -> [0.875, 1.125]; non-positive mean -> all ones."""
    assert step_weights([0.7, 0.9]) == pytest.approx([0.875, 1.125])
    assert step_weights([0.0, 0.0]) == [1.0, 1.0]
    assert step_level_advantages(2.0, [0.7, 0.9]) == pytest.approx([1.75, 2.25])
    assert step_level_advantages(-1.0, [0.5, 1.5]) == pytest.approx([-0.5, -1.5])


P = dict(
    policy_chosen_logps=torch.tensor([-1.0]),
    policy_rejected_logps=torch.tensor([-3.0]),
    ref_chosen_logps=torch.tensor([-2.0]),
    ref_rejected_logps=torch.tensor([-2.0]),
)


def test_dpo_sigmoid_hand_derived():
    """delta = (-1+2) - (-3+2) = 2, beta*delta = 1, -log sigmoid(1) = log(1 + e^-1) = 0.313262."""
    loss, m = dpo_loss(**P, beta=0.5)
    assert loss.item() == pytest.approx(math.log1p(math.exp(-1)), abs=1e-6)
    assert m["rewards/chosen"] == pytest.approx(0.5) and m["rewards/rejected"] == pytest.approx(-0.5)
    assert m["rewards/accuracies"] == 1.0 and m["rewards/margins"] == pytest.approx(1.0)


def test_dpo_label_smoothing_hand_derived():
    """eps=0.1: 0.9 * 0.313262 + 0.1 * 1.313262 = 0.413262."""
    loss, _ = dpo_loss(**P, beta=0.5, label_smoothing=0.1)
    assert loss.item() == pytest.approx(0.9 * math.log1p(math.exp(-1)) + 0.1 * math.log1p(math.exp(1)), abs=1e-6)


def test_dpo_hinge_and_ipo_hand_derived():
    """hinge: max(0, 1 - 0.5*2) = 0; beta=0.25 -> 1 - 0.5 = 0.5. ipo: (2 - 1/(2*0.5))^2 = 1;
    with token counts (2, 4): delta' = 1/2 - (-1)/4 = 0.75 -> (0.75 - 1)^2 = 0.0625."""
    assert dpo_loss(**P, beta=0.5, loss_type="hinge")[0].item() == pytest.approx(0.0)
    assert dpo_loss(**P, beta=0.25, loss_type="hinge")[0].item() == pytest.approx(0.5)
    assert dpo_loss(**P, beta=0.5, loss_type="ipo")[0].item() == pytest.approx(1.0)
    loss, _ = dpo_loss(
        **P, beta=0.5, loss_type="ipo", chosen_num_tokens=torch.tensor([2.0]), rejected_num_tokens=torch.tensor([4.0])
    )
    assert loss.item() == pytest.approx(0.0625)


def test_dpo_reference_free_hand_derived():
    """Reference-free: delta = -1 - (-3) = 2; beta=0.5 -> same 0.313262 as above by construction;
    beta=1 -> log(1 + e^-2) = 0.126928."""
    loss, _ = dpo_loss(P["policy_chosen_logps"], P["policy_rejected_logps"], None, None, beta=1.0, reference_free=True)
    assert loss.item() == pytest.approx(math.log1p(math.exp(-2)), abs=1e-6)


def test_dpo_bad_config():
    with pytest.raises(ValueError, match="loss_type"):
        dpo_loss(**P, loss_type="kto")
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(**P, loss_type="hinge", label_smoothing=0.1)
    with pytest.raises(ValueError, match="reference"):
        dpo_loss(P["policy_chosen_logps"], P["policy_rejected_logps"], None, None)


def test_group_advantages_hand_derived():
    """[1, 0 | 0.5, 0.5], G=2: group 1 mean 0.5, unbiased std 0.707107 -> +-0.5/0.707207 = +-0.707007;
    group 2 std 0 -> 0."""
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), 2)
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert adv.tolist() == pytest.approx([a, -a, 0.0, 0.0], abs=1e-6)
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.tensor([1.0, 0.0]), 3)


def test_grpo_loss_hand_derived():
    """rho = (1.5, 1), A=1, clip 0.2: surrogate -(1.2 + 1)/2 = -1.1; ref = logp - ln 2 ->
    kl = 0.5 + ln 2 - 1 = 0.193147 per token; kl_coef 0.1 -> -1.1 + 0.0193147 = -1.0806853."""
    logps = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = logps.detach() - torch.tensor([[math.log(1.5), 0.0]])
    ref = logps.detach() - math.log(2)
    loss, m = grpo_loss(logps, old, ref, torch.tensor([1.0]), torch.ones(1, 2), clip_eps=0.2, kl_coef=0.1)
    assert loss.item() == pytest.approx(-1.1 + 0.1 * (0.5 + math.log(2) - 1), abs=1e-6)
    assert m["train/clip_ratio"] == pytest.approx(0.5)
    assert m["train/kl"] == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    loss.backward()
    # d/dlogp: token 1 is clipped (no pg grad); token 2: -A*rho/2 = -0.5. KL grad: (1 - e^{ref-logp})/2 * 0.1 = 0.025.
    assert logps.grad[0].tolist() == pytest.approx([0.025, -0.5 + 0.025], abs=1e-6)


def test_grpo_loss_clip_higher_hand_derived():
    """clip_eps_high 0.28: rho 1.5 clips at 1.28 for A > 0, so -(1.28 + 1)/2 = -1.14; rho 1.25 is
    inside [0.8, 1.28] and keeps its gradient; for A < 0 the lower bound 0.8 is unchanged:
    rho 0.5 -> -min(-0.5, -0.8) = 0.8, so (0.8 + 1)/2 = 0.9."""
    logps = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = logps.detach() - torch.tensor([[math.log(1.5), 0.0]])
    loss, m = grpo_loss(
        logps, old, None, torch.tensor([1.0]), torch.ones(1, 2), clip_eps=0.2, clip_eps_high=0.28, kl_coef=0.0
    )
    assert loss.item() == pytest.approx(-1.14, abs=1e-6)
    assert m["train/clip_ratio"] == pytest.approx(0.5)
    inside = torch.tensor([[-1.0]], requires_grad=True)
    loss, m = grpo_loss(
        inside,
        inside.detach() - math.log(1.25),
        None,
        torch.tensor([1.0]),
        torch.ones(1, 1),
        clip_eps=0.2,
        clip_eps_high=0.28,
        kl_coef=0.0,
    )
    loss.backward()
    assert loss.item() == pytest.approx(-1.25) and m["train/clip_ratio"] == 0.0
    assert inside.grad.item() == pytest.approx(-1.25)  # d(-rho)/dlogp = -rho: not clipped
    neg = torch.tensor([[-1.0, -2.0]])
    loss, _ = grpo_loss(
        neg,
        neg - torch.tensor([[math.log(0.5), 0.0]]),
        None,
        torch.tensor([-1.0]),
        torch.ones(1, 2),
        clip_eps=0.2,
        clip_eps_high=0.28,
        kl_coef=0.0,
    )
    assert loss.item() == pytest.approx(0.9, abs=1e-6)


def test_grpo_loss_masks_and_token_advantages():
    """Masked tokens do not count; per-token advantages (-2 on the only live token) with ratio 1 give 2."""
    logps = torch.tensor([[-1.0, -5.0]])
    loss, _ = grpo_loss(logps, logps, None, torch.tensor([[-2.0, 9.0]]), torch.tensor([[1, 0]]), kl_coef=0.0)
    assert loss.item() == pytest.approx(2.0)
