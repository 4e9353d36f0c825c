"""The dataset records are one contract: what ``knowlyr-hub export`` writes, knowlyr-trainer reads
with the same knowlyr-core models, and the token ids a policy sampled survive the way from a
recorded trajectory to the ids offline GRPO trains on."""

from __future__ import annotations

import pytest

from knowlyrcore import AgentEnv, TimeStep, register, unregister
from knowlyrcore.testing import require_module
from knowlyrcore.trajectory import Trajectory

hub = require_module("trajectoryhub", "knowlyr-hub is installed by `make install`")
data = require_module("agenttrainer.data", "knowlyr-trainer is installed by `make install`")


def _rollout(tid: str, reward: float, base: int) -> Trajectory:
    """A two-step episode with the tokens an online rollout records (``_with_tokens``)."""
    steps = [
        {
            "index": j,
            "thought": f"step {j}",
            "tool_call": {"name": "respond", "parameters": {"text": f"{tid}{j}"}},
            "observation": {"output": f"seen {j}"},
            "token_ids": [base + 10 * j, base + 10 * j + 1],
            "logprobs": [-0.5, -1.5],
            "metadata": {"observation_token_ids": [base + 10 * j + 5, base + 10 * j + 6] if j == 0 else []},
        }
        for j in range(2)
    ]
    return Trajectory.model_validate(
        {
            "id": tid,
            "task": {"id": "t", "description": "say hi"},
            "steps": steps,
            "outcome": {"success": reward > 0.5},
            "reward": reward,
            "metadata": {"prompt_token_ids": [1, 2, base]},
        }
    )


def test_sampled_token_ids_reach_offline_grpo_unchanged(tmp_path):
    from agenttrainer.models import build_tiny_model

    tokenizer = build_tiny_model()[1]
    episodes = [_rollout("a", 1.0, 1000), _rollout("b", 0.0, 2000)]
    hub.DatasetExporter(trajectories=episodes).export_grpo(tmp_path / "grpo.jsonl")
    ((where, record),) = data.read_located_records(tmp_path / "grpo.jsonl")
    examples = [data.tokenize_conversation(tokenizer, conv) for conv in data.grpo_group(record, where)]
    for example, episode in zip(examples, episodes):
        sampled = [i for s in episode.steps for i in s.token_ids]
        sequence = episode.metadata["prompt_token_ids"] + [
            i for s in episode.steps for i in s.token_ids + s.metadata["observation_token_ids"]
        ]
        assert example.input_ids == sequence
        assert [i for i, label in zip(example.input_ids, example.labels) if label != -100] == sampled
        assert [lp for lp in example.meta["sampled_logprobs"] if lp is not None] == [-0.5, -1.5] * 2


def test_every_export_reads_with_the_trainer_readers(tmp_path):
    episodes = [_rollout("a", 1.0, 1000), _rollout("b", 0.0, 2000)]
    exporter = hub.DatasetExporter(trajectories=episodes)
    exporter.export_sft(tmp_path / "steps.jsonl")
    exporter.export_sft(tmp_path / "chat.jsonl", format="messages")
    exporter.export_dpo(tmp_path / "dpo.jsonl")
    for name in ("steps", "chat"):
        ((where, record),) = data.read_located_records(tmp_path / f"{name}.jsonl")
        assert data.sft_conversation(record, where).num_steps == 2
    ((where, record),) = data.read_located_records(tmp_path / "dpo.jsonl")
    chosen, _ = data.dpo_pair(record, where)
    assert chosen.messages[1]["tool_calls"][0]["function"]["arguments"] == '{"text": "a0"}'
    assert "token_ids" not in chosen.messages[1]  # the chat template gets plain messages


class Ticks(AgentEnv):
    """Ends after two steps, whatever the agent does."""

    domain = "generic"

    def reset(self, *, task=None, seed=None):
        self.left = 2
        return TimeStep(observation="Tick twice.")

    def step(self, action):
        self.left -= 1
        return TimeStep(observation=f"{self.left} left", terminated=self.left <= 0)

    @property
    def available_tools(self):
        return ["tick"]


def test_online_rollouts_exported_train_offline_on_the_sampled_ids(tmp_path):
    """A real rollout (tiny random model) -> its trajectory -> hub GRPO export -> the offline GRPO
    data path: the sequence trained on is the rollout's own, token for token."""
    import torch

    from agenttrainer.acting.generators import LocalGenerator
    from agenttrainer.models import build_tiny_model
    from agenttrainer.online import collect_rollouts

    model, tokenizer = build_tiny_model(seed=0)
    torch.manual_seed(0)
    register("test/ticks", Ticks)
    try:
        rollouts = collect_rollouts(
            "test/ticks",
            [{"id": "t", "description": "tick"}],
            LocalGenerator(model, tokenizer),
            tokenizer,
            group_size=2,
            system_prompt="Tick.",
            max_steps=3,
            max_new_tokens=4,
            max_episode_tokens=1024,
            seed=0,
        )
    finally:
        unregister("test/ticks")
    # rewards that differ, as a reward model would give them (a group of equal ones is left out)
    trajectories = [r.trajectory.model_copy(update={"reward": float(k)}) for k, r in enumerate(rollouts)]
    hub.DatasetExporter(trajectories=trajectories).export_grpo(tmp_path / "grpo.jsonl")
    ((where, record),) = data.read_located_records(tmp_path / "grpo.jsonl")
    for conv, rollout in zip(data.grpo_group(record, where), rollouts):
        example = data.tokenize_conversation(tokenizer, conv)
        assert example.input_ids == rollout.token_ids
        sampled = [t for t, s in zip(rollout.token_ids, rollout.sampled) if s]
        assert [t for t in example.labels if t != -100] == sampled
        assert [lp for lp in example.meta["sampled_logprobs"] if lp is not None] == pytest.approx(
            [lp for lp, s in zip(rollout.logprobs, rollout.sampled) if s]
        )
