"""Online RL's task sampling: pass-rate draws, informative groups, dynamic sampling's refill.

The draws are checked as functions on hand-set records; the refill runs the real trainer with a
tiny random model on a stub environment whose tasks either always score the same (no signal) or
score by episode seed (a signal in every group), so which groups carry a signal is known."""

import json
import random
from collections import Counter
from types import SimpleNamespace

import pytest
from small_online import small_online_config

from agenttrainer.config import ConfigError
from agenttrainer.online import OnlineRLTrainer
from agenttrainer.online.sampling import (
    BAND_WEIGHT,
    informative_groups,
    pass_rate_indices,
    record_outcomes,
    sequential_indices,
)
from knowlyrcore import AgentEnv, TimeStep, register, unregister


class Stub(AgentEnv):
    """One step. ``metadata.signal``: the reward is the parity of the episode's seed (the episodes
    of a group differ); otherwise every episode scores 1."""

    domain = "generic"

    def reset(self, *, task=None, seed=None):
        meta = getattr(task, "metadata", {}) or {}
        self.reward = float(seed % 2) if meta.get("signal") else 1.0
        return TimeStep(observation="Say anything.")

    def step(self, action):
        return TimeStep(observation="done", reward=self.reward, terminated=True, info={"success": self.reward > 0})

    @property
    def available_tools(self):
        return ["respond"]


@pytest.fixture(autouse=True)
def stub_env():
    register("test/stub-signal", Stub)
    yield
    unregister("test/stub-signal")


def make_config(tmp_path, signals, **overrides):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "metadata": {"signal": s}}) + "\n" for i, s in enumerate(signals))
    )
    group = {"group_size": 2, "tasks_per_iteration": 2, "num_iterations": 1, "batch_size": 8}
    episode = {"system_prompt": "Test.", "max_steps": 1, "max_new_tokens": 4, "max_episode_tokens": 256}
    return small_online_config(tmp_path, tasks, **{"env_id": "test/stub-signal", **group, **episode, **overrides})


# -- the draws ---------------------------------------------------------------------------------


def test_sequential_draws_use_every_task_once_per_pass():
    picks = [i for iteration in range(5) for i in sequential_indices(10, iteration, 4, seed=3)]
    assert sorted(picks[:10]) == list(range(10)) and sorted(picks[10:20]) == list(range(10))
    assert picks == [i for iteration in range(5) for i in sequential_indices(10, iteration, 4, seed=3)]


def test_pass_rate_draws_prefer_tasks_that_still_teach():
    """30 tasks: 0-9 at pass rate 0.5 (in the band), 10-19 always solved, 20-29 never. Drawing 3
    at a time, an in-band task is BAND_WEIGHT times as likely as another, so in-band tasks take
    about 10 / 12 of the draws (exactly so for the first draw; a little less after it)."""
    records = {str(i): [2, 4] for i in range(10)} | {str(i): [4, 4] for i in range(10, 20)}
    records |= {str(i): [0, 4] for i in range(20, 30)}
    rng = random.Random(0)
    drawn = Counter()
    for _ in range(400):
        picked = pass_rate_indices(30, 3, records, (0.2, 0.8), rng)
        assert len(set(picked)) == 3
        drawn.update("band" if i < 10 else "other" for i in picked)
    share = drawn["band"] / sum(drawn.values())
    assert BAND_WEIGHT == 10.0 and 0.7 < share < 0.9, share
    # untried tasks count as in band; exclusions are honoured; the same seed draws the same
    assert set(pass_rate_indices(5, 5, {}, (0.2, 0.8), random.Random(1), exclude=[0, 3])) == {1, 2, 4}
    assert pass_rate_indices(30, 5, records, (0.2, 0.8), random.Random(7)) == pass_rate_indices(
        30, 5, records, (0.2, 0.8), random.Random(7)
    )


