"""SFT recipe on a tiny random model: invariants, options, checkpoints, logging."""

import json
from pathlib import Path

import pytest
import torch

from agenttrainer.config import SFTConfig
from agenttrainer.trainers.sft import SFTTrainer
from knowlyrcore.testing import require_module


def _config(tmp_path, train_file, **kw):
    base = dict(
        train_file=train_file,
        output_dir=str(tmp_path / "out"),
        num_epochs=1,
        batch_size=2,
        progress_bar=False,
        bf16=False,
        learning_rate=1e-3,
    )
    return SFTConfig.from_dict({**base, **kw})


def _grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("options", [{}, {"step_weighted_loss": True}, {"packing": False}, {"loss_chunk_size": 7}])
def test_batch1_accum4_equals_batch4_accum1(tmp_path, tiny, sft_file, options):
    """Same loss and gradients whether 4 examples come as 4 micro-batches or one (tol 1e-5)."""
    model, tok = tiny
    trainer = SFTTrainer(_config(tmp_path, sft_file, **options), model=model, tokenizer=tok)
    examples, _ = trainer.load_examples(sft_file)
    loss_a, _ = trainer.backward_window(trainer.wrapped, [[0], [1], [2], [3]], examples)
    grads_a = _grads(trainer.wrapped)
    trainer.wrapped.zero_grad(set_to_none=True)
    loss_b, _ = trainer.backward_window(trainer.wrapped, [[0, 1, 2, 3]], examples)
    grads_b = _grads(trainer.wrapped)
    assert loss_a.item() == pytest.approx(loss_b.item(), abs=1e-5)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-5, rtol=1e-4, msg=name)


def test_step_weighted_loss_changes_the_loss(tmp_path, tiny, sft_file):
    model, tok = tiny
    trainer = SFTTrainer(_config(tmp_path, sft_file), model=model, tokenizer=tok)
    examples, _ = trainer.load_examples(sft_file)
    plain = trainer.backward_window(trainer.wrapped, [[0, 1, 2]], examples)[0].item()
    trainer.config.step_weighted_loss = True
    weighted = trainer.backward_window(trainer.wrapped, [[0, 1, 2]], examples)[0].item()
    assert plain != pytest.approx(weighted, abs=1e-4)


def test_training_reduces_loss_changes_every_parameter_and_logs(tmp_path, tiny, sft_file):
    model, tok = tiny
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = _config(
        tmp_path,
        sft_file,
        eval_file=sft_file,
        num_epochs=4,
        learning_rate=3e-3,
        report_to=["tensorboard", "wandb"],
        warmup_ratio=0.0,
    )
    result = SFTTrainer(config, model=model, tokenizer=tok).train()
    assert result["global_step"] == 16 and result["output_dir"].endswith("final")
    for name, p in model.named_parameters():
        assert not torch.equal(before[name], p.detach()), f"{name} did not change"
    out = Path(config.output_dir)
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r["loss/train"] for r in lines if "loss/train" in r]
    assert train[-1] < train[0]
    assert {"train/learning_rate", "train/grad_norm", "train/epoch", "train/tokens"} <= set(lines[0])
    evals = [r["eval/loss"] for r in lines if "eval/loss" in r]
    assert len(evals) == 4 and evals[-1] < evals[0]
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert list((out / "wandb").glob("offline-run-*"))
    assert (out / "final" / "model.safetensors").is_file() and (out / "best" / "model.safetensors").is_file()


def test_early_stopping_stops_when_eval_does_not_improve(tmp_path, tiny, sft_file):
    model, tok = tiny
    # A learning rate this large makes eval loss blow up after the first epoch.
    config = _config(
        tmp_path,
        sft_file,
        eval_file=sft_file,
        num_epochs=6,
        learning_rate=5.0,
        early_stopping_patience=1,
        max_grad_norm=0,
    )
    result = SFTTrainer(config, model=model, tokenizer=tok).train()
    assert result["early_stopped"] and result["global_step"] < 24
    assert result["best_eval_loss"] <= result["eval_loss"]


