"""Chat-template formatting, observation masking, step weights, chunking, packing."""

import json

import pytest
import torch

from agenttrainer.data import (
    DataError,
    chunk_conversation,
    grpo_group,
    pack,
    pad,
    sft_conversation,
    tokenize_conversation,
)
from agenttrainer.models.attention import HiddenStates

RECORD = {
    "instruction": "Fix the bug",
    "steps": [
        {"thought": "Read", "action": "read_file /a.py", "observation": "def f(): pass", "reward": 0.7},
        {"thought": "Fix", "action": "edit_file /a.py", "observation": "File edited", "reward": 0.9},
    ],
}


def _trained_text(tokenizer, ex):
    return tokenizer.decode([t for t, lab in zip(ex.input_ids, ex.labels) if lab != -100])


def test_only_thought_and_action_are_trained(tokenizer):
    ex = tokenize_conversation(tokenizer, sft_conversation(RECORD, "f:1"))
    assert _trained_text(tokenizer, ex) == (
        "Thought: Read\nAction: read_file /a.py<|im_end|>\nThought: Fix\nAction: edit_file /a.py<|im_end|>\n"
    )
    full = tokenizer.decode(ex.input_ids)
    assert "Observation: def f(): pass" in full and "Fix the bug" in full
    # labels equal input ids where trained
    assert all(lab in (-100, t) for t, lab in zip(ex.input_ids, ex.labels))


def test_mask_observations_off_trains_observation_turns(tokenizer):
    ex = tokenize_conversation(tokenizer, sft_conversation(RECORD, "f:1", mask_observations=False))
    text = _trained_text(tokenizer, ex)
    assert "Observation: def f(): pass" in text and "Fix the bug" not in text


def test_step_weights_per_token(tokenizer):
    ex = tokenize_conversation(tokenizer, sft_conversation(RECORD, "f:1"))
    weights = {round(w, 6) for w, lab in zip(ex.weights, ex.labels) if lab != -100}
    assert weights == {0.875, 1.125}
    assert all(w == 0.0 for w, lab in zip(ex.weights, ex.labels) if lab == -100)


def test_tools_are_rendered_and_tool_turns_masked(tokenizer):
    conv = sft_conversation(
        {
            "messages": [
                {"role": "user", "content": "list"},
                {"role": "assistant", "content": "calling ls"},
                {"role": "tool", "content": "a.py"},
                {"role": "assistant", "content": "there is a.py"},
            ],
            "tools": [{"type": "function", "function": {"name": "ls", "description": "list", "parameters": {}}}],
        },
        "f:1",
    )
    ex = tokenize_conversation(tokenizer, conv)
    assert '"name": "ls"' in tokenizer.decode(ex.input_ids)
    assert _trained_text(tokenizer, ex) == "calling ls<|im_end|>\nthere is a.py<|im_end|>\n"


def test_truncation_that_leaves_nothing_to_train_is_an_error(tokenizer):
    conv = sft_conversation(RECORD, "data.jsonl:7")
    with pytest.raises(DataError, match=r"data.jsonl:7: no trainable tokens left .*max_length=10"):
        tokenize_conversation(tokenizer, conv, max_length=10)


