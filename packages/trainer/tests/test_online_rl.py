"""Online agent RL with a tiny random model: token bookkeeping, rollouts, advantages, masking, resume."""

import json
import math

import pytest
import torch
from small_online import small_online_config

from agenttrainer.acting import ChatTokens, GenerationError, LocalGenerator, ServerGenerator, TokenSample
from agenttrainer.algorithms import get_algorithm
from agenttrainer.algorithms.grpo import grpo_loss
from agenttrainer.algorithms.ppo import gae, value_loss
from agenttrainer.algorithms.rft import rejection_advantages
from agenttrainer.algorithms.steps import spread_over_steps
from agenttrainer.config import ConfigError
from agenttrainer.online import OnlineRLTrainer, collect_rollouts
from knowlyrcore import AgentEnv, InfrastructureError, InvalidActionError, TimeStep, register, unregister
from knowlyrcore.testing import require_module

SYSTEM = "You are a test agent."


class Countdown(AgentEnv):
    """Ends after ``metadata.n`` steps (default 3); each step's reward depends on the action text,
    so sampled episodes of one task score differently. With ``metadata.reward_by_seed`` the reward
    is instead the parity of the episode's reset seed: consecutive episodes of a group (seeds
    ``s, s+1, ...``) then score differently whatever the model samples. ``metadata.fail_at`` makes
    step k raise an infrastructure error; an action named ``invalid`` is refused with
    ``InvalidActionError``."""

    domain = "generic"

    def reset(self, *, task=None, seed=None):
        meta = getattr(task, "metadata", {}) or {}
        self.left, self.fail_at, self.done_steps = int(meta.get("n", 3)), meta.get("fail_at"), 0
        self.seed_reward = float(seed % 2) if meta.get("reward_by_seed") and seed is not None else None
        return TimeStep(observation=f"Count down from {self.left}.")

    def step(self, action):
        self.done_steps += 1
        if self.fail_at is not None and self.done_steps == self.fail_at:
            raise InfrastructureError("sandbox container died")
        if action["tool"] == "invalid":
            raise InvalidActionError("tool 'invalid' does not exist")
        self.left -= 1
        text = json.dumps(action["params"], sort_keys=True)
        reward = float(sum(map(ord, text)) % 3 == 0) if self.seed_reward is None else self.seed_reward
        done = self.left <= 0
        return TimeStep(observation=f"{self.left} left", reward=reward, terminated=done, info={"success": reward > 0})

    @property
    def available_tools(self):
        return ["tick", "respond"]


@pytest.fixture(autouse=True)
def countdown_env():
    register("test/countdown", Countdown)
    yield "test/countdown"
    unregister("test/countdown")


def write_tasks(path, tasks):
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return str(path)


class Recording:
    """Wraps a generator and keeps every sample it returned (to compare with what is trained on)."""

    def __init__(self, inner):
        self.inner, self.samples = inner, []

    def generate(self, prompts, **kw):
        out = self.inner.generate(prompts, **kw)
        self.samples.append(out)
        return out

    def weights_updated(self, model=None, path=None):
        self.inner.weights_updated(model, path)


