"""The three recipes (SFT, DPO, GRPO) share save / resume semantics, with gradient accumulation 2
(an optimizer step is two micro-batches):

* ``save_steps`` counts optimizer steps: ``checkpoint-N`` appears exactly at N = save_steps,
  2*save_steps, … and holds the state after N optimizer steps (trainer state, scheduler count);
* resuming from a checkpoint ends with exactly the uninterrupted run's weights;
* training changes every parameter tensor.

Step counts: SFT 8 conversations and DPO 8 pairs, batch 1 x accumulation 2 -> 4 steps; GRPO 6
groups, batch 1 x accumulation 2 -> 3 batches of groups, x ``grpo_iterations`` = 2 -> 6 steps.
"""

import json
from pathlib import Path

import pytest
import torch

from agenttrainer.config import DPOConfig, GRPOConfig, SFTConfig
from agenttrainer.trainers.dpo import DPOTrainer
from agenttrainer.trainers.grpo import GRPOTrainer
from agenttrainer.trainers.sft import SFTTrainer

RECIPES = {
    "sft": (SFTConfig, SFTTrainer, {}),
    "dpo": (DPOConfig, DPOTrainer, {}),
    "grpo": (GRPOConfig, GRPOTrainer, {"grpo_iterations": 2}),
}


@pytest.fixture
def train_file(request, sft_file, dpo_file, grpo_file):
    return {"sft": sft_file, "dpo": dpo_file, "grpo": grpo_file}[request.node.callspec.params["recipe"]]


def _train(recipe, train_file, out, model, tok, **kw):
    config_cls, trainer_cls, extra = RECIPES[recipe]
    config = config_cls(
        train_file=train_file,
        output_dir=str(out),
        num_epochs=1,
        batch_size=1,
        gradient_accumulation_steps=2,
        save_total_limit=0,
        progress_bar=False,
        bf16=False,
        learning_rate=1e-3,
        **{**extra, **kw},
    )
    return trainer_cls(config, model=model, tokenizer=tok).train()


def _checkpoint_steps(out):
    found = {}
    for path in Path(out).glob("checkpoint-*"):
        state = json.loads((path / "trainer_state.json").read_text())
        scheduler = torch.load(path / "scheduler.pt", weights_only=False)
        assert state["global_step"] == scheduler["last_epoch"], path  # named after the steps taken
        found[int(path.name.split("-")[1])] = state["global_step"]
    return found


@pytest.mark.parametrize(("recipe", "total"), [("sft", 4), ("dpo", 4), ("grpo", 6)])
def test_checkpoints_at_every_save_steps_optimizer_steps(tmp_path, tiny, train_file, recipe, total):
    model, tok = tiny
    result = _train(recipe, train_file, tmp_path / "out", model, tok, save_steps=2)
    assert result["global_step"] == total
    assert _checkpoint_steps(tmp_path / "out") == {n: n for n in range(2, total + 1, 2)}


def test_grpo_checkpoints_after_the_batch_that_reaches_a_multiple(tmp_path, tiny, grpo_file):
    """Resuming replays whole batches of groups, so with 2 updates per batch (steps 2, 4, 6) and
    ``save_steps=3`` the checkpoints follow the batches that reach steps 3 and 6: at 4 and 6."""
    model, tok = tiny
    _train("grpo", grpo_file, tmp_path / "out", model, tok, save_steps=3)
    assert _checkpoint_steps(tmp_path / "out") == {4: 4, 6: 6}


@pytest.mark.parametrize("recipe", ["sft", "dpo", "grpo"])
def test_resume_from_a_checkpoint_is_bit_exact(tmp_path, tiny, train_file, recipe):
    from agenttrainer.models import build_tiny_model

    model, tok = tiny
    _train(recipe, train_file, tmp_path / "full", model, tok, save_steps=2)
    resumed_model, _ = build_tiny_model(seed=0)
    checkpoint = str(tmp_path / "full" / "checkpoint-2")
    _train(recipe, train_file, tmp_path / "resumed", resumed_model, tok, resume_from_checkpoint=checkpoint)
    for (name, a), b in zip(model.named_parameters(), resumed_model.parameters()):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)


@pytest.mark.parametrize("recipe", ["sft", "dpo", "grpo"])
def test_training_changes_every_parameter(tmp_path, tiny, train_file, recipe):
    model, tok = tiny
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _train(recipe, train_file, tmp_path / "out", model, tok)
    unchanged = [n for n, p in model.named_parameters() if torch.equal(before[n], p)]
    assert not unchanged