def test_chunking_splits_at_step_boundaries_and_keeps_the_task(tokenizer):
    steps = [{"thought": f"step {j}", "action": f"cmd {j} " + "x " * 10, "observation": f"obs {j}"} for j in range(6)]
    conv = sft_conversation({"instruction": "The task text", "steps": steps}, "f:1")
    whole = tokenize_conversation(tokenizer, conv)
    chunks = chunk_conversation(tokenizer, conv, max_length=len(whole) // 2)
    assert len(chunks) >= 2
    trained = []
    for ch in chunks:
        assert len(ch) <= len(whole) // 2
        text = tokenizer.decode(ch.input_ids)
        assert "The task text" in text
        trained.append(_trained_text(tokenizer, ch))
    # every step is trained exactly once across chunks, whole steps only
    for j in range(6):
        assert sum(t.count(f"Thought: step {j}\n") for t in trained) == 1
    # later chunks carry earlier steps as untrained context
    for ch, t in zip(chunks[1:], trained[1:]):
        first = next(j for j in range(6) if f"Thought: step {j}\n" in t)
        assert f"Thought: step {first - 1}\n" in tokenizer.decode(ch.input_ids)


def test_short_trajectory_is_one_chunk(tokenizer):
    conv = sft_conversation(RECORD, "f:1")
    assert len(chunk_conversation(tokenizer, conv, max_length=4096)) == 1


def test_packed_forward_equals_separate_forwards(tiny, tokenizer):
    """Packing with a block-diagonal mask gives each sequence exactly its own hidden states."""
    model, _ = tiny
    module = HiddenStates(model).eval()
    a = tokenize_conversation(tokenizer, sft_conversation(RECORD, "f:1"))
    b = tokenize_conversation(tokenizer, sft_conversation({"instruction": "x", "response": "y"}, "f:2"))
    with torch.no_grad():
        packed = pack([a, b])
        h = module(packed["input_ids"], packed["position_ids"], packed["seq_ids"])
        for i, ex in enumerate([a, b]):
            one = pack([ex])
            h1 = module(one["input_ids"], one["position_ids"], one["seq_ids"])
            sel = packed["seq_ids"][0] == i
            assert torch.allclose(h[0, sel], h1[0], atol=1e-5)
        padded = pad([a, b], pad_token_id=tokenizer.pad_token_id)
        hp = module(padded["input_ids"], padded["position_ids"], padded["seq_ids"])
        assert torch.allclose(hp[1, : len(b)], h[0, packed["seq_ids"][0] == 1], atol=1e-5)
    assert packed["labels"][0, len(a)].item() == -100  # no prediction across the boundary
    assert padded["labels"][1, len(b) :].eq(-100).all()


def test_eager_attention_with_additive_mask_matches_sdpa(tokenizer):
    """The eager path gets a float mask, sdpa a boolean one; both keep packed sequences apart."""
    from agenttrainer.models import build_tiny_model

    a = tokenize_conversation(tokenizer, sft_conversation(RECORD, "f:1"))
    b = tokenize_conversation(tokenizer, sft_conversation({"instruction": "x", "response": "y"}, "f:2"))
    packed = pack([a, b])
    outs = []
    for impl in ("sdpa", "eager"):
        model, _ = build_tiny_model(tokenizer, seed=0)
        model.config._attn_implementation = impl
        with torch.no_grad():
            outs.append(HiddenStates(model.eval())(packed["input_ids"], packed["position_ids"], packed["seq_ids"]))
    assert torch.allclose(outs[0], outs[1], atol=1e-5)


def test_recorded_token_ids_are_used_as_stored(tokenizer):
    """Before: offline GRPO re-rendered the chat template, so it trained on other tokens than the
    policy sampled. Ids the template would never produce (10, 11, ...) show which ones are used."""
    recorded = {
        "prompt": "list the files",
        "trajectories": [
            {
                "messages": [
                    {"role": "assistant", "content": "", "token_ids": [10, 11, 12], "logprobs": [-0.5, -0.25, -0.125]},
                    {"role": "tool", "content": "a.py", "token_ids": [20, 21]},
                    {"role": "assistant", "content": "done", "token_ids": [30, 31]},
                ],
                "reward": 1.0,
                "step_rewards": [0.5, 1.5],
                "prompt_token_ids": [1, 2, 3],
            },
            {"response": "no", "reward": 0.0},
        ],
    }
    conv, other = grpo_group(recorded, "g:1")
    ex = tokenize_conversation(tokenizer, conv)
    assert ex.input_ids == [1, 2, 3, 10, 11, 12, 20, 21, 30, 31]
    assert ex.labels == [-100, -100, -100, 10, 11, 12, -100, -100, 30, 31]
    assert ex.weights == [0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.0, 0.0, 1.5, 1.5]  # step reward / mean
    assert ex.meta["sampled_logprobs"] == [None, None, None, -0.5, -0.25, -0.125, None, None, None, None]
    assert tokenize_conversation(tokenizer, conv, max_length=5).input_ids == [1, 2, 3, 10, 11]
    assert other.token_ids is None  # nothing recorded: the chat template renders it
    assert "assistant\nno" in tokenizer.decode(tokenize_conversation(tokenizer, other).input_ids)
    conv.token_ids[3] = [len(tokenizer)]
    with pytest.raises(DataError, match=rf"^g:1: recorded token id {len(tokenizer)} is not in the tokenizer's vocab"):
        tokenize_conversation(tokenizer, conv)


def test_offline_grpo_trains_on_the_stored_token_ids(tmp_path, tiny):
    """The GRPO recipe's own data path (read, check, tokenise) hands the stored ids to the model."""
    from agenttrainer.config import GRPOConfig
    from agenttrainer.trainers.grpo import GRPOTrainer

    model, tok = tiny
    stored = [[[5, 6, 7], [100, 101], [200], [300, 301, 302]], [[5, 6, 8], [110], [210, 211], [310]]]
    trajectories = [
        {
            "messages": [
                {"role": "assistant", "content": "a", "token_ids": ids[1]},
                {"role": "tool", "content": "o", "token_ids": ids[2]},
                {"role": "assistant", "content": "b", "token_ids": ids[3]},
            ],
            "reward": reward,
            "prompt_token_ids": ids[0],
        }
        for ids, reward in zip(stored, [1.0, 0.0])
    ]
    path = tmp_path / "grpo.jsonl"
    path.write_text(json.dumps({"task_id": "t", "prompt": "p", "trajectories": trajectories}) + "\n")
    config = GRPOConfig(train_file=str(path), output_dir=str(tmp_path / "o"), progress_bar=False, bf16=False)
    (group,) = GRPOTrainer(config, model=model, tokenizer=tok).load_groups(path)
    assert [ex.input_ids for ex in group] == [[i for span in ids for i in span] for ids in stored]
    assert [[i for i, lab in zip(ex.input_ids, ex.labels) if lab != -100] for ex in group] == [
        [100, 101, 300, 301, 302],
        [110, 310],
    ]
