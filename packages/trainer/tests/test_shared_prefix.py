"""Shared-prefix training (agenttrainer.models.shared_prefix): the prefix tree by hand, and loss and
every gradient equal to the unshared computation in each recipe (GRPO, DPO, SFT, online RL).

Parity is measured as relative errors: ``|loss_shared - loss| / |loss|`` and, over every trainable
parameter, ``max ||g_shared - g|| / ||g||``; both must stay under 1e-5 in fp32. Each case also
checks that a prefix was in fact shared (and, with gradient checkpointing, that the tree
attention ran again in backward), so a path that silently fell back to the unshared row fails.
The tiny-model tests cover SDPA and eager attention, full weights and LoRA, with and without
gradient checkpointing; the ``integration`` ones repeat GRPO, DPO and SFT on SmolLM2-135M.
"""

from __future__ import annotations

import json

import pytest
import torch
from small_online import small_online_config

from agenttrainer.config import DPOConfig, GRPOConfig, SFTConfig
from agenttrainer.config.run import LoRA
from agenttrainer.data import Example
from agenttrainer.models import shared_prefix
from agenttrainer.models.shared_prefix import plan_spans, share_prefixes
from agenttrainer.trainers.dpo import DPOTrainer
from agenttrainer.trainers.grpo import GRPOTrainer
from agenttrainer.trainers.sft import SFTTrainer

TOL = 1e-5
BASE = dict(num_epochs=1, progress_bar=False, bf16=False)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ')} of a customer's order, given its id",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    }
    for name in ("get_order_details", "cancel_pending_order", "return_delivered_items")
]
#: GRPO and DPO records carry no tools field: the schemas go into the system turn, as a prompt contract renders them
SYSTEM = "You are a retail agent. Tools: " + json.dumps(TOOLS)


def _ex(ids, first_label):
    return Example(input_ids=list(ids), labels=[-100] * first_label + list(ids[first_label:]), weights=[1.0] * len(ids))


# -- the tree by hand -------------------------------------------------------------------------


def test_spans_by_hand():
    """Rows 0-2 share 20 tokens; rows 0 and 1 then share 17 more, row 2 goes its own way; row 3
    shares only 5 tokens with them (< 16), so it is computed whole."""
    common, branch = list(range(100, 120)), list(range(200, 217))
    rows = [common + branch + [1, 2], common + branch + [3, 4, 5], [*common, 7, 8, 9], common[:5] + [9] * 30]
    got = [(s.row, s.begin, s.end, s.parent, s.leaf, s.start) for s in plan_spans(rows)]
    assert got == [
        (0, 0, 20, -1, False, 0),  # shared by rows 0, 1, 2
        (0, 20, 37, 0, False, 20),  # shared by rows 0 and 1 (17 >= 16)
        (0, 37, 39, 1, True, 37),
        (1, 37, 40, 1, True, 39),
        (2, 20, 23, 0, True, 42),
        (3, 0, 35, -1, True, 45),
    ]
    # a row that is a prefix of another keeps its last token: the shared span stops one short of it
    got = [(s.row, s.begin, s.end, s.leaf) for s in plan_spans([common, [*common, 5, 6]])]
    assert got == [(0, 0, 19, False), (0, 19, 20, True), (1, 19, 22, True)]


def test_label_table_points_at_each_labels_predicting_state():
    """Two rows share 30 prompt tokens and their first answer token (trained in both); the label of
    token 30 is predicted by state 29 in the shared span, once for both rows; the label of each
    row's token 31 by the shared span's last state (30), with the rows' own targets."""
    prompt = list(range(100, 130))
    rows = [_ex([*prompt, 7, 1, 2, 3], 30), _ex([*prompt, 7, 4, 5], 30)]
    rows[1].weights = [0.5] * len(rows[1])
    batch, tree = share_prefixes(rows)
    assert tree is not None and tree.saved_tokens == 31
    assert batch["input_ids"][0].tolist() == [*prompt, 7, 1, 2, 3, 4, 5]
    assert batch["position_ids"][0].tolist() == [*range(31), 31, 32, 33, 31, 32]
    assert batch["seq_ids"][0].tolist() == [-1] * 31 + [0] * 3 + [1] * 2
    assert batch["label_rows"].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert batch["label_targets"].tolist() == [7, 1, 2, 3, 7, 4, 5]
    assert batch["label_positions"].tolist() == [29, 30, 31, 32, 29, 30, 34]
    assert batch["label_weights"].tolist() == [1.0] * 4 + [0.5] * 3
    where, targets, inverse = shared_prefix.distinct_labels(batch)
    assert list(zip(where.tolist(), targets.tolist())) == [(29, 7), (30, 1), (30, 4), (31, 2), (32, 3), (34, 5)]
    assert inverse.tolist() == [0, 1, 3, 4, 0, 2, 5]  # the shared label (29, 7) is computed once
    short = [_ex([*prompt[:15], 1], 15), _ex([*prompt[:15], 2], 15)]
    assert share_prefixes(short)[1] is None  # 15 common tokens: below the threshold, a plain packed row


