"""Curriculum, coreset selection, replay buffer, task-weighted sampling."""

import random
from collections import Counter

import pytest

from agenttrainer.data import (
    Example,
    ReplayBuffer,
    coreset_indices,
    curriculum_fraction,
    curriculum_indices,
    length_grouped_batches,
    task_weighted_indices,
)


def _ex(i, steps=1, reward=0.5, task_type=None, ids=None):
    ids = ids or [i, i + 1, i + 2]
    return Example(ids, ids, [1.0] * len(ids), meta={"num_steps": steps, "reward": reward, "task_type": task_type})


def test_curriculum_fraction_schedule():
    """start 0.3, warmup 2: epoch 0 -> 0.3, epoch 1 -> 0.3 + 0.7/2 = 0.65, epoch 2+ -> 1."""
    assert [curriculum_fraction(e, 0.3, 2) for e in range(4)] == pytest.approx([0.3, 0.65, 1.0, 1.0])
    assert curriculum_fraction(0, 0.3, 0) == 1.0


def test_curriculum_starts_with_short_high_reward_examples():
    examples = [_ex(0, steps=5), _ex(1, steps=1, reward=0.2), _ex(2, steps=1, reward=0.9), _ex(3, steps=3)]
    assert curriculum_indices(examples, 0, 0.25, 2) == [2]  # 1 of 4: fewest steps, highest reward
    assert curriculum_indices(examples, 1, 0.25, 2) == [1, 2, 3]  # ceil(4 * 0.625) = 3
    assert curriculum_indices(examples, 2, 0.25, 2) == [0, 1, 2, 3]


def test_coreset_strategies():
    examples = [_ex(i, ids=[i % 3] * 5 + [i]) for i in range(10)]
    losses = [float(i) for i in range(10)]
    rng = random.Random(0)
    assert coreset_indices(examples, losses, "loss_topk", 3, rng) == [7, 8, 9]
    diverse = coreset_indices(examples, None, "diversity", 3, random.Random(0))
    assert len(diverse) == 3 and len({examples[i].input_ids[0] for i in diverse}) == 3  # covers the 3 clusters
    hybrid = coreset_indices(examples, losses, "hybrid", 4, random.Random(0))
    assert len(hybrid) == 4 and {8, 9} <= set(hybrid)
    rand = coreset_indices(examples, None, "random", 4, random.Random(0))
    assert len(set(rand)) == 4 and rand == coreset_indices(examples, None, "random", 4, random.Random(0))
    assert coreset_indices(examples, None, "random", 50, rng) == list(range(10))
    with pytest.raises(ValueError, match="needs per-example losses"):
        coreset_indices(examples, None, "loss_topk", 3, rng)
    with pytest.raises(ValueError, match="coreset_strategy must be one of"):
        coreset_indices(examples, losses, "best", 3, rng)


def test_task_weighted_sampling_matches_proportions():
    examples = [_ex(i, task_type="a") for i in range(10)] + [_ex(i, task_type="b") for i in range(90)]
    idx = task_weighted_indices(examples, {"a": 0.5, "b": 0.5}, random.Random(0))
    counts = Counter(examples[i].meta["task_type"] for i in idx)
    assert len(idx) == 100 and counts == {"a": 50, "b": 50}
    with pytest.raises(ValueError, match=r"no examples: \['c'\]"):
        task_weighted_indices(examples, {"c": 1.0}, random.Random(0))


def test_replay_buffer_reservoir_and_persistence(tmp_path):
    buf = ReplayBuffer(capacity=5, seed=0)
    buf.add([{"i": i} for i in range(100)])
    assert len(buf.items) == 5 and buf.seen == 100
    assert max(r["i"] for r in buf.items) >= 5  # later records displaced early ones
    buf.save(tmp_path / "buf.jsonl")
    again = ReplayBuffer.load(tmp_path / "buf.jsonl", 5)
    assert again.items == buf.items and again.seen == 100
    assert len(again.sample(3)) == 3 and len(again.sample(30)) == 5
    with pytest.raises(ValueError, match="capacity must be positive"):
        ReplayBuffer(0)


def test_length_grouped_batches_group_similar_lengths():
    lengths = [random.Random(i).randint(1, 1000) for i in range(64)]
    batches = length_grouped_batches(lengths, 4, random.Random(0), group_batches=16)
    assert sorted(i for b in batches for i in b) == list(range(64))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
    naive = sum(
        max(lengths[i] for i in range(k, k + 4)) - min(lengths[i] for i in range(k, k + 4)) for k in range(0, 64, 4)
    )
    assert spread < naive / 4
