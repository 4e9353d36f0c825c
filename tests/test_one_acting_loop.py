"""One acting loop: every runner of episodes gives the same trajectories for the same policy,
environment and seeds.

knowlyr-hub's ``collect`` (one episode per call, in threads), ``collect_batched`` (lockstep),
knowlyr-trainer's online RL (``collect_rollouts``) and the GRPO wrapper's sampling are thin
callers of ``knowlyrcore.rollout.play_episodes``. With a scripted policy they all record the
same steps; with the local policy (``TokenPolicy``, greedy, tiny random model) hub's
``collect_batched`` and online RL record the same token ids and log-probs, and the wrapper
samples what it sampled before it went through the loop. ``knowlyr-hub evaluate --policy
CHECKPOINT`` (greedy) takes the actions online RL's rollouts of that checkpoint take, on a tiny
random model and on SmolLM2-135M.
"""

from __future__ import annotations

import json

import pytest
import torch

from agenttrainer.acting import AgentInference, LocalGenerator, TokenPolicy, TokenSample
from agenttrainer.models import build_tiny_model, load_model_and_tokenizer, save_model
from agenttrainer.online import collect_rollouts
from agenttrainer.wrapper import GRPOTrainerWrapper
from knowlyrcore import AgentEnv, TaskInfo, TimeStep, read_trajectories, register, unregister, write_jsonl
from knowlyrcore.policy import as_batch_policy
from knowlyrcore.rollout import env_tools, play_episodes, wrap_episode_env
from trajectoryhub import collect, collect_batched
from trajectoryhub.cli import main as hub

TASKS = [{"id": "a", "metadata": {"n": 3}}, {"id": "b", "metadata": {"n": 1}}, {"id": "c", "metadata": {"n": 2}}]
SEED = 40


class Countdown(AgentEnv):
    """Ends after ``metadata.n`` steps; the reward depends on the action and the reset seed, so a
    runner that mixed up actions, tasks or seeds would record other numbers."""

    domain = "generic"

    def reset(self, *, task=None, seed=None):
        self.left, self.seed = int(task.metadata["n"]), seed or 0
        return TimeStep(observation=f"Count down from {self.left} (seed {seed}).")

    def step(self, action):
        self.left -= 1
        text = json.dumps(action["params"], sort_keys=True)
        reward = float((sum(map(ord, text)) + self.seed) % 3)
        return TimeStep(
            observation=f"{self.left} left", reward=reward, terminated=self.left <= 0, info={"success": reward > 0}
        )

    @property
    def available_tools(self):
        return ["tick", "respond"]


class Ticker:
    """A per-episode scripted policy: tick with the turn number."""

    def reset(self, task=None):
        self.turn = 0

    def __call__(self, observation):
        self.turn += 1
        return {"tool": "tick", "params": {"turn": self.turn}}


class ScriptedTexts:
    """A generator answering every prompt of turn ``k`` with ``texts[k]``."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.calls = tokenizer, texts, 0

    def generate(self, prompts, **kw):
        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return [TokenSample(ids, [-0.25] * len(ids), "stop") for _ in prompts]

    def weights_updated(self, model=None, path=None):
        pass


def comparable(trajectory, *, tokens=True):
    """What two runs of the same episodes must share: everything but ids, clocks and the runner's names."""
    data = trajectory.model_dump()
    for key in ("id", "agent"):
        del data[key]
    for key in ("started_at", "finish"):
        data["metadata"].pop(key, None)
    for step in data["steps"]:
        del step["timestamp"], step["duration_s"]
        if not tokens:
            step["metadata"].pop("observation_token_ids", None)
            step["token_ids"] = step["logprobs"] = None
    if not tokens:
        data["metadata"].pop("prompt_token_ids", None)
    return data


def test_scripted_policy_every_runner_records_the_same_episodes(tokenizer):
    options = dict(tasks=TASKS, seed=SEED, progress=False, max_steps=8)
    sequential = collect(Countdown, agent_factory=Ticker, n_episodes=3, **options)
    threads = collect(Countdown, agent_factory=Ticker, n_episodes=3, concurrency=3, **options)
    lockstep = collect_batched(Countdown, Ticker, batch_size=2, **options)
    envs = [wrap_episode_env(Countdown(), max_steps=8) for _ in TASKS]
    tasks, seeds = [TaskInfo.coerce(t) for t in TASKS], [SEED + i for i in range(3)]
    core = [e.trajectory for e in play_episodes(envs, as_batch_policy(Ticker), tasks, seeds)]
    # online RL's policy writes the same calls as text: its steps are the same, plus their tokens
    texts = [f'<tool_call>\n{{"name": "tick", "arguments": {{"turn": {k}}}}}\n</tool_call>' for k in (1, 2, 3)]
    online = collect_rollouts(
        Countdown, TASKS, ScriptedTexts(tokenizer, texts), tokenizer, max_steps=8, max_new_tokens=32, seed=SEED
    )
    expected = [comparable(t) for t in sequential]
    assert [len(t["steps"]) for t in expected] == [3, 1, 2]
    for run in (threads, lockstep, core):
        assert [comparable(t) for t in run] == expected
    assert [comparable(r.trajectory, tokens=False) for r in online] == expected
    assert [r.env_reward for r in online] == [t.reward for t in sequential]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_model()[1]


