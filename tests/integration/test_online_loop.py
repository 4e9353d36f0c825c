"""The whole loop on real parts: collect -> process reward -> export -> train -> serve the
checkpoint back into the environment as the policy -> collect again.

The environment is a small deterministic one defined here (the sandbox environments have
their own suites); everything else is the real packages: hub's collect and exporter,
knowlyr-reward's rule layer, knowlyr-trainer's SFT/DPO/GRPO recipes on a tiny random model
with the real SmolLM2 tokenizer, and AgentInference driving a new episode.
"""

from __future__ import annotations

import pytest

from knowlyrcore.testing import require_module

# `make test` installs every package: the loop's reward and trainer are both there
require_module("agentreward", "the process reward is knowlyr-reward's")
require_module("agenttrainer", "the loop trains with knowlyr-trainer")

from agentreward import RewardEngine  # noqa: E402
from knowlyrcore import AgentEnv, InvalidActionError, TimeStep, Trajectory, read_jsonl, write_trajectories  # noqa: E402
from trajectoryhub import DatasetExporter, collect, make_reward_fn  # noqa: E402

pytestmark = pytest.mark.integration


class LookupEnv(AgentEnv):
    """Find a record's value: `lookup(key)` returns it, `submit(answer)` ends the episode."""

    domain = "conversation"
    RECORDS = {"order-17": "shipped", "order-42": "delayed"}

    def reset(self, *, task=None, seed=None):
        self.key = (getattr(task, "metadata", None) or {}).get("key", "order-17")
        return TimeStep(f"What is the status of {self.key}?")

    def step(self, action):
        tool, params = action["tool"], action.get("params") or {}
        if tool == "lookup":
            value = self.RECORDS.get(str(params.get("key")), "no such record")
            return TimeStep(value, info={"exit_code": 0 if value != "no such record" else 1})
        if tool in ("submit", "respond"):
            answer = str(params.get("answer", params.get("message", "")))
            ok = answer.strip() == self.RECORDS[self.key]
            return TimeStep("thanks", reward=float(ok), terminated=True, info={"success": ok})
        raise InvalidActionError(f"unknown tool {tool!r}")

    @property
    def available_tools(self):
        return ["lookup", "submit", "respond"]


class Expert:
    def reset(self):
        self.looked = None

    def __call__(self, observation):
        if self.looked is None:
            self.looked = observation.split()[-1].rstrip("?")
            return {"tool": "lookup", "params": {"key": self.looked}, "thought": "look the order up"}
        return {"tool": "submit", "params": {"answer": observation}, "thought": "report the status"}


class Flailer:
    """Looks the same wrong key up twice, then guesses."""

    def reset(self):
        self.n = 0

    def __call__(self, observation):
        self.n += 1
        if self.n <= 2:
            return {"tool": "lookup", "params": {"key": "order-1"}, "thought": "try something"}
        return {"tool": "submit", "params": {"answer": "lost"}, "thought": "guess"}


TASKS = [
    {"id": "t17", "description": "status of order-17", "metadata": {"key": "order-17"}},
    {"id": "t42", "description": "status of order-42", "metadata": {"key": "order-42"}},
]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("loop")
    reward_fn = make_reward_fn("conversation")
    good = collect(
        LookupEnv,
        agent_factory=Expert,
        tasks=TASKS,
        n_episodes=4,
        reward_fn=reward_fn,
        agent_name="expert",
        progress=False,
    )
    bad = collect(
        LookupEnv,
        agent_factory=Flailer,
        tasks=TASKS,
        n_episodes=2,
        reward_fn=reward_fn,
        agent_name="flailer",
        progress=False,
    )
    engine = RewardEngine(domain="conversation")
    scored = [engine.score(t) for t in good + bad]
    write_trajectories(root / "scored.jsonl", scored)
    exporter = DatasetExporter(root / "scored.jsonl")
    reports = {
        "sft": exporter.export_sft(root / "sft.jsonl"),  # successful trajectories only
        "dpo": exporter.export_dpo(root / "dpo.jsonl"),
        "grpo": exporter.export_grpo(root / "grpo.jsonl"),
    }
    return root, scored, reports


def test_rewards_rank_the_expert_above_the_flailer(datasets):
    _, scored, _ = datasets
    expert = [t.reward for t in scored if t.agent == "expert"]
    flailer = [t.reward for t in scored if t.agent == "flailer"]
    assert min(expert) > max(flailer)
    assert all(t.steps[0].rubric_scores for t in scored)
    redundant = [
        s for t in scored if t.agent == "flailer" for s in t.steps if "redundant" in s.metadata.get("reward_flags", [])
    ]
    assert redundant, "the repeated wrong lookup should be flagged"


def test_exports_feed_the_trainer_readers(datasets):
    from agenttrainer.data.readers import dpo_pair, grpo_group, sft_conversation
    from agenttrainer.data.readers import read_located_records as trainer_read

    root, _, reports = datasets
    assert reports["sft"].written == 4 and reports["dpo"].written == 2 and reports["grpo"].written == 2
    conversations = [sft_conversation(r, w) for w, r in trainer_read(root / "sft.jsonl")]
    assert all(c.num_steps == 2 for c in conversations)
    assert all(len(dpo_pair(r, w)) == 2 for w, r in trainer_read(root / "dpo.jsonl"))
    assert all(len(grpo_group(r, w)) == 3 for w, r in trainer_read(root / "grpo.jsonl"))
    assert next(iter(read_jsonl(root / "sft.jsonl")))["steps"][0]["action"] == {
        "name": "lookup",
        "parameters": {"key": "order-17"},
    }


def test_train_then_roll_out_the_checkpoint(datasets, tmp_path):
    from agenttrainer import AgentInference, DPOConfig, GRPOConfig, SFTConfig, save_model
    from agenttrainer.models import build_tiny_model
    from agenttrainer.trainers.dpo import DPOTrainer
    from agenttrainer.trainers.grpo import GRPOTrainer
    from agenttrainer.trainers.sft import SFTTrainer

    root, _, _ = datasets
    model, tokenizer = build_tiny_model(hidden_size=32, num_layers=1, seed=0)
    save_model(model, tokenizer, tmp_path / "base")
    common = {
        "num_epochs": 1,
        "max_optimizer_steps": 2,
        "batch_size": 2,
        "learning_rate": 1e-3,
        "bf16": False,
        "max_length": 256,
        "progress_bar": False,
    }
    sft = SFTTrainer(
        SFTConfig(
            model_name_or_path=str(tmp_path / "base"),
            train_file=str(root / "sft.jsonl"),
            output_dir=str(tmp_path / "sft"),
            **common,
        )
    ).train()
    dpo = DPOTrainer(
        DPOConfig(
            model_name_or_path=sft["output_dir"],
            train_file=str(root / "dpo.jsonl"),
            output_dir=str(tmp_path / "dpo"),
            **common,
        )
    ).train()
    grpo = GRPOTrainer(
        GRPOConfig(
            model_name_or_path=dpo["output_dir"],
            train_file=str(root / "grpo.jsonl"),
            output_dir=str(tmp_path / "grpo"),
            **common,
        )
    ).train()

    inference = AgentInference.from_pretrained(grpo["output_dir"], max_new_tokens=24)
    (trajectory,) = collect(
        LookupEnv,
        agent_factory=lambda: inference.create_agent(system_prompt="Answer."),
        tasks=TASKS[:1],
        max_steps=2,
        progress=False,
        agent_name="trained",
    )
    assert 1 <= len(trajectory.steps) <= 2 and trajectory.agent == "trained"
    Trajectory.model_validate_json(trajectory.model_dump_json())