class Scripted:
    """A generator that answers with fixed texts (to exercise the parser on known model outputs)."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.calls = tokenizer, list(texts), 0

    def generate(self, prompts, **kw):
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [end]
        return [TokenSample(ids, [-0.5] * len(ids), "stop") for _ in prompts]

    def weights_updated(self, model=None, path=None):
        pass


def config(tmp_path, tasks_file, **overrides):
    group = {"group_size": 3, "tasks_per_iteration": 2, "num_iterations": 2, "batch_size": 4}
    episode = {"system_prompt": SYSTEM, "max_steps": 4, "max_new_tokens": 6, "max_episode_tokens": 512}
    return small_online_config(tmp_path, tasks_file, **{"env_id": "test/countdown", **group, **episode, **overrides})


# -- chat tokens ------------------------------------------------------------------------------


def test_chat_tokens_extend_a_chat_exactly_as_the_template_renders_it(tokenizer):
    chat = ChatTokens(tokenizer, system_prompt=SYSTEM)
    first = {"role": "user", "content": "Fix the bug."}
    answer = tokenizer('Action: {"name": "tick", "arguments": {}}', add_special_tokens=False)["input_ids"]
    answer = [*answer, tokenizer.convert_tokens_to_ids("<|im_end|>")]
    observation = {"role": "user", "content": "Observation: 2 left"}
    ids = chat.prompt(first) + answer + chat.continuation(answer, observation)
    full = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": SYSTEM},
            first,
            {"role": "assistant", "content": 'Action: {"name": "tick", "arguments": {}}'},
            observation,
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert ids == tokenizer(full, add_special_tokens=False)["input_ids"]


def test_a_cut_answer_is_closed_with_the_end_token_and_tool_results_use_the_tool_turn(tokenizer):
    chat = ChatTokens(tokenizer, system_prompt=SYSTEM)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    cut = tokenizer("half an ans", add_special_tokens=False)["input_ids"]
    extra = chat.continuation(cut, {"role": "tool", "content": "42"})
    assert extra[0] == end
    text = tokenizer.decode(extra)
    assert "<tool_response>\n42\n</tool_response>" in text and text.endswith("<|im_start|>assistant\n")
    assert chat.continuation([*cut, end], {"role": "tool", "content": "42"}) == extra[1:]


# -- rollouts --------------------------------------------------------------------------------


def test_no_prompts_get_no_samples_without_a_model_call_or_a_request(tiny):
    """A model that fails on any use and a server that is not there: no prompts touch neither."""
    _, tokenizer = tiny

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"the model was used ({name})")

    assert LocalGenerator(Untouchable(), tokenizer).generate([], max_new_tokens=5) == []
    assert ServerGenerator("http://127.0.0.1:9/v1", "m", timeout=1).generate([], max_new_tokens=5) == []
    with pytest.raises(GenerationError, match="unreachable"):  # what a request to it does
        ServerGenerator("http://127.0.0.1:9/v1", "m", timeout=1).generate([[5]], max_new_tokens=5)


def test_a_shared_prefix_is_prefilled_once_without_deprecation_warnings(tiny):
    """Prompts sharing >= 16 tokens start from one prefilled KV cache, passed under the keyword this
    transformers takes (``cache`` in 5.x, where ``past_key_values`` warns on every call); the greedy
    answers equal a plain argmax loop over full forward passes."""
    import warnings

    model, tokenizer = tiny
    prefix = list(range(100, 140))
    prompts = [[*prefix, 7, 8, 9], [*prefix, 11]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        samples = LocalGenerator(model, tokenizer, logprobs=False).generate(prompts, max_new_tokens=5, temperature=0.0)
    for prompt, sample in zip(prompts, samples):
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(len(sample.token_ids)):
                ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        assert sample.token_ids == ids[len(prompt) :]


def test_rollouts_keep_the_sampled_ids_and_the_trainer_scores_exactly_those(tiny, tmp_path):
    model, tokenizer = tiny
    torch.manual_seed(0)
    generator = Recording(LocalGenerator(model, tokenizer))
    tasks = [{"id": "a", "description": "count", "metadata": {"n": 3}}, {"id": "b", "metadata": {"n": 2}}]
    rollouts = collect_rollouts(
        "test/countdown",
        tasks,
        generator,
        tokenizer,
        group_size=2,
        system_prompt=SYSTEM,
        max_steps=5,
        max_new_tokens=5,
        max_episode_tokens=1024,
    )
    assert [len(r.step_spans) for r in rollouts] == [3, 3, 2, 2]  # several turns each
    for k, r in enumerate(rollouts):
        sampled_by_generator = []
        for turn in generator.samples:
            live = [i for i, rr in enumerate(rollouts) if len(rr.step_spans) > generator.samples.index(turn)]
            if k in live:
                sampled_by_generator += turn[live.index(k)].token_ids
        example = OnlineRLTrainer.example(r)
        trained = [t for t in example.labels if t != -100]
        assert trained == sampled_by_generator  # token-in / token-out: no re-rendering anywhere
        assert [t for t, s in zip(r.token_ids, r.sampled) if s] == sampled_by_generator
        assert r.trajectory.steps[0].token_ids == r.token_ids[slice(*r.step_spans[0])]
        rebuilt = list(r.trajectory.metadata["prompt_token_ids"])
        for step in r.trajectory.steps:
            rebuilt += step.token_ids + step.metadata["observation_token_ids"]
        assert rebuilt == r.token_ids  # the trajectory file reproduces the sequence
    # sampling-time log-probs equal the training forward's on the same ids (fp32, no autocast)
    trainer_config = config(tmp_path, write_tasks(tmp_path / "t.jsonl", tasks), kl_coef=0.0)
    trainer = OnlineRLTrainer(trainer_config, model=model, tokenizer=tokenizer)
    logps, mask, _ = trainer.forward(trainer.wrapped, [trainer.example(r) for r in rollouts])
    for i, r in enumerate(rollouts):
        sampled = torch.tensor([lp for lp, s in zip(r.logprobs, r.sampled) if s])
        assert torch.allclose(logps[i, : int(mask[i].sum())].float(), sampled, atol=1e-4)


def test_rollouts_report_each_turn_with_the_episodes_still_running(tiny):
    model, tokenizer = tiny
    torch.manual_seed(0)
    tasks = [{"id": "a", "metadata": {"n": 3}}, {"id": "b", "metadata": {"n": 2}}]
    turns = []
    rollouts = collect_rollouts(
        "test/countdown",
        tasks,
        LocalGenerator(model, tokenizer),
        tokenizer,
        group_size=2,
        system_prompt=SYSTEM,
        max_steps=5,
        max_new_tokens=5,
        max_episode_tokens=1024,
        on_turn=lambda turn, live: turns.append((turn, live)),
    )
    assert [len(r.step_spans) for r in rollouts] == [3, 3, 2, 2]
    assert turns == [(1, 4), (2, 2), (3, 0)]  # b's episodes end after two turns, a's after three


def test_malformed_calls_become_error_observations_and_format_errors(tokenizer, tmp_path):
    texts = ["<tool_call>\n{not json\n</tool_call>", '{"name": "invalid", "arguments": {}}', "All done."]
    rollouts = collect_rollouts(
        "test/countdown",
        [{"metadata": {"n": 3}}],
        Scripted(tokenizer, texts),
        tokenizer,
        system_prompt=SYSTEM,
        max_steps=5,
        max_new_tokens=8,
    )
    (r,) = rollouts
    # the refused call does not count down: three more answers end the episode
    assert r.valid and r.format_errors == [True, True, False, False] and r.finish == "terminated"
    steps = r.trajectory.steps
    assert len(steps) == 4 and steps[0].metadata["format_error"].startswith("<tool_call> block is not valid JSON")
    assert steps[1].metadata["format_error"] is True  # the environment refused the call
    assert steps[1].observation.error == "tool 'invalid' does not exist"
    assert "Error: tool 'invalid' does not exist" in tokenizer.decode(steps[1].metadata["observation_token_ids"])


def test_token_budget_and_turn_budget_end_episodes(tiny):
    model, tokenizer = tiny
    generator = LocalGenerator(model, tokenizer)
    (r,) = collect_rollouts(
        "test/countdown",
        [{"metadata": {"n": 50}}],
        generator,
        tokenizer,
        max_steps=2,
        max_new_tokens=4,
        max_episode_tokens=4000,
    )
    assert r.finish == "truncated" and len(r.step_spans) == 2
    assert r.trajectory.outcome.exit_status == "max_steps"
    # a task's own smaller step budget wins, as in evaluation
    (r,) = collect_rollouts(
        "test/countdown",
        [{"metadata": {"n": 50}, "max_steps": 3}],
        generator,
        tokenizer,
        max_steps=8,
        max_new_tokens=4,
        max_episode_tokens=4000,
    )
    assert r.finish == "truncated" and len(r.step_spans) == 3
    (r,) = collect_rollouts(
        "test/countdown",
        [{"metadata": {"n": 50}}],
        generator,
        tokenizer,
        max_steps=50,
        max_new_tokens=4,
        max_episode_tokens=300,
    )
    # it stops before an observation plus another answer would overflow, and never exceeds the budget
    assert r.finish == "token_budget" and len(r.token_ids) <= 300 and len(r.step_spans) > 1
    assert r.step_spans[-1][1] == len(r.token_ids)
    with pytest.raises(ValueError, match="the first prompt has 2.. tokens; max_episode_tokens=100"):
        collect_rollouts(
            "test/countdown", [{"id": "long"}], generator, tokenizer, max_new_tokens=4, max_episode_tokens=100
        )


def test_infrastructure_failures_are_masked_not_scored(tiny, tmp_path):
    model, tokenizer = tiny
    tasks = [{"id": "ok", "metadata": {"n": 2}}, {"id": "broken", "metadata": {"n": 3, "fail_at": 2}}]
    trainer = OnlineRLTrainer(
        config(tmp_path, write_tasks(tmp_path / "t.jsonl", tasks), num_iterations=1), model=model, tokenizer=tokenizer
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = trainer.train()
    history = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert history["rollout/masked_episodes"] == 3 and result["masked_episodes"] == 3
    assert history["rollout/episodes"] == 6
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())  # the valid half still trained
    rollouts = trainer.rollout(0)
    broken = [r for r in rollouts if r.task.id == "broken"]
    assert all(r.infra_error.startswith("InfrastructureError: sandbox container died") for r in broken)
    trainer.score(rollouts)
    assert trainer.token_advantages(rollouts).__len__() == 3  # masked rollouts are not in the update


def test_an_endpoint_that_is_down_masks_every_episode(tiny, tmp_path):
    model, tokenizer = tiny
    dead = ServerGenerator("http://127.0.0.1:9/v1", "m", timeout=2)
    with pytest.raises(GenerationError):
        dead.generate([[1, 2, 3]], max_new_tokens=2)
    tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {"n": 2}}])
    trainer = OnlineRLTrainer(
        config(tmp_path, tasks_file, num_iterations=1), model=model, tokenizer=tokenizer, generator=dead
    )
    result = trainer.train()
    assert result["masked_episodes"] == 6 and result["optimizer_steps"] == 0


# -- advantages and losses against hand-derived numbers ------------------------------------------


def test_group_baselines_by_hand():
    def baseline(name, rewards, valid=None):
        return get_algorithm(name).advantages(rewards, [None] * len(rewards), valid)

    rewards = [1.0, 0.0, 0.0, 1.0]
    assert baseline("grpo", rewards) == pytest.approx([0.86588, -0.86588, -0.86588, 0.86588], abs=1e-5)
    assert baseline("dr_grpo", rewards) == [0.5, -0.5, -0.5, 0.5]
    assert baseline("rloo", rewards) == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # a masked member is left out of the statistics and gets 0
    assert baseline("dr_grpo", [1.0, 0.0, 5.0], [True, True, False]) == [0.5, -0.5, 0.0]
    assert baseline("grpo", [1.0, 0.0], [True, False]) == [0.0, 0.0]


def test_step_spreading_keeps_the_sign_by_hand():
    assert spread_over_steps(2.0, [0.9, 0.3]) == pytest.approx([2.857143, 1.142857])
    assert spread_over_steps(-2.0, [0.9, 0.3]) == pytest.approx([-0.8, -3.2])
    assert spread_over_steps(-1.0, [-3.0, 7.0]) == pytest.approx([-1.1 / 0.6, -0.1 / 0.6])  # clamped to [0, 1]
    for a in (1.5, -1.5):
        spread = spread_over_steps(a, [0.0, 0.2, 1.0])
        assert all(math.copysign(1, x) == math.copysign(1, a) for x in spread)
        assert sum(spread) / 3 == pytest.approx(a)


def test_gae_and_value_loss_by_hand():
    assert gae(torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.25]), gamma=1.0, lam=0.5).tolist() == [0.125, 0.75]
    # gamma 0.5, lambda 1: A_1 = 2 - 1 = 1, A_0 = (0 + 0.5 * 1 - 0) + 0.5 * 1 * 1 = 1.0
    assert gae(torch.tensor([0.0, 2.0]), torch.tensor([0.0, 1.0]), gamma=0.5, lam=1.0).tolist() == [1.0, 1.0]
    loss = value_loss(
        torch.tensor([[1.0]]), torch.tensor([[0.5]]), torch.tensor([[0.0]]), torch.ones(1, 1), clip_range=0.2
    )
    assert float(loss) == pytest.approx(0.5)
    # clipping wins when it is further from the return: V = 0, V_old = 1, R = 1.5 -> clipped 0.8
    loss = value_loss(
        torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.tensor([[1.5]]), torch.ones(1, 1), clip_range=0.2
    )
    assert float(loss) == pytest.approx(0.5 * 1.5**2)


def test_loss_normalisations_by_hand():
    logps = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    kw = dict(clip_eps=0.2, kl_coef=0.0)
    seq, _ = grpo_loss(logps, logps, None, adv, mask, normalization="sequence", **kw)
    assert float(seq) == pytest.approx((-1.0 + 2.0) / 2)  # each sequence's token mean, averaged
    const, _ = grpo_loss(logps, logps, None, adv, mask, normalization="constant", max_tokens=4, **kw)
    assert float(const) == pytest.approx((-3 / 4 + 2 / 4) / 2)  # token sums over a fixed budget (Dr. GRPO)
    tok, _ = grpo_loss(logps, logps, None, adv, mask, normalization="token", **kw)
    assert float(tok) == pytest.approx((-3 + 2) / 4)  # every token counts once (PPO)


def test_ppo_token_rewards_and_update(tiny, tmp_path):
    model, tokenizer = tiny
    tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {"n": 2}}])
    shaping = {"algorithm": "ppo", "process_reward_coef": 0.5, "format_penalty": 0.25}
    one_group = {"num_iterations": 1, "group_size": 2, "tasks_per_iteration": 1}
    trainer = OnlineRLTrainer(config(tmp_path, tasks_file, **shaping, **one_group), model=model, tokenizer=tokenizer)
    rollouts = trainer.rollout(0)
    r = rollouts[0]
    r.step_rewards, r.format_errors, r.env_reward = [1.0, 0.0], [False, True], 1.0
    rewards = trainer.token_rewards(r)
    ends = [e - r.step_spans[0][0] for _, e in r.step_spans]
    lengths = [e - s for s, e in r.step_spans]
    assert len(rewards) == sum(lengths)
    assert rewards[lengths[0] - 1] == pytest.approx(0.5 * 1.0 / 2)  # step 1: its process reward share
    assert rewards[-1] == pytest.approx(0.5 * 0.0 / 2 - 0.25 + 1.0)  # step 2: penalty + outcome
    assert sum(rewards) == pytest.approx(0.25 - 0.25 + 1.0) and ends
    result = trainer.train()
    assert result["optimizer_steps"] == 1
    assert trainer.value_head.weight.abs().sum() > 0  # the value head learned from the value loss
    assert (tmp_path / "out" / "final" / "value_head.pt").is_file()
    log = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert "train/value_loss" in log and log["train/logprob_mismatch"] < 1e-3


@pytest.mark.parametrize("algorithm", ["grpo", "dr_grpo", "rloo", "gspo"])
def test_each_algorithm_updates_the_policy(tiny, tmp_path, algorithm):
    model, tokenizer = tiny
    tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {"n": 2}}, {"metadata": {"n": 3}}])
    trainer = OnlineRLTrainer(
        config(tmp_path, tasks_file, algorithm=algorithm, num_iterations=1, kl_coef=0.1),
        model=model,
        tokenizer=tokenizer,
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = trainer.train()
    assert result["optimizer_steps"] == 1
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    log = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    for key in (
        "rollout/reward_mean",
        "rollout/success_rate",
        "train/kl",
        "train/clip_ratio",
        "rollout/entropy",
        "train/logprob_mismatch",
        "rollout/masked_episodes",
        "rollout/tokens_per_second",
        "train/tokens_per_second",
    ):
        assert key in log, key
    assert (tmp_path / "out" / "rollouts" / "iteration-00001.jsonl").is_file()


def test_lora_reference_is_the_adapter_disabled_base(tiny, tmp_path):
    require_module("peft", "LoRA needs peft (knowlyr-trainer[peft], in [dev])")
    model, tokenizer = tiny
    tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {"n": 2}}])
    trainer = OnlineRLTrainer(
        config(tmp_path, tasks_file, use_lora=True, lora_preset="minimal", kl_coef=0.1, num_iterations=1),
        model=model,
        tokenizer=tokenizer,
    )
    assert trainer.reference is None  # no second copy of the weights
    rollouts = trainer.rollout(0)
    examples = [trainer.example(r) for r in rollouts]
    ref = trainer.reference_logps(examples)
    current, _ = trainer.old_logps_and_values(examples)
    for a, b in zip(ref, current):  # LoRA's B starts at zero: base and policy agree before training
        assert torch.allclose(a, b, atol=1e-5)
    trainer.train()
    ref_after = trainer.reference_logps(examples)
    for a, b in zip(ref, ref_after):  # training moved the adapters, not the reference
        assert torch.allclose(a, b, atol=1e-5)


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tmp_path):
    from agenttrainer.models import build_tiny_model

    tasks = [{"id": f"t{i}", "metadata": {"n": 2 + i % 2}} for i in range(3)]
    tasks_file = write_tasks(tmp_path / "t.jsonl", tasks)

    model, tokenizer = build_tiny_model(seed=0)
    straight = OnlineRLTrainer(
        config(tmp_path, tasks_file, output_dir=str(tmp_path / "a"), num_iterations=3, save_steps=1),
        model=model,
        tokenizer=tokenizer,
    )
    full = straight.train()
    model2, tokenizer2 = build_tiny_model(seed=0)
    first = OnlineRLTrainer(
        config(tmp_path, tasks_file, output_dir=str(tmp_path / "b"), num_iterations=3, save_steps=1),
        model=model2,
        tokenizer=tokenizer2,
    )
    partial = first.train(stop_after=2)
    assert partial["iterations"] == 2
    # a checkpoint is also a model directory: it loads and answers like the policy at that iteration
    from agenttrainer.models import load_model_and_tokenizer

    saved, _ = load_model_and_tokenizer(str(sorted((tmp_path / "b").glob("checkpoint-*"))[-1]))
    probe = torch.tensor([[1, 2, 3, 4]])
    assert torch.allclose(saved(probe).logits, model2(probe).logits, atol=1e-5)
    model3, tokenizer3 = build_tiny_model(seed=0)
    resumed = OnlineRLTrainer(
        config(
            tmp_path,
            tasks_file,
            output_dir=str(tmp_path / "b"),
            num_iterations=3,
            save_steps=1,
            resume_from_checkpoint="latest",
        ),
        model=model3,
        tokenizer=tokenizer3,
    )
    rest = resumed.train()
    assert rest["iterations"] == 3 and rest["reward_curve"] == full["reward_curve"]
    for (name, p), q in zip(model.named_parameters(), model3.parameters()):
        assert torch.equal(p, q), name


def test_config_errors_are_clear(tmp_path):
    tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {}}])
    with pytest.raises(ConfigError, match="group_size must be >= 2"):
        config(tmp_path, tasks_file, group_size=1)
    with pytest.raises(ConfigError, match="algorithm must be one of"):
        config(tmp_path, tasks_file, algorithm="a2c")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"metadata": {}}\n{"id": 3, "metadata": "x"}\n')
    from agenttrainer.data import DataError
    from agenttrainer.online import load_tasks

    with pytest.raises(DataError, match=r"bad.jsonl:2: (id|metadata): "):
        load_tasks(bad)


class Constant(Countdown):
    """Every episode scores the same: groups carry no policy-gradient signal."""

    def step(self, action):
        self.left -= 1
        return TimeStep(observation="ok", reward=1.0, terminated=self.left <= 0, info={"success": True})


def test_rejection_advantages_by_hand():
    assert rejection_advantages([True, False, None, True], [True, True, True, False]) == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="valid flags"):
        rejection_advantages([True], [True, False])


def test_rft_update_is_supervised_fine_tuning_on_the_successful_samples(tiny, tmp_path):
    """One rft step with SGD(lr=1) moves every weight by minus the gradient of the token-mean NLL
    of the successful episodes' sampled tokens; failed episodes contribute nothing."""
    model, tokenizer = tiny
    tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {"n": 2, "reward_by_seed": True}}])
    rft = {"algorithm": "rft", "kl_coef": 0.0, "max_grad_norm": 0.0}
    one_group = {"num_iterations": 1, "group_size": 4, "tasks_per_iteration": 1}
    trainer = OnlineRLTrainer(config(tmp_path, tasks_file, **rft, **one_group), model=model, tokenizer=tokenizer)
    rollouts = trainer.rollout(0)
    trainer.score(rollouts)
    successes = [r for r in rollouts if r.success]
    assert 0 < len(successes) < len(rollouts)  # reward_by_seed: the odd seeds of the group succeed
    advantages = trainer.token_advantages(rollouts)
    assert [set(a) for a in advantages] == [{1.0} if r.success else {0.0} for r in rollouts]

    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad()
    logps, mask, _ = trainer.forward(trainer.wrapped, [trainer.example(r) for r in successes])
    (-(logps * mask).sum() / mask.sum()).backward()
    expected = [-p.grad.detach().clone() for p in params]
    model.zero_grad()
    before = [p.detach().clone() for p in params]
    optimizer = torch.optim.SGD(params, lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    metrics = trainer.update(rollouts, optimizer, scheduler, {"optimizer_steps": 0})
    assert metrics["train/episodes"] == len(successes)
    for b, p, e in zip(before, params, expected):
        torch.testing.assert_close(p.detach() - b, e, rtol=1e-4, atol=1e-6)


def test_rft_refuses_dynamic_sampling_and_bad_loss_options_are_named(tmp_path):
    tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {"n": 2}}])
    with pytest.raises(ConfigError, match="rft does not compare"):
        config(tmp_path, tasks_file, algorithm="rft", dynamic_sampling=True)
    with pytest.raises(ConfigError, match="loss_normalization"):
        config(tmp_path, tasks_file, loss_normalization="mean")
    with pytest.raises(ConfigError, match="clip_eps_high"):
        config(tmp_path, tasks_file, clip_eps=0.2, clip_eps_high=0.1)


