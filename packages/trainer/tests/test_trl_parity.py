"""Our DPO and GRPO losses equal TRL's on identical inputs (TRL is a dev dependency).

TRL computes its losses inside ``DPOTrainer._compute_loss`` / ``GRPOTrainer._compute_loss`` from a
model forward; we feed both sides the same model, the same token ids and completion masks, and
compare the resulting loss values. This checks our chunked log-probs, packing and loss math
together against an independent implementation.
"""

import copy

import pytest
import torch

from agenttrainer.algorithms.dpo import dpo_loss
from agenttrainer.algorithms.grpo import grpo_loss
from agenttrainer.data import Example
from agenttrainer.models.attention import HiddenStates
from knowlyrcore.testing import require_module

trl = require_module("trl", "the parity reference is TRL (in knowlyr-trainer[dev])")
datasets = require_module("datasets", "TRL needs datasets (in knowlyr-trainer[dev], through trl)")


def _examples(input_ids, attention_mask, completion_mask):
    out = []
    for ids, att, comp in zip(input_ids.tolist(), attention_mask.tolist(), completion_mask.tolist()):
        keep = [i for i, a in enumerate(att) if a]
        toks = [ids[i] for i in keep]
        labels = [ids[i] if comp[i] else -100 for i in keep]
        out.append(Example(toks, labels, [1.0] * len(toks)))
    return out


def _perturbed(model, seed=1):
    policy = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=gen))
    return policy


def _seq_logps(module, examples):
    from agenttrainer.data import pack
    from agenttrainer.losses import chunked_token_logps
    from agenttrainer.packed import sequence_sums

    batch = pack(examples)
    hidden = module(batch["input_ids"], batch["position_ids"], batch["seq_ids"])
    logps, mask = chunked_token_logps(hidden, module.lm_head()[0], batch["labels"], chunk_size=5)
    return sequence_sums(logps, mask, batch["seq_ids"], len(examples)), logps, mask, batch


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo"])
def test_dpo_loss_equals_trl(tmp_path, tiny, loss_type):
    model, tok = tiny
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Task {i}: list files"}],
            "chosen": [{"role": "assistant", "content": f"Thought: look\nAction: ls -la {i}"}],
            "rejected": [{"role": "assistant", "content": f"Action: rm -rf {i * 7} and more"}],
        }
        for i in range(4)
    ]
    policy = _perturbed(model)
    args = trl.DPOConfig(
        output_dir=str(tmp_path / "trl"),
        beta=0.3,
        loss_type=[loss_type],
        report_to=[],
        per_device_train_batch_size=4,
        use_cpu=True,
        bf16=False,
    )
    trainer = trl.DPOTrainer(
        model=policy,
        ref_model=copy.deepcopy(model),
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tok,
    )
    batch = next(iter(trainer.get_train_dataloader()))
    with torch.no_grad():
        trl_loss = trainer._compute_loss(trainer.model, batch, return_outputs=False).item()

    examples = _examples(batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    with torch.no_grad():
        pol = _seq_logps(HiddenStates(policy).eval(), examples)[0]
        ref = _seq_logps(HiddenStates(model).eval(), examples)[0]
    counts = torch.tensor([float(ex.num_trainable) for ex in examples])
    ours, _ = dpo_loss(
        pol[:4],
        pol[4:],
        ref[:4],
        ref[4:],
        beta=0.3,
        loss_type=loss_type,
        chosen_num_tokens=counts[:4],
        rejected_num_tokens=counts[4:],
    )
    assert ours.item() == pytest.approx(trl_loss, abs=1e-5)
    assert abs(trl_loss - (0.6931 if loss_type == "sigmoid" else 0)) > 1e-4  # policy != reference


def test_grpo_loss_equals_trl(tmp_path, tiny, tiny_path):
    model, tok = tiny
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        beta=0.05,
        epsilon=0.2,
        loss_type="grpo",
        num_generations=2,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        bf16=False,
        max_completion_length=16,
        use_bias_correction_kl=False,  # TRL 1.x default multiplies the KL by the ratio; GRPO's k3 term does not
    )
    rows = [{"prompt": "p"}] * 4
    # TRL loads policy and reference from the path; we then move the policy away from the reference.
    trainer = trl.GRPOTrainer(
        model=tiny_path,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tok,
    )

    policy = trainer.model
    with torch.no_grad():
        for p, q in zip(policy.parameters(), _perturbed(model).parameters()):
            p.copy_(q)
    gen = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(10, 1000, (4, 6), generator=gen)
    completion_ids = torch.randint(10, 1000, (4, 9), generator=gen)
    prompt_mask = torch.ones_like(prompt_ids)
    completion_mask = torch.ones_like(completion_ids)
    completion_mask[1, 6:] = 0  # a shorter completion
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    old = None
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
    }
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention = torch.cat([prompt_mask, completion_mask], 1)
    comp = torch.cat([torch.zeros_like(prompt_mask), completion_mask], 1)
    examples = _examples(input_ids, attention, comp)
    with torch.no_grad():
        _, ref_tok, mask, batch = _seq_logps(HiddenStates(model).eval(), examples)
        _, pol_tok, _, _ = _seq_logps(HiddenStates(policy).eval(), examples)
    from agenttrainer.packed import unpack_tokens

    ref = unpack_tokens(ref_tok, mask, batch["seq_ids"], 4)  # (4, 9)
    pol = unpack_tokens(pol_tok, mask, batch["seq_ids"], 4)
    tmask = unpack_tokens(mask.float(), mask, batch["seq_ids"], 4)
    # "old" policy = something between: ratios away from 1 so clipping matters
    old = pol - torch.linspace(-0.4, 0.4, 9)[None] * tmask
    inputs["old_per_token_logps"] = torch.nn.functional.pad(old, (0, 9 - old.shape[1]))
    inputs["ref_per_token_logps"] = torch.nn.functional.pad(ref, (0, 9 - ref.shape[1]))
    trainer.model.eval()
    trainer.current_gradient_accumulation_steps = 1
    with torch.no_grad():
        trl_loss = trainer._compute_loss(trainer.model, inputs).item()
    ours, metrics = grpo_loss(pol, old, ref, advantages, tmask, clip_eps=0.2, kl_coef=0.05)
    assert ours.item() == pytest.approx(trl_loss, abs=1e-5)
    assert metrics["train/clip_ratio"] > 0