def test_curriculum_grows_the_epoch(tmp_path, tiny, sft_file):
    model, tok = tiny
    config = _config(
        tmp_path, sft_file, curriculum=True, curriculum_start_ratio=0.25, curriculum_warmup_epochs=2, num_epochs=3
    )
    trainer = SFTTrainer(config, model=model, tokenizer=tok)
    examples, _ = trainer.load_examples(sft_file)
    sizes = [sum(len(b) for w in epoch for b in w) for epoch in trainer._epoch_plan(examples)]
    assert sizes == [2, 5, 8]  # ceil(8 * 0.25), ceil(8 * 0.625), 8


def test_coreset_and_replay(tmp_path, tiny, rows):
    model, tok = tiny
    first = rows.write(tmp_path / "a.jsonl", rows.sft(8, seed=1))
    config = _config(
        tmp_path,
        str(first),
        use_coreset_selection=True,
        coreset_target_size=4,
        coreset_strategy="loss_topk",
        use_online_continual=True,
        continual_replay_ratio=0.5,
    )
    result = SFTTrainer(config, model=model, tokenizer=tok).train()
    assert result["num_examples"] == 4  # the buffer was empty: 8 new, coreset keeps 4
    buffer = Path(config.output_dir) / "replay_buffer.jsonl"
    assert len(buffer.read_text().splitlines()) == 1 + 8
    second = rows.write(tmp_path / "b.jsonl", rows.sft(6, seed=2))
    config2 = _config(tmp_path, str(second), use_online_continual=True, continual_replay_ratio=0.5)
    result2 = SFTTrainer(config2, model=model, tokenizer=tok).train()
    assert result2["num_examples"] == 6 + 3  # 50% replay from the first run's records