def test_groups_that_all_scored_the_same_are_left_out_of_the_update(tiny, tmp_path):
    model, tokenizer = tiny
    register("test/constant", Constant)
    try:
        tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {"n": 2}}])
        trainer = OnlineRLTrainer(
            config(tmp_path, tasks_file, env_id="test/constant", num_iterations=1), model=model, tokenizer=tokenizer
        )
        result = trainer.train()
        log = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
        assert result["optimizer_steps"] == 0 and log["train/uniform_group_episodes"] == 6
        assert log["rollout/reward_mean"] == 2.0 and log["rollout/success_rate"] == 1.0
    finally:
        unregister("test/constant")


def test_cli_runs_online_rl(tiny_path, tmp_path):
    from click.testing import CliRunner

    from agenttrainer.cli import cli

    tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {"n": 2, "system_prompt": SYSTEM}}])
    args = [
        *["grpo", "--online", "--env", "test/countdown", "--tasks", tasks_file, "--model", tiny_path],
        *["--output-dir", str(tmp_path / "out"), "--num-iterations", "2", "--group-size", "2"],
        *["--tasks-per-iteration", "1", "--max-new-tokens", "4", "--max-steps", "3", "--no-bf16"],
        *["--process-reward", "none", "--learning-rate", "1e-3", "--no-progress-bar"],
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["iterations"] == 2 and len(summary["reward_curve"]) == 2
    assert (tmp_path / "out" / "final" / "model.safetensors").is_file()
    first = json.loads((tmp_path / "out" / "rollouts" / "iteration-00001.jsonl").read_text().splitlines()[0])
    assert first["steps"][0]["token_ids"] and len(first["steps"][0]["logprobs"]) == len(first["steps"][0]["token_ids"])
    # online-only options without --online, and --online without an environment, are refused clearly
    refused = CliRunner().invoke(cli, ["grpo", "--train-file", tasks_file, "--env", "test/countdown"])
    assert refused.exit_code == 2 and "add --online" in refused.output
    refused = CliRunner().invoke(cli, ["grpo", "--online", "--tasks", tasks_file])
    assert refused.exit_code == 2 and "--online needs --env" in refused.output
    missing = CliRunner().invoke(
        cli, ["grpo", "--online", "--env", "test/countdown", "--tasks", str(tmp_path / "no.jsonl")]
    )
    assert missing.exit_code == 2 and "no.jsonl" in missing.output


@pytest.mark.integration
@pytest.mark.parametrize("use_lora", [False, True], ids=["full", "lora"])
def test_online_rl_through_a_real_server_pushes_the_new_weights(tiny_path, tmp_path, use_lora, monkeypatch):
    """Rollouts sampled by `knowlyr-trainer serve` (token ids + log-probs over HTTP); after the
    update the server answers with the trained weights (the whole model, or just the adapter).
    The server requires an API key, which the trainer reads from the environment."""
    from agenttrainer.serving.background import ServerProcess

    if use_lora:
        require_module("peft", "LoRA needs peft (knowlyr-trainer[peft], in [dev])")

    # Rewards by episode seed: every group of 3 holds both rewards, so the update has a signal
    # whatever the server samples (a group of equal rewards is skipped and takes no step).
    tasks = [{"metadata": {"n": 2, "reward_by_seed": True}}, {"metadata": {"n": 3, "reward_by_seed": True}}]
    tasks_file = write_tasks(tmp_path / "t.jsonl", tasks)
    monkeypatch.setenv("KNOWLYR_GENERATION_API_KEY", "s3cret-key")
    with ServerProcess(tiny_path, "--allow-weight-updates", "--api-key", "s3cret-key", "--seed", "0") as server:
        c = config(
            tmp_path,
            tasks_file,
            model_name_or_path=tiny_path,
            generation_url=server.base_url,
            served_model_name=server.model_name,
            num_iterations=1,
            kl_coef=0.1,
            use_lora=use_lora,
            lora_preset="minimal",
            learning_rate=5e-2 if use_lora else 1e-2,
        )
        trainer = OnlineRLTrainer(c)
        assert isinstance(trainer.generator, ServerGenerator)
        rollouts = trainer.rollout(0)
        assert all(r.valid for r in rollouts) and sum(len(r.step_spans) for r in rollouts) >= 5
        for group in (rollouts[:3], rollouts[3:]):  # the signal the update below depends on
            assert len({r.env_reward > 0 for r in group}) == 2, [r.env_reward for r in group]
        # the server's log-probs are the training model's on the same ids
        logps, mask, _ = trainer.forward(trainer.wrapped, [trainer.example(r) for r in rollouts])
        for i, r in enumerate(rollouts):
            sampled = torch.tensor([lp for lp, s in zip(r.logprobs, r.sampled) if s])
            assert torch.allclose(logps[i, : int(mask[i].sum())].float(), sampled, atol=1e-4)
        result = trainer.train()
        assert result["masked_episodes"] == 0  # no episode was lost to the server (which would also skip the step)
        assert result["optimizer_steps"] == 1
        prompt = [trainer.tokenizer("Count down from 3.", add_special_tokens=False)["input_ids"]]
        served = trainer.generator.generate(prompt, max_new_tokens=6, temperature=0.0)[0]
        local = LocalGenerator(trainer.model, trainer.tokenizer).generate(prompt, max_new_tokens=6, temperature=0.0)[0]
        assert served.token_ids == local.token_ids
        assert served.logprobs == pytest.approx(local.logprobs, abs=1e-4)
        from agenttrainer.models import load_model_and_tokenizer

        base_model, _ = load_model_and_tokenizer(tiny_path)
        base = LocalGenerator(base_model, trainer.tokenizer).generate(prompt, max_new_tokens=6, temperature=0.0)[0]
        assert max(abs(a - b) for a, b in zip(base.logprobs, local.logprobs)) > 1e-3  # training changed the answer
        pushed = tmp_path / "out" / "push" / "iteration-00001"
        assert (pushed / ("adapter_config.json" if use_lora else "model.safetensors")).is_file()


def test_security_a_non_finite_process_reward_stops_before_any_update(tiny, tmp_path):
    """A NaN from the environment or the process reward never reaches the weights."""
    from agenttrainer.data import DataError

    model, tokenizer = tiny
    tasks_file = write_tasks(tmp_path / "t.jsonl", [{"metadata": {"n": 2}}])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = OnlineRLTrainer(
        config(tmp_path, tasks_file, num_iterations=1, group_size=2, tasks_per_iteration=1, process_reward_coef=0.5),
        model=model,
        tokenizer=tokenizer,
        process_reward=lambda trajectory: [float("nan")] * len(trajectory.steps),
    )
    with pytest.raises(DataError, match="episode reward is not finite"):
        trainer.train()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert not (tmp_path / "out" / "final").exists()