def test_token_policy_hub_collection_equals_online_rl(tokenizer):
    """Greedy sampling from one tiny model: ``collect_batched`` with a ``TokenPolicy`` records the
    tokens, log-probs, steps and rewards online RL records."""
    model, _ = build_tiny_model(seed=0)
    generator = LocalGenerator(model, tokenizer)
    options = dict(max_new_tokens=6, max_episode_tokens=1024, temperature=0.0)
    rollouts = collect_rollouts(Countdown, TASKS, generator, tokenizer, max_steps=8, seed=SEED, **options)
    policy = TokenPolicy(generator, tokenizer, tools=env_tools(Countdown()), **options)
    hub = collect_batched(Countdown, policy, TASKS, max_steps=8, seed=SEED, progress=False)
    assert [len(t.steps) for t in hub] == [3, 1, 2]
    assert all(step.token_ids and len(step.logprobs) == len(step.token_ids) for t in hub for step in t.steps)
    assert [comparable(t) for t in hub] == [comparable(r.trajectory) for r in rollouts]
    for trajectory, rollout in zip(hub, rollouts):
        rebuilt = list(trajectory.metadata["prompt_token_ids"])
        for step in trajectory.steps:
            rebuilt += step.token_ids + step.metadata["observation_token_ids"]
        assert rebuilt == rollout.token_ids


def test_the_wrapper_samples_through_the_loop_what_it_sampled_before(tmp_path, tokenizer):
    """The GRPO wrapper's completions, now one-turn episodes of the loop, equal those of its former
    sampling code (chat template -> ``LocalGenerator`` in chunks of ``batch_size`` groups, one
    seeded RNG stream per epoch), and a ``TokenPolicy`` in hub's ``collect_batched`` gives them too.
    The rollouts it trains on hold those ids, and its prompts' as the chat template renders them."""
    rows = [{"prompt": "Say hi"}, {"prompt": [{"role": "user", "content": "Count"}]}, {"prompt": "List files"}]
    model, _ = build_tiny_model(seed=0)
    wrapper = GRPOTrainerWrapper(
        model_name="unused",
        dataset=rows,
        reward_fn=lambda completions, **kw: [0.0] * len(completions),
        output_dir=str(tmp_path / "w"),
        batch_size=2,
        group_size=3,
        max_new_tokens=6,
        model=model,
        tokenizer=tokenizer,
        bf16=False,
        progress_bar=False,
    )
    records = [json.loads(line) for line in wrapper._rollouts(1).read_text().splitlines()]
    attempts = [t for record in records for t in record["trajectories"]]
    sampled = [t["messages"][0]["token_ids"] for t in attempts]

    encode = AgentInference(model, tokenizer).encode
    chats = [[{"role": "user", "content": r["prompt"]}] if isinstance(r["prompt"], str) else r["prompt"] for r in rows]
    prompts = [encode(chat)[0].tolist() for chat in chats]
    before = []
    generator = LocalGenerator(model, tokenizer, batch_size=6, logprobs=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(wrapper.config.seed + 1)
        for start in (0, 2):
            chunk = [p for p in prompts[start : start + 2] for _ in range(3)]
            samples = generator.generate(chunk, max_new_tokens=6, temperature=1.0)
            before += [s.token_ids for s in samples]
    assert sampled == before and len({tuple(ids) for ids in sampled}) > 1
    assert [t["prompt_token_ids"] for t in attempts] == [p for p in prompts for _ in range(3)]

    class Prompt(AgentEnv):
        def reset(self, *, task=None, seed=None):
            return TimeStep(observation=task.metadata["prompt"])

        def step(self, action):
            return TimeStep(terminated=True)

    tasks = [{"metadata": {"prompt": r["prompt"]}} for r in rows for _ in range(3)]
    policy = TokenPolicy(LocalGenerator(model, tokenizer), tokenizer, max_new_tokens=6)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(wrapper.config.seed + 1)
        hub = collect_batched(Prompt, policy, tasks, batch_size=6, progress=False)
    assert [t.steps[0].token_ids for t in hub] == sampled


@pytest.fixture
def countdown_id():
    register("test/countdown-acting", Countdown, domain="generic")
    yield "test/countdown-acting"
    unregister("test/countdown-acting")


@pytest.mark.parametrize("spec", ["tiny", pytest.param("smollm2-135m", marks=pytest.mark.integration)])
def test_greedy_evaluate_acts_as_online_rl(spec, countdown_id, tmp_path, capsys):
    """One checkpoint, the same tasks and seeds: ``knowlyr-hub evaluate --policy`` (the trainer's
    ``policy_from_spec``) and online RL's rollouts (``collect_rollouts`` over a ``LocalGenerator``)
    act through the one local policy, so every step's action and sampled token ids are the same."""
    if spec == "tiny":
        model, tokenizer = build_tiny_model(seed=0)
        spec = str(save_model(model, tokenizer, tmp_path / "tiny"))
    model, tokenizer = load_model_and_tokenizer(spec, torch_dtype=torch.float32)
    tasks = tmp_path / "tasks.jsonl"
    write_jsonl(tasks, TASKS)
    out = tmp_path / "evaluated.jsonl"
    argv = ["evaluate", "--policy", spec, "--tasks", str(tasks), "--env", countdown_id, "--max-steps", "8"]
    assert hub([*argv, "--max-new-tokens", "12", "--seed", str(SEED), "-o", str(out)]) == 0
    capsys.readouterr()
    evaluated = list(read_trajectories(out))
    rollouts = collect_rollouts(
        countdown_id,
        TASKS,
        LocalGenerator(model, tokenizer),
        tokenizer,
        max_steps=8,
        max_new_tokens=12,
        temperature=0.0,
        seed=SEED,
    )

    def acted(trajectory):
        steps = [(s.tool_call.name, s.tool_call.parameters, s.token_ids) for s in trajectory.steps]
        return trajectory.metadata["prompt_token_ids"], steps

    assert [len(t.steps) for t in evaluated] == [3, 1, 2]
    assert [acted(t) for t in evaluated] == [acted(r.trajectory) for r in rollouts]
