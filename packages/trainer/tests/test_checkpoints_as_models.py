"""Every ``checkpoint-N`` is also a model directory: it loads as a model (full fine-tune or LoRA
adapter on its base), its logits equal the trained in-memory model's at step N, and ``eval`` and
``AgentInference`` accept it."""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from agenttrainer.acting.inference import AgentInference
from agenttrainer.cli import cli
from agenttrainer.config import SFTConfig
from agenttrainer.models import load_model_and_tokenizer
from agenttrainer.trainers.sft import SFTTrainer
from knowlyrcore.testing import require_module


def _train(tmp_path, sft_file, model, tok, **kw):
    """Two optimizer steps with a checkpoint at step 2, so the in-memory model is the step-2 model."""
    config = SFTConfig.from_dict(
        {
            "train_file": sft_file,
            "output_dir": str(tmp_path / "out"),
            "batch_size": 2,
            "max_optimizer_steps": 2,
            "save_steps": 2,
            "progress_bar": False,
            "bf16": False,
            "learning_rate": 1e-2,
            **kw,
        }
    )
    trainer = SFTTrainer(config, model=model, tokenizer=tok)
    trainer.train()
    return trainer, Path(config.output_dir) / "checkpoint-2"


def _logits(model, tok):
    ids = tok("Thought: list files\nAction: ls -la", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return model.eval()(ids).logits.float()  # (1, T, V)


def test_full_checkpoint_loads_as_the_step_model(tmp_path, tiny, sft_file):
    model, tok = tiny
    initial = _logits(model, tok)
    trainer, checkpoint = _train(tmp_path, sft_file, model, tok)
    assert (checkpoint / "trainable.pt").is_file() and (checkpoint / "model.safetensors").is_file()
    loaded, loaded_tok = load_model_and_tokenizer(str(checkpoint), torch_dtype=torch.float32)
    trained = _logits(trainer.model, tok)
    assert not torch.allclose(trained, initial)  # the checkpoint is not the untrained model
    torch.testing.assert_close(_logits(loaded, loaded_tok), trained, atol=1e-5, rtol=0)

    engine = AgentInference.from_pretrained(str(checkpoint), device="cpu", max_new_tokens=2)
    assert engine.complete([{"role": "user", "content": "hi"}]).completion_tokens > 0


def test_lora_checkpoint_holds_the_adapter_and_loads_onto_its_base(tmp_path, tiny_path, sft_file):
    require_module("peft", "LoRA needs peft (knowlyr-trainer[peft], in [dev])")
    model, tok = load_model_and_tokenizer(tiny_path, torch_dtype=torch.float32)
    trainer, checkpoint = _train(tmp_path, sft_file, model, tok, use_lora=True, lora_preset="minimal", lora_r=4)
    assert (checkpoint / "adapter_config.json").is_file() and not (checkpoint / "model.safetensors").exists()
    loaded, loaded_tok = load_model_and_tokenizer(str(checkpoint), torch_dtype=torch.float32)  # merged onto base
    torch.testing.assert_close(_logits(loaded, loaded_tok), _logits(trainer.model, tok), atol=1e-5, rtol=0)


def test_eval_command_accepts_a_checkpoint(tmp_path, tiny, sft_file):
    model, tok = tiny
    trainer, checkpoint = _train(tmp_path, sft_file, model, tok)
    result = CliRunner().invoke(
        cli,
        ["eval", "--model", str(checkpoint), "--eval-file", sft_file, "--no-bf16", "--device", "cpu"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout.strip().splitlines()[-1])
    from agenttrainer.eval import evaluate_model

    direct = evaluate_model(trainer.model, tok, sft_file, bf16=False, device="cpu")
    assert metrics["eval/loss"] == pytest.approx(direct["eval/loss"], rel=1e-5)