# -- parity with the unshared computation ------------------------------------------------------


def relative_errors(shared, unshared):
    """``(loss relative error, max over parameters of ||g_s - g|| / ||g||)``; a parameter whose
    unshared gradient is zero must have a zero shared one."""
    (loss_s, grads_s), (loss, grads) = shared, unshared
    assert grads.keys() == grads_s.keys() and grads
    worst = 0.0
    for name, g in grads.items():
        diff = (grads_s[name] - g).norm().item()
        norm = g.norm().item()
        worst = max(worst, diff / norm if norm else (0.0 if diff == 0 else float("inf")))
    return abs(loss_s - loss) / abs(loss), worst


class TreeCalls:
    """Counts tree rows and tree attention calls (a shared prefix was used, and how often)."""

    def __init__(self, monkeypatch):
        self.rows, self.attention, self.saved = 0, 0, 0
        real_share, real_attention = shared_prefix.share_prefixes, shared_prefix.PrefixTree.attention

        def share(*args, **kwargs):
            batch, tree = real_share(*args, **kwargs)
            if tree is not None:
                self.rows += 1
                self.saved += tree.saved_tokens
            return batch, tree

        def attention(tree, *args, **kwargs):
            self.attention += 1
            return real_attention(tree, *args, **kwargs)

        monkeypatch.setattr(shared_prefix, "share_prefixes", share)
        monkeypatch.setattr(shared_prefix.PrefixTree, "attention", attention)


def _grads(params):
    return {n: p.grad.detach().clone() for n, p in params if p.requires_grad}


def compare(trainer, run, monkeypatch, *, checkpointing, layers):
    """``run()`` (forward + backward, returns the loss) with ``share_prefix`` off and on; the relative errors."""
    module = trainer.wrapped if hasattr(trainer, "wrapped") else trainer
    module.train()
    results = {}
    for share in (False, True):
        calls = TreeCalls(monkeypatch)
        trainer.config.share_prefix = share
        module.zero_grad(set_to_none=True)
        loss = float(run().detach())
        results[share] = (loss, _grads(module.named_parameters()))
        monkeypatch.undo()
        if share:
            assert calls.rows and calls.saved > 0, "no prefix was shared"
            sdpa = shared_prefix.base_model(module.lm).config._attn_implementation != "eager"
            # a tree's attention runs once per layer, and again in backward under checkpointing
            assert calls.attention == (calls.rows * layers * (2 if checkpointing else 1) if sdpa else 0)
        else:
            assert calls.rows == 0
    return relative_errors(results[True], results[False])


