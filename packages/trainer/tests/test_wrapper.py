"""Seed 002's wrapper API on a tiny model."""

import json
from pathlib import Path

from agenttrainer import GRPOTrainerWrapper, SFTTrainerWrapper, create_lora_config


def test_sft_wrapper_with_rows_and_lora_config(tmp_path, tiny, rows):
    model, tok = tiny
    trainer = SFTTrainerWrapper(
        model_name="unused-when-model-given",
        dataset=rows.sft(4),
        output_dir=str(tmp_path / "sft"),
        num_epochs=1,
        batch_size=2,
        use_lora=True,
        lora_config=create_lora_config(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        model=model,
        tokenizer=tok,
        bf16=False,
        progress_bar=False,
    )
    assert trainer.config.lora_r == 4 and trainer.config.lora_target_modules == ["q_proj", "v_proj"]
    result = trainer.train()
    assert result["output_dir"] == str(tmp_path / "sft" / "final") and result["global_step"] == 2
    saved = trainer.save_model(str(tmp_path / "my_model"))
    assert (Path(saved) / "model.safetensors").is_file()


def test_grpo_wrapper_samples_scores_and_trains(tmp_path, tiny):
    model, tok = tiny
    calls = []

    def reward_fn(completions, prompts, answer, **kwargs):
        calls.append((len(completions), answer[0]))
        return [float(len(c) % 7) for c in completions]

    trainer = GRPOTrainerWrapper(
        model_name="unused",
        dataset=[
            {"prompt": "Say hi", "answer": "hi"},
            {"prompt": [{"role": "user", "content": "Count"}], "answer": "1 2 3"},
        ],
        reward_fn=reward_fn,
        output_dir=str(tmp_path / "grpo"),
        num_epochs=2,
        batch_size=1,
        group_size=3,
        max_new_tokens=6,
        model=model,
        tokenizer=tok,
        bf16=False,
        progress_bar=False,
        kl_coef=0.0,
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = trainer.train()
    assert calls == [(3, "hi"), (3, "1 2 3")] * 2
    assert len(result["reward_mean_per_epoch"]) == 2 and result["global_step"] == 2
    assert (tmp_path / "grpo" / "rollouts-epoch1.jsonl").is_file()
    assert any(not p.detach().equal(before[n]) for n, p in model.named_parameters())


def test_grpo_wrapper_rollouts_are_batched_and_seeded(tmp_path):
    """Same weights and seed: the same completions; another epoch draws other ones."""
    from agenttrainer.models import build_tiny_model

    def rollouts(name):
        model, tok = build_tiny_model(seed=0)
        trainer = GRPOTrainerWrapper(
            model_name="unused",
            dataset=[{"prompt": "Say hi"}, {"prompt": "Count"}, {"prompt": "List files"}],
            reward_fn=lambda completions, **kw: [0.0] * len(completions),
            output_dir=str(tmp_path / name),
            batch_size=2,  # two groups per generate call: the three prompts take two calls
            group_size=3,
            max_new_tokens=6,
            model=model,
            tokenizer=tok,
            bf16=False,
        )
        return [
            [t["response"] for g in rows for t in g["trajectories"]]
            for rows in ([json.loads(x) for x in trainer._rollouts(e).read_text().splitlines()] for e in (0, 1))
        ]

    first, second = rollouts("a"), rollouts("b")
    assert first == second and len(first[0]) == 9
    assert first[0] != first[1] and len(set(first[0])) > 1