def test_chunking_splits_long_trajectories_and_trains(tmp_path, tiny, rows):
    model, tok = tiny
    data = rows.sft(6)
    for r in data:
        r["steps"] = r["steps"] * 4
    path = rows.write(tmp_path / "long.jsonl", data)
    config = _config(tmp_path, str(path), chunk_long_trajectories=True, max_length=120)
    trainer = SFTTrainer(config, model=model, tokenizer=tok)
    examples, _ = trainer.load_examples(str(path))
    assert len(examples) > 6 and max(len(e) for e in examples) <= 120
    assert trainer.train()["global_step"] == -(-len(examples) // 2)  # ceil(examples / batch_size 2)


def _typed_rows(rows, types):
    data = rows.sft(len(types))
    for r, task_type in zip(data, types):
        r["task_type"] = task_type
    return data


def test_task_weights_set_each_epochs_task_proportions(tmp_path, tiny, rows):
    """8 examples, 2 of type a and 6 of type b; weights a:3, b:1 -> each epoch has
    round(8 * 3/4) = 6 draws of a (with replacement from its 2) and round(8 * 1/4) = 2 of b."""
    model, tok = tiny
    path = rows.write(tmp_path / "typed.jsonl", _typed_rows(rows, "aabbbbbb"))
    config = _config(tmp_path, str(path), num_epochs=2, task_weights={"a": 3.0, "b": 1.0})
    trainer = SFTTrainer(config, model=model, tokenizer=tok)
    examples, _ = trainer.load_examples(str(path))
    for epoch in trainer._epoch_plan(examples):
        drawn = [i for window in epoch for batch in window for i in batch]
        types = [examples[i].meta["task_type"] for i in drawn]
        assert (types.count("a"), types.count("b")) == (6, 2)
        assert set(drawn) >= {0, 1}  # both a examples, each drawn about 3 times


def test_a_task_with_weight_zero_contributes_nothing(tmp_path, rows):
    """Rewriting the type-b examples changes nothing when b's weight is 0, and changes the
    trained weights when it is not: the weights really choose what is trained on."""
    from agenttrainer.models import build_tiny_model

    types = "aabbbb"
    original = _typed_rows(rows, types)
    rewritten = _typed_rows(rows, types)
    for r in rewritten[2:]:
        r["steps"] = [{**s, "action": "rm -rf nothing at all", "thought": "something else"} for s in r["steps"]]

    def trained(data, weights, name):
        path = rows.write(tmp_path / f"{name}.jsonl", data)
        model, tok = build_tiny_model(seed=0)
        config = _config(tmp_path / name, str(path), num_epochs=2, warmup_ratio=0.0, task_weights=weights)
        SFTTrainer(config, model=model, tokenizer=tok).train()
        return [p.detach().clone() for p in model.parameters()]

    only_a = {"a": 1.0, "b": 0.0}
    for a, b in zip(trained(original, only_a, "orig_a"), trained(rewritten, only_a, "new_a")):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    both = {"a": 1.0, "b": 1.0}
    changed = [
        not torch.equal(a, b) for a, b in zip(trained(original, both, "orig_ab"), trained(rewritten, both, "new_ab"))
    ]
    assert any(changed)


def test_lora_trains_only_adapters(tmp_path, tiny, sft_file):
    require_module("peft", "LoRA needs peft (knowlyr-trainer[peft], in [dev])")
    model, tok = tiny
    config = _config(tmp_path, sft_file, use_lora=True, lora_preset="minimal", lora_r=4, learning_rate=1e-2)
    trainer = SFTTrainer(config, model=model, tokenizer=tok)
    trainable = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    trainer.train()
    params = dict(trainer.model.named_parameters())
    assert all(not torch.equal(trainable[n], params[n]) for n in trainable if "lora_B" in n)
    assert all(torch.equal(frozen[n], params[n]) for n in frozen)
    assert (Path(config.output_dir) / "final" / "model.safetensors").is_file()  # merged


def test_resume_from_a_checkpoint_matches_uninterrupted(tmp_path, tiny, sft_file):
    """Resuming from step 3 of an 8-step run ends with exactly the uninterrupted run's weights."""
    from agenttrainer.models import build_tiny_model

    model, tok = tiny
    full = _config(tmp_path / "full", sft_file, num_epochs=2, save_steps=3)
    SFTTrainer(full, model=model, tokenizer=tok).train()
    checkpoint = Path(full.output_dir) / "checkpoint-3"
    assert (checkpoint / "trainer_state.json").is_file() and not list(Path(full.output_dir).glob(".tmp-*"))

    resumed_model, _ = build_tiny_model(seed=0)
    resumed = _config(tmp_path / "resumed", sft_file, num_epochs=2, resume_from_checkpoint=str(checkpoint))
    result = SFTTrainer(resumed, model=resumed_model, tokenizer=tok).train()
    assert result["global_step"] == 8
    for (name, a), b in zip(model.named_parameters(), resumed_model.parameters()):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)


def test_trainers_with_different_precision_in_one_process(tmp_path, tiny, sft_file, native_bf16):
    """accelerate's state is process-wide; trainers run one after another may still differ in bf16."""
    model, tok = tiny
    fp32 = SFTTrainer(_config(tmp_path / "a", sft_file, bf16=False), model=model, tokenizer=tok)
    assert fp32.accelerator.mixed_precision == "no" and fp32.train()["global_step"] == 4
    bf16 = SFTTrainer(_config(tmp_path / "b", sft_file, bf16=True), model=model, tokenizer=tok)
    assert bf16.accelerator.mixed_precision == "bf16" and bf16.train()["global_step"] == 4


def test_gradient_checkpointing_gives_the_same_gradients(tmp_path, sft_file):
    from agenttrainer.models import build_tiny_model

    grads = []
    for checkpointing in (False, True):
        model, tok = build_tiny_model(seed=0)
        trainer = SFTTrainer(
            _config(tmp_path, sft_file, gradient_checkpointing=checkpointing), model=model, tokenizer=tok
        )
        examples, _ = trainer.load_examples(sft_file)
        trainer.wrapped.train()
        trainer.backward_window(trainer.wrapped, [[0, 1, 2]], examples)
        grads.append(_grads(trainer.wrapped))
    assert (
        trainer.model.is_activation_checkpointing
        if hasattr(type(trainer.model), "is_activation_checkpointing")
        else trainer.model.is_gradient_checkpointing
    )
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-5, msg=name)