def perturb_lora(model, seed=0):
    """LoRA's B starts at zero (A's gradient too): random adapters make every gradient non-trivial."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)


def prepare(model, attn, use_lora):
    model.config._attn_implementation = attn
    return {"lora": LoRA(use_lora=use_lora, lora_preset="full", lora_dropout=0.0)}


def grpo_records(n_tasks=2, group=3, seed=0, system=SYSTEM):
    """Groups whose prompts are long (by default tools in the system turn, a task of ~20 tokens) and
    whose answers differ."""
    import random

    rng = random.Random(seed)
    records = []
    for t in range(n_tasks):
        trajectories = [
            {
                "messages": [
                    {"role": "assistant", "content": f"Action: get_order_details #{rng.randint(1000, 9999)}"},
                    {"role": "user", "content": f"Observation: status {rng.choice(['pending', 'delivered'])}"},
                    {"role": "assistant", "content": "Done." * rng.randint(1, 3)},
                ],
                "reward": rng.random(),
                "step_rewards": [rng.uniform(0.1, 1.0), rng.uniform(0.1, 1.0)],
            }
            for _ in range(group)
        ]
        prompt = f"Customer {t}: my order #W{7000 + t} arrived damaged, please help me return the lamp and the desk."
        records.append(
            {
                "task_id": f"t{t}",
                "prompt": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
                "trajectories": trajectories,
            }
        )
    return records


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


CASES = [
    pytest.param(attn, lora, ckpt, id=f"{attn}-{'lora' if lora else 'full'}-{'ckpt' if ckpt else 'nockpt'}")
    for attn in ("sdpa", "eager")
    for lora in (False, True)
    for ckpt in (False, True)
]


def grpo_parity(
    model, tok, tmp_path, monkeypatch, attn, use_lora, checkpointing, records, *, kl_coef=0.1, ref_gap=0.05, **options
):
    """GRPO's loss on the groups of ``records`` (policy != old != reference) shared vs unshared;
    row ``i``'s reference log-probs are ``ref_gap * (i + 1)`` below the policy's."""
    config = GRPOConfig(
        train_file=_write(tmp_path / "grpo.jsonl", records),
        output_dir=str(tmp_path / "out"),
        gradient_checkpointing=checkpointing,
        kl_coef=kl_coef,
        **prepare(model, attn, use_lora),
        **BASE,
        **options,
    )
    trainer = GRPOTrainer(config, model=model, tokenizer=tok)
    if use_lora:
        perturb_lora(trainer.model)
    groups = trainer.load_groups(config.train_file)
    flat = [ex for g in groups for ex in g]
    with torch.no_grad():
        logps, mask, _ = trainer.token_logps(trainer.wrapped, flat)
    n = [int(m.sum()) for m in mask]
    ref = [logps[i, : n[i]] - ref_gap * (i + 1) for i in range(len(flat))]
    old = logps + 0.02 * torch.sin(torch.arange(logps.numel()).view(logps.shape).float())  # ratios != 1: clipping

    def run():
        loss, _, _ = trainer._loss(trainer.wrapped, flat, ref, old, num_items=len(flat))
        loss.backward()
        return loss

    return compare(trainer, run, monkeypatch, checkpointing=checkpointing, layers=model.config.num_hidden_layers)


@pytest.mark.parametrize("attn,use_lora,checkpointing", CASES)
def test_grpo_loss_and_gradients_equal_unshared(tiny, tmp_path, monkeypatch, attn, use_lora, checkpointing):
    model, tok = tiny
    errors = grpo_parity(model, tok, tmp_path, monkeypatch, attn, use_lora, checkpointing, grpo_records())
    assert max(errors) < TOL, errors


@pytest.mark.parametrize("algorithm", ["rloo", "dr_grpo"])
def test_other_group_algorithms_equal_unshared(tiny, tmp_path, monkeypatch, algorithm):
    model, tok = tiny
    errors = grpo_parity(model, tok, tmp_path, monkeypatch, "sdpa", False, False, grpo_records(), algorithm=algorithm)
    assert max(errors) < TOL, errors


def dpo_records(n=3, system=SYSTEM):
    return [
        {
            "prompt": [
                {"role": "system", "content": system},
                {"role": "user", "content": f"Customer {i}: cancel my pending order #W{3000 + i}, I ordered twice."},
            ],
            "chosen": f'Action: cancel_pending_order {{"order_id": "#W{3000 + i}"}}',
            "rejected": "I cannot help with that." * (1 + i % 2),
        }
        for i in range(n)
    ]


def dpo_parity(model, tok, tmp_path, monkeypatch, attn, use_lora, checkpointing, records):
    config = DPOConfig(
        train_file=_write(tmp_path / "dpo.jsonl", records),
        output_dir=str(tmp_path / "out"),
        gradient_checkpointing=checkpointing,
        **prepare(model, attn, use_lora),
        **BASE,
    )
    trainer = DPOTrainer(config, model=model, tokenizer=tok)
    if use_lora:
        perturb_lora(trainer.model)
    pairs = trainer.load_pairs(config.train_file)
    with torch.no_grad():
        chosen, rejected = trainer.sequence_logps(trainer.wrapped, pairs)
    ref = torch.stack([chosen - 0.3, rejected + 0.2], dim=1)

    def run():
        loss, _ = trainer._loss(trainer.wrapped, pairs, ref, num_items=len(pairs))
        loss.backward()
        return loss

    return compare(trainer, run, monkeypatch, checkpointing=checkpointing, layers=model.config.num_hidden_layers)


@pytest.mark.parametrize("attn,use_lora,checkpointing", CASES)
def test_dpo_loss_and_gradients_equal_unshared(tiny, tmp_path, monkeypatch, attn, use_lora, checkpointing):
    model, tok = tiny
    errors = dpo_parity(model, tok, tmp_path, monkeypatch, attn, use_lora, checkpointing, dpo_records())
    assert max(errors) < TOL, errors


def sft_records(n=4, tools=TOOLS):
    return [
        {
            "messages": [
                {"role": "system", "content": "You are a retail agent."},
                {"role": "user", "content": f"Customer {i}: where is order #W{5000 + i}?"},
                {"role": "assistant", "content": f'Action: get_order_details {{"order_id": "#W{5000 + i}"}}'},
                {"role": "user", "content": "Observation: shipped"},
                {"role": "assistant", "content": "It has shipped." * (1 + i % 3)},
            ],
            "tools": tools,
        }
        for i in range(n)
    ]


def sft_parity(model, tok, tmp_path, monkeypatch, attn, use_lora, checkpointing, records, packing=True):
    config = SFTConfig(
        train_file=_write(tmp_path / "sft.jsonl", records),
        output_dir=str(tmp_path / "out"),
        gradient_checkpointing=checkpointing,
        packing=packing,
        step_weighted_loss=True,
        **prepare(model, attn, use_lora),
        **BASE,
    )
    trainer = SFTTrainer(config, model=model, tokenizer=tok)
    if use_lora:
        perturb_lora(trainer.model)
    examples, _ = trainer.load_examples(config.train_file)
    for i, ex in enumerate(examples):  # distinct token weights, so a weight at a wrong token shows
        ex.weights = [1.0 + 0.1 * ((i + t) % 5) for t in range(len(ex))]

    def run():
        return trainer.backward_window(trainer.wrapped, [list(range(len(examples)))], examples)[0]

    return compare(trainer, run, monkeypatch, checkpointing=checkpointing, layers=model.config.num_hidden_layers)


@pytest.mark.parametrize("attn,use_lora,checkpointing", CASES)
def test_sft_loss_and_gradients_equal_unshared(tiny, tmp_path, monkeypatch, attn, use_lora, checkpointing):
    model, tok = tiny
    errors = sft_parity(model, tok, tmp_path, monkeypatch, attn, use_lora, checkpointing, sft_records())
    assert max(errors) < TOL, errors


def test_sft_padded_batches_equal_their_tree_row(tiny, tmp_path, monkeypatch):
    """``packing: false`` pads rows on the right; sharing their system turn gives the padded result."""
    model, tok = tiny
    errors = sft_parity(model, tok, tmp_path, monkeypatch, "sdpa", False, False, sft_records(), packing=False)
    assert max(errors) < TOL, errors


def online_trainer(model, tok, tmp_path, **overrides):
    from agenttrainer.online import OnlineRLTrainer

    (tmp_path / "tasks.jsonl").write_text('{"id": "a"}\n')
    values = {"group_size": 3, "batch_size": 3, "max_steps": 2, "max_new_tokens": 8, "kl_coef": 0.1, **overrides}
    config = small_online_config(tmp_path, tmp_path / "tasks.jsonl", **values)
    return OnlineRLTrainer(config, model=model, tokenizer=tok)


def rollouts(tok, n_groups=2, group=3, seed=0):
    """Episodes as the acting loop records them: a shared prompt, sampled answers, an observation."""
    import random

    from agenttrainer.online.rollout import Rollout
    from knowlyrcore import TaskInfo

    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        chat = [
            {"role": "system", "content": "You are a retail agent."},
            {"role": "user", "content": f"Task {g}: return"},
        ]
        text = tok.apply_chat_template(chat, tools=TOOLS, add_generation_prompt=True, tokenize=False)
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        for _ in range(group):
            r = Rollout(task=TaskInfo(id=f"t{g}"), group=g, env_reward=rng.random())
            r.extend(prompt, sampled=False)
            for _step in range(2):
                answer = [rng.randrange(100, 5000) for _ in range(rng.randint(3, 8))]
                start = len(r.token_ids)
                r.extend(answer, sampled=True, logprobs=[-1.0] * len(answer))
                r.step_spans.append((start, len(r.token_ids)))
                r.format_errors.append(False)
                r.extend([rng.randrange(100, 5000) for _ in range(4)], sampled=False)
            r.reward, r.step_rewards = r.env_reward, [rng.random(), rng.random()]
            out.append(r)
    return out


class RecordingOptimizer:
    """Stands in for the optimizer: each ``step`` keeps the gradients instead of applying them."""

    def __init__(self, params):
        self.params, self.grads = list(params), []

    def step(self):
        self.grads.append({n: p.grad.detach().clone() for n, p in self.params if p.grad is not None})

    def zero_grad(self, set_to_none=True):
        for _, p in self.params:
            p.grad = None


class ConstantSchedule:
    def step(self):
        pass

    def get_last_lr(self):
        return [0.0]


@pytest.mark.parametrize(
    "algorithm,use_lora,checkpointing",
    [("grpo", False, False), ("grpo", True, True), ("ppo", False, False), ("rloo", False, True)],
)
def test_online_update_equals_unshared(tiny, tmp_path, monkeypatch, algorithm, use_lora, checkpointing):
    """The whole online update (reference, old log-probs and values, the loss, two iterations) on
    episodes sharing their prompt: the same gradients at each optimizer step with and without sharing."""
    model, tok = tiny
    trainer = online_trainer(
        model,
        tok,
        tmp_path,
        algorithm=algorithm,
        use_lora=use_lora,
        lora_preset="full",
        lora_dropout=0.0,
        gradient_checkpointing=checkpointing,
        grpo_iterations=2,
    )
    if use_lora:
        perturb_lora(trainer.model)
    episodes = rollouts(tok)
    results = {}
    for share in (False, True):
        calls = TreeCalls(monkeypatch)
        trainer.config.share_prefix = share
        optimizer = RecordingOptimizer(trainer.trainable.named_parameters())
        metrics = trainer.update(episodes, optimizer, ConstantSchedule(), {"optimizer_steps": 0})
        monkeypatch.undo()
        assert (calls.rows > 0) == share
        results[share] = (metrics["loss/train"], optimizer.grads)
    (loss_s, grads_s), (loss, grads) = results[True], results[False]
    assert len(grads) == len(grads_s) == 2
    for step in range(2):
        errors = relative_errors((loss_s, grads_s[step]), (loss, grads[step]))
        assert max(errors) < TOL, (step, errors)


# -- SmolLM2-135M ------------------------------------------------------------------------------
#
# A few short rows (a system turn, a ~25-token request, answers of ~15 tokens), so each case is
# seconds. In fp32, 30 layers leave each gradient ~1e-6 relative rounding, which a loss whose
# row gradients nearly cancel magnifies: GRPO's advantages sum to zero in a group. The SmolLM2
# GRPO cases give the KL term the weight (1.0, references 0.5 apart) that keeps the comparison
# about the sharing and not about that cancellation, which moves even the unshared computation
# by more than 1e-5 when its rows are merely packed in another order (eager attention: 2e-5 with
# these rows at a KL weight of 1, 5e-5 at 0.1).

SHORT_SYSTEM = "You are a retail agent. Be brief."


@pytest.fixture
def smollm2():
    """A fresh SmolLM2-135M-Instruct in fp32 (LoRA and checkpointing change the model in place)."""
    from agenttrainer.models import load_model_and_tokenizer

    return load_model_and_tokenizer("smollm2-135m", torch_dtype=torch.float32)


@pytest.mark.integration
@pytest.mark.parametrize("attn,use_lora,checkpointing", CASES)
def test_smollm2_grpo_equals_unshared(smollm2, tmp_path, monkeypatch, attn, use_lora, checkpointing):
    model, tok = smollm2
    records = grpo_records(n_tasks=1, group=3, system=SHORT_SYSTEM)
    errors = grpo_parity(
        model, tok, tmp_path, monkeypatch, attn, use_lora, checkpointing, records, kl_coef=1.0, ref_gap=0.5
    )
    assert max(errors) < TOL, errors


@pytest.mark.integration
def test_smollm2_dpo_equals_unshared(smollm2, tmp_path, monkeypatch):
    """SDPA only: with eager attention a pair's chosen-minus-rejected gradient sits at 5e-6 to
    1.3e-5 from the unshared one depending on the text, as close as the unshared eager batch is to
    itself with its pairs in another order (4e-6); the tiny-model test covers DPO with eager."""
    model, tok = smollm2
    errors = dpo_parity(model, tok, tmp_path, monkeypatch, "sdpa", False, False, dpo_records(2, system=SHORT_SYSTEM))
    assert max(errors) < TOL, errors


@pytest.mark.integration
@pytest.mark.parametrize("attn,use_lora,checkpointing", [("sdpa", False, True), ("eager", True, False)])
def test_smollm2_sft_equals_unshared(smollm2, tmp_path, monkeypatch, attn, use_lora, checkpointing):
    model, tok = smollm2
    errors = sft_parity(model, tok, tmp_path, monkeypatch, attn, use_lora, checkpointing, sft_records(2, tools=None))
    assert max(errors) < TOL, errors


@pytest.mark.parametrize("command", ["sft", "dpo", "grpo"])
def test_no_share_prefix_flag_turns_sharing_off(command):
    from agenttrainer import cli

    ctx = cli.cli.commands[command].make_context(command, ["--train-file", "x.jsonl", "--no-share-prefix"])
    assert ctx.params["share_prefix"] is False
    ctx = cli.cli.commands[command].make_context(command, ["--train-file", "x.jsonl"])
    assert ctx.params["share_prefix"] is None  # not given: the config's default (True) stands
    assert SFTConfig().share_prefix and DPOConfig().share_prefix and GRPOConfig().share_prefix
