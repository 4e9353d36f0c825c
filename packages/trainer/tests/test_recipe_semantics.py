"""The three recipes (SFT, DPO, GRPO) share save / resume semantics, with gradient accumulation 2
(an optimizer step is two micro-batches):

* ``save_steps`` counts optimizer steps: ``checkpoint-N`` appears exactly at N = save_steps,
  2*save_steps, … and holds the state after N optimizer steps (trainer state, scheduler count);
* resuming from a checkpoint ends with exactly the uninterrupted run's weights;
* training changes every parameter tensor;
* a full fine-tune's checkpoint stores the weights once (in the model files);
* batch 1 x accumulation 2 trains the same weights as batch 2 x accumulation 1;
* the first four losses on the tiny model are pinned.

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
    defaults = {
        "num_epochs": 1,
        "batch_size": 1,
        "gradient_accumulation_steps": 2,
        "save_total_limit": 0,
        "progress_bar": False,
        "bf16": False,
        "learning_rate": 1e-3,
    }
    config = config_cls(train_file=train_file, output_dir=str(out), **{**defaults, **extra, **kw})
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


@pytest.mark.parametrize("recipe", ["sft", "dpo", "grpo"])
def test_a_full_fine_tune_checkpoint_stores_the_weights_once(tmp_path, tiny, train_file, recipe):
    """The model files hold the weights; ``trainable.pt`` does not repeat them (it held a second
    full copy before), and resuming reads them back from the safetensors (bit-exact test above)."""
    model, tok = tiny
    _train(recipe, train_file, tmp_path / "out", model, tok, save_steps=2)
    checkpoint = tmp_path / "out" / "checkpoint-2"
    weights_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert (checkpoint / "model.safetensors").stat().st_size >= weights_bytes
    assert torch.load(checkpoint / "trainable.pt") == {}
    total = sum(f.stat().st_size for f in checkpoint.iterdir() if f.name not in ("optimizer.pt",))
    assert total < 1.5 * weights_bytes + 5_000_000  # one copy + tokenizer files, not two copies


# The training loss of each recipe's first 4 optimizer steps on the tiny model (seed 0) and the
# conftest data, pinned: a change to batching, masking, loss normalisation, the optimizer or the
# schedule moves these numbers. Recorded with torch 2.13 on CPU (fp32); the tolerance covers
# kernel-order differences across CPUs, not a changed computation (those move the 2nd digit).
PINNED_LOSSES = {
    "sft": [10.856949806213379, 10.829533576965332, 10.753068923950195, 10.72436237335205],
    # ln 2 while the policy equals the reference (the first step's learning rate is 0: warmup)
    "dpo": [0.6931471824645996, 0.6931471824645996, 0.6527447700500488, 0.6186268329620361],
    # ~0 while the policy equals the sampling policy, then the clipped objective moves
    "grpo": [3.923196345567703e-08, 3.923196345567703e-08, 2.218782901763916e-05, -0.0013055503368377686],
}


def _loss_curve(out):
    rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    return [r["loss/train"] for r in rows if "loss/train" in r]


@pytest.mark.parametrize("recipe", ["sft", "dpo", "grpo"])
def test_pinned_tiny_model_loss_curve(tmp_path, tiny, train_file, recipe):
    model, tok = tiny
    _train(recipe, train_file, tmp_path / "out", model, tok, max_optimizer_steps=4, logging_steps=1, seed=0)
    curve = _loss_curve(tmp_path / "out")
    assert curve == pytest.approx(PINNED_LOSSES[recipe], rel=2e-4, abs=1e-6)


@pytest.mark.parametrize("recipe", ["sft", "dpo", "grpo"])
def test_accumulation_invariance_end_to_end(tmp_path, train_file, recipe):
    """Batch 1 x accumulation 2 trains the same weights as batch 2 x accumulation 1: the same
    items per optimizer step, the loss normalised over the step, not over each micro-batch."""
    from agenttrainer.models import build_tiny_model

    accumulated, tok = build_tiny_model(seed=0)
    _train(recipe, train_file, tmp_path / "a", accumulated, tok, batch_size=1, gradient_accumulation_steps=2)
    batched, _ = build_tiny_model(seed=0)
    _train(recipe, train_file, tmp_path / "b", batched, tok, batch_size=2, gradient_accumulation_steps=1)
    for (name, a), b in zip(accumulated.named_parameters(), batched.parameters()):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)
