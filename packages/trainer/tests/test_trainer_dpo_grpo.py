"""DPO and GRPO recipes on a tiny random model."""

import json
from pathlib import Path

import pytest
import torch

from agenttrainer.config import DPOConfig, GRPOConfig
from agenttrainer.trainers.dpo import DPOTrainer
from agenttrainer.trainers.grpo import GRPOTrainer

BASE = dict(num_epochs=1, batch_size=2, progress_bar=False, bf16=False, learning_rate=1e-3)


def _grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def _assert_same(a, b):
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-4, msg=name)


def test_dpo_accumulation_invariance(tmp_path, tiny, dpo_file):
    model, tok = tiny
    trainer = DPOTrainer(DPOConfig(train_file=dpo_file, output_dir=str(tmp_path), **BASE), model=model, tokenizer=tok)
    pairs = trainer.load_pairs(dpo_file)[:4]
    # a reference that differs from the policy
    ref = torch.stack(
        [trainer.sequence_logps(trainer.wrapped, pairs)[i].detach() - 0.3 * (i + 1) for i in range(2)], dim=1
    )
    total = 0.0
    for i in range(4):
        loss, _ = trainer._loss(trainer.wrapped, pairs[i : i + 1], ref[i : i + 1], num_items=4)
        loss.backward()
        total += loss.item()
    grads_a = _grads(trainer.wrapped)
    trainer.wrapped.zero_grad(set_to_none=True)
    loss, _ = trainer._loss(trainer.wrapped, pairs, ref, num_items=4)
    loss.backward()
    assert total == pytest.approx(loss.item(), abs=1e-5)
    _assert_same(grads_a, _grads(trainer.wrapped))


@pytest.mark.parametrize("options", [{}, {"loss_type": "ipo"}, {"label_smoothing": 0.1}, {"reference_free": True}])
def test_dpo_training_learns_preferences(tmp_path, tiny, dpo_file, options):
    model, tok = tiny
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = DPOConfig(
        train_file=dpo_file,
        eval_file=dpo_file,
        output_dir=str(tmp_path),
        **{**BASE, "num_epochs": 3, "learning_rate": 5e-3},
        **options,
    )
    result = DPOTrainer(config, model=model, tokenizer=tok).train()
    assert result["global_step"] == 12
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/loss"] for r in lines if "eval/loss" in r]
    assert len(evals) == 3 and evals[-1] < evals[0]
    if not options.get("reference_free"):  # reference-free sums favour the shorter (rejected) answer at first
        assert result["eval_rewards_accuracy"] == 1.0
    losses = [r["loss/train"] for r in lines if "loss/train" in r]
    assert losses[-1] < losses[0]
    assert {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"} <= set(lines[0])
    for name, p in model.named_parameters():
        assert not torch.equal(before[name], p.detach()), name
    assert (tmp_path / "ref_logps-train.pt").exists() == (not options.get("reference_free", False))


def test_dpo_reference_cache_is_reused_and_resume_matches(tmp_path, tiny, dpo_file):
    from agenttrainer.models import build_tiny_model

    model, tok = tiny
    full = DPOConfig(
        train_file=dpo_file,
        output_dir=str(tmp_path / "full"),
        save_steps=2,
        save_total_limit=0,
        **{**BASE, "num_epochs": 2},
    )
    DPOTrainer(full, model=model, tokenizer=tok).train()
    resumed_model, _ = build_tiny_model(seed=0)
    out = tmp_path / "resumed"
    out.mkdir()
    # The reference must come from the cache: the trainer's own weights at resume time are not the initial ones.
    (out / "ref_logps-train.pt").write_bytes((tmp_path / "full" / "ref_logps-train.pt").read_bytes())
    resumed = DPOConfig(
        train_file=dpo_file,
        output_dir=str(out),
        resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-4"),
        **{**BASE, "num_epochs": 2},
    )
    assert DPOTrainer(resumed, model=resumed_model, tokenizer=tok).train()["global_step"] == 8
    for (name, a), b in zip(model.named_parameters(), resumed_model.parameters()):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)


def test_grpo_advantages_and_step_level_weights(tmp_path, tiny, grpo_file):
    model, tok = tiny
    trainer = GRPOTrainer(
        GRPOConfig(train_file=grpo_file, output_dir=str(tmp_path), **BASE), model=model, tokenizer=tok
    )
    groups = trainer.load_groups(grpo_file)
    for g in groups:
        adv = [ex.meta["advantage"] for ex in g]
        assert sum(adv) == pytest.approx(0.0, abs=1e-5)
        assert torch.tensor(adv).std().item() == pytest.approx(1.0, abs=1e-3)
    # step-level: trained tokens carry r_step / mean(r_steps), which differ between steps
    assert any(
        len({round(w, 6) for w, lab in zip(ex.weights, ex.labels) if lab != -100}) > 1 for g in groups for ex in g
    )
    flat = GRPOTrainer(
        GRPOConfig(train_file=grpo_file, output_dir=str(tmp_path), step_level_advantage=False, **BASE),
        model=model,
        tokenizer=tok,
    )
    assert all(
        {w for w, lab in zip(ex.weights, ex.labels) if lab != -100} == {1.0}
        for g in flat.load_groups(grpo_file)
        for ex in g
    )


