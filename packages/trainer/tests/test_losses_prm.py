"""The PRM loss against numbers derived by hand (derivations in each test's docstring).

The example: three prefixes of one task, logits ``x = (2, 0, -1)``, labels ``y = (1, 0.5, 0)``.

BCE with logits is ``softplus(x) - x y``:
  r0: ``log(1 + e^2) - 2 = log(1 + e^-2) = 0.126928``
  r1: ``log(1 + e^0) - 0 = log 2 = 0.693147``
  r2: ``log(1 + e^-1) = 0.313262``
  mean ``= 1.133337 / 3 = 0.377779``.

Pairs (same task, ``y_i - y_j >= 0.5``): (0, 1), (0, 2), (1, 2), each ``-log sigmoid(x_i - x_j) =
log(1 + e^-(x_i - x_j))``:
  (0, 1): ``log(1 + e^-2) = 0.126928``; (0, 2): ``log(1 + e^-3) = 0.048587``;
  (1, 2): ``log(1 + e^-1) = 0.313262``; mean ``= 0.488777 / 3 = 0.162926``.
"""

import math

import pytest
import torch

from agenttrainer.losses import prm_loss

BCE = (math.log1p(math.exp(-2)), math.log(2), math.log1p(math.exp(-1)))  # r0, r1, r2
PAIR_01, PAIR_02, PAIR_12 = math.log1p(math.exp(-2)), math.log1p(math.exp(-3)), math.log1p(math.exp(-1))


def _example(groups=(0, 0, 0)):
    logits = torch.tensor([2.0, 0.0, -1.0], requires_grad=True)
    return logits, torch.tensor([1.0, 0.5, 0.0]), torch.tensor(groups)


def test_bce_plus_pairwise_hand_derived():
    """0.377779 + 1.0 x 0.162926 = 0.540705, over 3 pairs."""
    logits, labels, groups = _example()
    loss, metrics = prm_loss(logits, labels, groups, pairwise_weight=1.0, margin=0.5)
    assert metrics["loss/bce"] == pytest.approx(sum(BCE) / 3, abs=1e-6)
    assert metrics["loss/bce"] == pytest.approx(0.377779, abs=1e-6)
    assert metrics["loss/pairwise"] == pytest.approx(0.162926, abs=1e-6)
    assert metrics["train/pairs"] == 3
    assert loss.item() == pytest.approx(0.540705, abs=1e-6)


def test_gradient_hand_derived():
    """d/dx of BCE is ``(sigmoid(x) - y) / 3``; of ``-log sigmoid(x_i - x_j)`` it is ``-sigmoid(x_j - x_i)``
    for ``x_i`` and ``+sigmoid(x_j - x_i)`` for ``x_j``. For r1 (``sigmoid(0) = y = 0.5``, so no BCE
    gradient): ``(+sigmoid(-2) - sigmoid(-1)) / 3 = (0.119203 - 0.268941) / 3 = -0.049913``: r1 is pushed
    up by r2 below it more than it is pushed down by r0 above it."""
    logits, labels, groups = _example()
    loss, _ = prm_loss(logits, labels, groups, pairwise_weight=1.0, margin=0.5)
    loss.backward()
    sig = torch.sigmoid
    assert logits.grad[1].item() == pytest.approx(-0.049913, abs=1e-6)
    r0 = (sig(torch.tensor(2.0)) - 1) / 3 + (-sig(torch.tensor(-2.0)) - sig(torch.tensor(-3.0))) / 3
    assert logits.grad[0].item() == pytest.approx(r0.item(), abs=1e-6)  # (0.880797 - 1) / 3 - (0.119203 + 0.047426) / 3


def test_only_pairs_of_one_group_within_the_margin():
    """r2 in another task leaves one pair, (0, 1): 0.377779 + 0.5 x 0.126928 = 0.441243. At margin 0.6
    (one task) only (0, 2) differs enough: pairwise = 0.048587. Three tasks: no pair, pairwise 0."""
    logits, labels, _ = _example()
    loss, metrics = prm_loss(logits, labels, torch.tensor([0, 0, 1]), pairwise_weight=0.5, margin=0.5)
    assert metrics["train/pairs"] == 1 and metrics["loss/pairwise"] == pytest.approx(PAIR_01, abs=1e-6)
    assert loss.item() == pytest.approx(0.441243, abs=1e-6)
    _, metrics = prm_loss(logits, labels, torch.tensor([0, 0, 0]), margin=0.6)
    assert metrics["train/pairs"] == 1 and metrics["loss/pairwise"] == pytest.approx(PAIR_02, abs=1e-6)
    loss, metrics = prm_loss(logits, labels, torch.tensor([0, 1, 2]))
    assert metrics["train/pairs"] == 0 and metrics["loss/pairwise"] == 0.0
    assert loss.item() == pytest.approx(0.377779, abs=1e-6)


def test_a_margin_reached_up_to_float_rounding_makes_a_pair():
    """0.7 - 0.2 is 0.49999999999999994 in floating point; it still makes a pair at margin 0.5."""
    _, metrics = prm_loss(torch.zeros(2), torch.tensor([0.7, 0.2]), torch.tensor([0, 0]), margin=0.5)
    assert metrics["train/pairs"] == 1
    with pytest.raises(ValueError, match="margin must be positive"):
        prm_loss(torch.zeros(2), torch.tensor([0.7, 0.2]), torch.tensor([0, 0]), margin=0.0)


def test_micro_batches_add_up_to_the_step():
    """Two micro-batches, each divided by the step's counts (4 records, 1 pair), add up to one call
    over all four records with the micro-batches' groups kept apart: BCE is a mean over the step,
    the pairwise term a mean over the step's pairs. Gradients agree too."""
    logits = torch.tensor([2.0, 0.0, -1.0, 0.5], requires_grad=True)
    labels = torch.tensor([1.0, 0.5, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0, 1])
    first, _ = prm_loss(logits[:2], labels[:2], groups[:2], num_records=4, num_pairs=1)  # pair (0, 1)
    second, _ = prm_loss(logits[2:], labels[2:], groups[2:], num_records=4, num_pairs=1)  # none: other tasks
    whole, metrics = prm_loss(logits, labels, torch.tensor([0, 0, 1, 2]), num_records=4, num_pairs=1)
    assert metrics["train/pairs"] == 1
    assert (first + second).item() == pytest.approx(whole.item(), abs=1e-6)
    expected_bce = (BCE[0] + BCE[1] + BCE[2] + math.log1p(math.exp(-0.5))) / 4
    assert whole.item() == pytest.approx(expected_bce + PAIR_01, abs=1e-6)
    (first + second).backward()
    split = logits.grad.clone()
    logits.grad = None
    whole.backward()
    assert torch.allclose(split, logits.grad, atol=1e-7)
