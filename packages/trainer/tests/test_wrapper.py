"""Seed 002's wrapper API on a tiny model."""

import json
from pathlib import Path

import pytest

from agenttrainer import GRPOTrainerWrapper, SFTTrainerWrapper, create_lora_config
from agenttrainer.data import DataError, grpo_group, read_located_records, tokenize_conversation
from agenttrainer.losses.sft import IGNORE_INDEX


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
    assert trainer.config.lora.lora_r == 4 and trainer.config.lora.lora_target_modules == ["q_proj", "v_proj"]
    result = trainer.train()
    assert result["output_dir"] == str(tmp_path / "sft" / "final") and result["global_step"] == 2
    saved = trainer.save_model(str(tmp_path / "my_model"))
    assert (Path(saved) / "model.safetensors").is_file()


PROMPTS = [{"prompt": "Say hi", "answer": "hi"}, {"prompt": [{"role": "user", "content": "Count"}], "answer": "1 2 3"}]


def grpo_wrapper(output_dir, tiny, dataset, reward_fn, **config):
    """A wrapper on the tiny model: groups of 3 answers of at most 6 tokens."""
    model, tok = tiny
    options = dict(group_size=3, max_new_tokens=6, bf16=False, progress_bar=False)
    return GRPOTrainerWrapper(
        "unused", dataset, reward_fn, str(output_dir), model=model, tokenizer=tok, **{**options, **config}
    )


def test_grpo_wrapper_samples_scores_and_trains(tmp_path, tiny):
    model = tiny[0]
    calls = []

    def reward_fn(completions, prompts, answer, **kwargs):
        calls.append((len(completions), answer[0]))
        return [float(len(c) % 7) for c in completions]

    trainer = grpo_wrapper(tmp_path / "grpo", tiny, PROMPTS, reward_fn, num_epochs=2, batch_size=1, kl_coef=0.0)
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
        trainer = grpo_wrapper(
            tmp_path / name,
            build_tiny_model(seed=0),
            [{"prompt": "Say hi"}, {"prompt": "Count"}, {"prompt": "List files"}],
            lambda completions, **kw: [0.0] * len(completions),
            batch_size=2,  # two groups per generate call: the three prompts take two calls
        )
        return [
            [t["messages"][0]["content"] for g in rows for t in g["trajectories"]]
            for rows in ([json.loads(x) for x in trainer._rollouts(e).read_text().splitlines()] for e in (0, 1))
        ]

    first, second = rollouts("a"), rollouts("b")
    assert first == second and len(first[0]) == 9
    assert first[0] != first[1] and len(set(first[0])) > 1


def test_grpo_wrapper_trains_on_the_ids_it_sampled(tmp_path, tiny, sampled):
    """Before: the rollouts held the decoded answers as text, which the recipe tokenised again
    with the chat template. Now each attempt holds its prompt's ids and the answer's sampled ids,
    and the recipe's input is exactly them, labels on the answer's ids."""
    tok, drawn = tiny[1], sampled

    def reward_fn(completions, **columns):
        return [float(len(c) % 3) for c in completions]

    path = grpo_wrapper(tmp_path / "grpo", tiny, PROMPTS, reward_fn, batch_size=2)._rollouts(0)
    examples = [
        tokenize_conversation(tok, conv)
        for where, record in read_located_records(path)
        for conv in grpo_group(record, where)
    ]
    assert len(drawn) == len(examples) == 6
    assert [ex.input_ids for ex in examples] == [prompt + ids for prompt, ids in drawn]
    assert [[t for t in ex.labels if t != IGNORE_INDEX] for ex in examples] == [ids for _, ids in drawn]
    first = json.loads(path.read_text().splitlines()[0])["trajectories"][0]
    assert first["messages"][0]["content"] == tok.decode(drawn[0][1], skip_special_tokens=True)


def test_sft_wrapper_refuses_a_bad_row_before_writing(tmp_path, tiny):
    model, tok = tiny
    rows = [{"instruction": "say hi", "response": "hi"}, {"messages": [{"role": "user", "content": "hi"}]}]
    with pytest.raises(DataError, match="^dataset row 1: messages: has no assistant message to train on$"):
        SFTTrainerWrapper("unused", rows, output_dir=str(tmp_path / "sft"), model=model, tokenizer=tok, bf16=False)
    assert not (tmp_path / "sft" / "train.jsonl").exists()