def test_grpo_group_size_is_checked(tmp_path, tiny, grpo_file):
    from agenttrainer.data import DataError

    model, tok = tiny
    config = GRPOConfig(train_file=grpo_file, output_dir=str(tmp_path), group_size=3, **BASE)
    with pytest.raises(DataError, match=r"grpo.jsonl:1: field 'trajectories' has 4 entries, group_size is 3"):
        GRPOTrainer(config, model=model, tokenizer=tok)  # the data is checked before the model is set up


def test_grpo_accumulation_invariance(tmp_path, tiny, grpo_file):
    model, tok = tiny
    trainer = GRPOTrainer(
        GRPOConfig(train_file=grpo_file, output_dir=str(tmp_path), **BASE), model=model, tokenizer=tok
    )
    groups = trainer.load_groups(grpo_file)[:2]
    flat = [ex for g in groups for ex in g]
    refs = [r - 0.1 for r in trainer.reference_logps(groups, "t")]
    total = 0.0
    for k in range(len(flat)):
        loss, _, _ = trainer._loss(trainer.wrapped, flat[k : k + 1], refs[k : k + 1], None, num_items=len(flat))
        loss.backward()
        total += loss.item()
    grads_a = _grads(trainer.wrapped)
    trainer.wrapped.zero_grad(set_to_none=True)
    loss, _, _ = trainer._loss(trainer.wrapped, flat, refs, None, num_items=len(flat))
    loss.backward()
    assert total == pytest.approx(loss.item(), abs=1e-5)
    _assert_same(grads_a, _grads(trainer.wrapped))


def test_grpo_training_raises_likelihood_of_good_trajectories(tmp_path, tiny, grpo_file):
    model, tok = tiny
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = GRPOConfig(
        train_file=grpo_file,
        output_dir=str(tmp_path),
        grpo_iterations=2,
        **{**BASE, "num_epochs": 4, "learning_rate": 5e-3},
    )
    trainer = GRPOTrainer(config, model=model, tokenizer=tok)
    groups = trainer.load_groups(grpo_file)

    def advantage_weighted_logp():
        with torch.no_grad():
            flat = [ex for g in groups for ex in g]
            logps, mask, _ = trainer.token_logps(trainer.wrapped, flat)
            per_seq = (logps * mask).sum(1) / mask.sum(1)
            return sum(a * lp for a, lp in zip([ex.meta["advantage"] for ex in flat], per_seq.tolist()))

    start = advantage_weighted_logp()
    result = trainer.train()
    assert result["global_step"] == 4 * 3 * 2
    assert advantage_weighted_logp() > start + 0.1  # good trajectories became likelier than bad ones
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {"train/kl", "train/clip_ratio", "loss/pg", "rollout/reward_mean"} <= set(lines[0])
    assert any(r["train/clip_ratio"] > 0 for r in lines)  # second iterations see ratios != 1
    for name, p in model.named_parameters():
        assert not torch.equal(before[name], p.detach()), name
    assert (Path(config.output_dir) / "final" / "model.safetensors").is_file()


def test_grpo_resume_matches_uninterrupted(tmp_path, tiny, grpo_file):
    from agenttrainer.models import build_tiny_model

    model, tok = tiny
    common = {**BASE, "num_epochs": 2, "grpo_iterations": 2}
    full = GRPOConfig(
        train_file=grpo_file, output_dir=str(tmp_path / "full"), save_steps=2, save_total_limit=0, **common
    )
    assert GRPOTrainer(full, model=model, tokenizer=tok).train()["global_step"] == 12
    out = tmp_path / "resumed"
    out.mkdir()
    (out / "ref_token_logps-train.pt").write_bytes((tmp_path / "full" / "ref_token_logps-train.pt").read_bytes())
    resumed_model, _ = build_tiny_model(seed=0)
    resumed = GRPOConfig(
        train_file=grpo_file,
        output_dir=str(out),
        resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-4"),
        **common,
    )
    assert GRPOTrainer(resumed, model=resumed_model, tokenizer=tok).train()["global_step"] == 12
    for (name, a), b in zip(model.named_parameters(), resumed_model.parameters()):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)