def test_outcomes_and_informative_groups():
    records = {}
    record_outcomes(records, [(3, True), (3, False), (1, True)])
    assert records == {"3": [1, 2], "1": [1, 1]}

    def r(group, reward, valid=True):
        return SimpleNamespace(group=group, reward=reward, valid=valid)

    rollouts = [r(0, 1.0), r(0, 1.0), r(1, 0.0), r(1, 1.0), r(2, 1.0), r(2, 0.0, valid=False), r(3, 0.5), r(3, 0.2)]
    assert informative_groups(rollouts) == [1, 3]  # group 2 differs only through a masked episode


# -- dynamic sampling in the trainer --------------------------------------------------------------


def test_dynamic_sampling_refills_until_enough_groups_carry_a_signal(tiny, tmp_path):
    model, tokenizer = tiny
    signals = [False, False, False, False, True, True]  # at most 4 uniform groups before 2 with a signal
    c = make_config(tmp_path, signals, dynamic_sampling=True, max_refill_rounds=4)
    trainer = OnlineRLTrainer(c, model=model, tokenizer=tokenizer)
    first = trainer.iteration_task_indices(0)
    result = trainer.train()
    log = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert log["rollout/informative_groups"] == 2 and result["optimizer_steps"] == 1
    if all(signals[i] for i in first):
        assert log["rollout/refill_rounds"] == 0
    else:
        assert log["rollout/refill_rounds"] >= 1
    played = log["rollout/informative_groups"] + log["rollout/uniform_groups"]
    assert played >= 2 and log["rollout/uniform_groups"] <= 4
    assert "train/uniform_group_episodes" not in log or log["train/uniform_group_episodes"] == 0
    recorded = (tmp_path / "out" / "rollouts" / "iteration-00001.jsonl").read_text().splitlines()
    assert len(recorded) == played * c.group_size  # every episode played is on record
    assert sum(a for _, a in trainer.pass_rates.values()) == played * c.group_size


def test_dynamic_sampling_gives_up_after_its_rounds_and_takes_no_step(tiny, tmp_path):
    model, tokenizer = tiny
    c = make_config(tmp_path, [False] * 8, dynamic_sampling=True, max_refill_rounds=2)
    result = OnlineRLTrainer(c, model=model, tokenizer=tokenizer).train()
    log = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert log["rollout/refill_rounds"] == 2 and log["rollout/informative_groups"] == 0
    assert log["rollout/uniform_groups"] == 2 + 2 + 2  # the first draw, then two rounds of the shortfall
    assert result["optimizer_steps"] == 0


def test_pass_rates_are_kept_in_the_checkpoint_and_steer_the_draws(tiny, tmp_path):
    model, tokenizer = tiny
    c = make_config(tmp_path, [True, False, True, False], task_sampling="pass_rate", num_iterations=2, save_steps=1)
    trainer = OnlineRLTrainer(c, model=model, tokenizer=tokenizer)
    trainer.train()
    state = json.loads((tmp_path / "out" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["pass_rates"] == trainer.pass_rates and sum(a for _, a in state["pass_rates"].values()) == 8
    for index, (successes, attempts) in state["pass_rates"].items():
        assert successes == (attempts if index in ("1", "3") else attempts // 2)  # constant tasks always succeed


def test_sampling_config_errors_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="task_sampling must be sequential or pass_rate"):
        make_config(tmp_path, [True], task_sampling="random")
    with pytest.raises(ConfigError, match="pass_rate_band must be two rates"):
        make_config(tmp_path, [True], pass_rate_band=[0.8, 0.2])
    with pytest.raises(ConfigError, match="ppo does not compare the episodes"):
        make_config(tmp_path, [True], dynamic_sampling=True, algorithm="ppo")
    with pytest.raises(ConfigError, match=r"max_refill_rounds must be in \[0, 9\]"):
        make_config(tmp_path, [True], max_refill_rounds=12)
    assert make_config(tmp_path, [True], pass_rate_band=["0.1", "0.9"]).selection.pass_rate_band == [0.1, 0.9]
