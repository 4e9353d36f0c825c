"""GSPO, added as one module of ``agenttrainer.algorithms``: its loss against numbers derived by
hand, and every driver running it by name (online RL: ``test_online_rl``'s run of each algorithm)."""

import math

import pytest
import torch

from agenttrainer import algorithms
from agenttrainer.algorithms.grpo import grpo_loss
from agenttrainer.algorithms.gspo import gspo_loss


def two_sequences():
    """Two sequences of two completion tokens; log-ratios logp - old: (ln 1.21, 0) and (ln 0.25, 0)."""
    logps = torch.tensor([[-1.0, -2.0], [-1.5, -0.5]], requires_grad=True)
    old = logps.detach() - torch.tensor([[math.log(1.21), 0.0], [math.log(0.25), 0.0]])
    return logps, old


def test_gspo_loss_two_sequences_by_hand():
    """Rewards (1, 0) -> GRPO's advantages: mean 0.5, unbiased std sqrt(0.5^2 + 0.5^2) = 0.707107,
    A = +-0.5 / (0.707107 + 1e-4) = +-0.707007 =: +-a.

    Sequence ratios: s_1 = exp((ln 1.21 + 0) / 2) = sqrt(1.21) = 1.1; s_2 = exp((ln 0.25 + 0) / 2) = 0.5.
    clip_eps 0.2, so the clip range is [0.8, 1.2]:
      l_1 = -min(1.1 * a, clip(1.1) * a) = -1.1a                 (inside the range: not clipped)
      l_2 = -min(0.5 * (-a), 0.8 * (-a)) = -min(-0.5a, -0.8a) = 0.8a   (clipped: no gradient)
    loss = (l_1 + l_2) / 2 sequences = -0.15a = -0.106051.
    Gradient: d l_1 / d logp_t = -a * s_1 * (1/2) (s_1's derivative is s_1 times the mean of the token
    log-prob derivatives), and the loss is the mean of 2 sequences: -1.1a / 4 = -0.275a = -0.194427 for
    both tokens of sequence 1; 0 for sequence 2. Two of the four tokens are in a clipped sequence.

    Token-level GRPO on the same numbers differs: sequence 1's tokens have ratios (1.21, 1): the
    first clips at 1.2, -(1.2 + 1)a / 2 = -1.1a; sequence 2's (0.25, 1): -(-0.8a - a) / 2 = 0.9a;
    loss (-1.1a + 0.9a) / 2 = -0.1a.
    With kl_coef 0.1 and ref = logp - ln 2 on every token, each token adds 0.1 * k3 =
    0.1 * (e^{-ln 2} + ln 2 - 1) = 0.1 * 0.193147, so the loss is -0.106051 + 0.0193147.
    """
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    advantages = algorithms.get_algorithm("gspo").advantages([1.0, 0.0], [None, None], [True, True])
    assert advantages == pytest.approx([a, -a]) and a == pytest.approx(0.707007, abs=1e-6)
    logps, old = two_sequences()
    mask = torch.ones(2, 2)
    loss, metrics = gspo_loss(logps, old, None, torch.tensor(advantages), mask, clip_eps=0.2, kl_coef=0.0)
    assert loss.item() == pytest.approx(-0.15 * a, abs=1e-6) and loss.item() == pytest.approx(-0.106051, abs=1e-6)
    assert metrics["train/clip_ratio"] == pytest.approx(0.5)
    loss.backward()
    assert logps.grad.tolist() == [pytest.approx([-0.275 * a] * 2, abs=1e-6), pytest.approx([0.0, 0.0])]
    assert logps.grad[0, 0].item() == pytest.approx(-0.194427, abs=1e-6)

    token_level, _ = grpo_loss(logps.detach(), old, None, torch.tensor(advantages), mask, clip_eps=0.2, kl_coef=0.0)
    assert token_level.item() == pytest.approx(-0.1 * a, abs=1e-6)

    ref = logps.detach() - math.log(2)
    with_kl, metrics = gspo_loss(logps.detach(), old, ref, torch.tensor(advantages), mask, clip_eps=0.2, kl_coef=0.1)
    assert with_kl.item() == pytest.approx(-0.15 * a + 0.1 * (0.5 + math.log(2) - 1), abs=1e-6)
    assert metrics["train/kl"] == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)


def test_gspo_is_grpo_on_one_token_sequences_and_takes_token_advantages():
    """A sequence of one token has its token's ratio: GSPO and GRPO agree, gradients included. A
    per-token advantage that is the same on every token (GSPO-token) gives the per-sequence loss."""
    logps = torch.tensor([[-1.0], [-2.0], [-0.5]], requires_grad=True)
    old = logps.detach() - torch.tensor([[0.3], [-0.4], [0.05]])
    adv = torch.tensor([1.0, -1.0, 0.5])
    ours, _ = gspo_loss(logps, old, None, adv, torch.ones(3, 1), kl_coef=0.0)
    (ours_grad,) = torch.autograd.grad(ours, logps)
    theirs, _ = grpo_loss(logps, old, None, adv, torch.ones(3, 1), kl_coef=0.0)
    (theirs_grad,) = torch.autograd.grad(theirs, logps)
    assert ours.item() == pytest.approx(theirs.item()) and torch.allclose(ours_grad, theirs_grad)

    logps, old = two_sequences()
    per_sequence, _ = gspo_loss(logps, old, None, torch.tensor([0.7, -0.7]), torch.ones(2, 2), kl_coef=0.0)
    per_token, _ = gspo_loss(logps, old, None, torch.tensor([[0.7, 0.7], [-0.7, -0.7]]), torch.ones(2, 2), kl_coef=0.0)
    assert per_token.item() == pytest.approx(per_sequence.item())


def test_gspo_is_a_choice_of_every_driver(tmp_path, tiny, grpo_file):
    from click.testing import CliRunner

    from agenttrainer.cli import cli
    from agenttrainer.config import GRPOConfig
    from agenttrainer.trainers.grpo import GRPOTrainer

    assert "gspo" in algorithms.algorithm_names(offline=True)
    assert "gspo" in CliRunner().invoke(cli, ["grpo", "--help"]).output.split("--algorithm [")[1].split("]")[0]
    model, tok = tiny
    before = [p.detach().clone() for p in model.parameters()]
    config = GRPOConfig(
        train_file=grpo_file,
        output_dir=str(tmp_path / "offline"),
        algorithm="gspo",
        clip_eps=3e-4,
        clip_eps_high=4e-4,
        grpo_iterations=2,
        max_optimizer_steps=2,
        bf16=False,
        progress_bar=False,
    )
    assert GRPOTrainer(config, model=model, tokenizer=tok).train()["global_step"] == 2
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
