"""The acting engine (``agenttrainer.acting.engine``): KV caches kept across turns give the answers
a full re-prefill gives, and compute each prompt token once.

Reference: ``LocalGenerator(reuse_cache=False)``, which prefills every prompt again on every call.
Multi-turn runs extend each prompt by its answer and new "observation" tokens, as acting does; a
random tiny Llama with wide weights makes greedy answers long and prompt-dependent, and end tokens
picked from its own answers make rows end at different steps. The integration test plays retail
episodes with SmolLM2-135M through both paths and compares every action.

pytest packages/trainer/tests/test_acting_engine.py
pytest packages/trainer/tests/test_acting_engine.py -m integration
"""

from __future__ import annotations

import random

import pytest
import torch

from agenttrainer.acting.engine import ActingEngine
from agenttrainer.acting.generators import LocalGenerator

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one torch thread per test


@pytest.fixture(scope="module")
def model_and_tokenizer():
    from agenttrainer.models.tiny import build_tiny_model

    from .test_token_policy import wide_random_model  # long, prompt-dependent greedy answers; 4 query / 2 kv heads

    _, tokenizer = build_tiny_model()
    return wide_random_model(tokenizer).eval(), tokenizer


def _prompts(n: int, seed: int, shared: int = 40) -> list[list[int]]:
    rng = random.Random(seed)
    system = [rng.randrange(1000, 9000) for _ in range(shared)]
    return [system + [rng.randrange(1000, 9000) for _ in range(rng.randrange(2, 30))] for _ in range(n)]


def _generators(model, tokenizer, **engine):
    cached = LocalGenerator(model, tokenizer, **engine)
    reference = LocalGenerator(model, tokenizer, reuse_cache=False)
    return cached, reference


def _with_end_tokens(generator: LocalGenerator, end_ids: list[int]) -> LocalGenerator:
    """End an answer at any of ``end_ids`` (tokens the random model does emit), in both paths."""
    generator.end_token_ids = list(end_ids)
    if generator.engine is not None:
        generator.engine.end_token_ids = list(end_ids)
    return generator


def _assert_same(cached, reference, tol=1e-4):
    assert [s.token_ids for s in cached] == [s.token_ids for s in reference]
    assert [s.finish_reason for s in cached] == [s.finish_reason for s in reference]
    for a, b in zip(cached, reference):
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) < tol


def _play(cached, reference, prompts, turns, rng, *, new_tokens=12, between=None):
    """Greedy turns through both generators; prompts grow by answer + observation tokens."""
    for turn in range(turns):
        got = cached.generate(prompts, max_new_tokens=new_tokens, temperature=0.0)
        want = reference.generate(prompts, max_new_tokens=new_tokens, temperature=0.0)
        _assert_same(got, want)
        prompts = [
            p + s.token_ids + [rng.randrange(1000, 9000) for _ in range(rng.randrange(1, 25))]
            for p, s in zip(prompts, want)
        ]
        if between:
            prompts = between(turn, prompts)
    return prompts


def test_multi_turn_greedy_equals_full_reprefill(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    cached, reference = _generators(model, tokenizer)
    prompts = _prompts(6, seed=1)

    def end_one_episode(turn, prompts):
        return prompts[1:] if turn == 1 else prompts  # an episode ended: its row is freed

    _play(cached, reference, prompts, 4, random.Random(1), between=end_one_episode)
    stats = cached.stats
    assert stats["calls"] == 4
    # each turn after the first prefills only its new tokens: the history is reused
    assert stats["reused_tokens"] > stats["prefilled_tokens"]
    assert stats["mismatched_rows"] == stats["over_budget_rows"] == 0


def test_rows_that_end_leave_the_decode_batch(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    cached, reference = _generators(model, tokenizer)
    prompts = _prompts(8, seed=2)
    probe = reference.generate(prompts, max_new_tokens=16, temperature=0.0)
    # end tokens: tokens some answers produce early and others late (or never)
    end_ids = sorted({s.token_ids[k] for s in probe[:4] for k in (2, 5)})
    _with_end_tokens(cached, end_ids)
    _with_end_tokens(reference, end_ids)
    got = cached.generate(prompts, max_new_tokens=16, temperature=0.0)
    want = reference.generate(prompts, max_new_tokens=16, temperature=0.0)
    _assert_same(got, want)
    lengths = [len(s.token_ids) for s in want]
    assert len(set(lengths)) > 1 and {s.finish_reason for s in want} >= {"stop"}
    stats = cached.stats
    # a row is decoded only while it has not ended: fewer row-steps than rows x steps
    assert stats["decoded_row_steps"] < len(prompts) * stats["decode_steps"]
    assert stats["decoded_row_steps"] >= sum(n - 1 for n in lengths)
    _play(
        cached,
        reference,
        [p + s.token_ids + [1234, 4321] for p, s in zip(prompts, want)],
        2,
        random.Random(2),
        new_tokens=16,
    )


def test_identical_prompts_fork_one_prefill(model_and_tokenizer):
    """A GRPO group: G copies of one prompt are prefilled once; sampled answers differ per row."""
    model, tokenizer = model_and_tokenizer
    cached, reference = _generators(model, tokenizer)
    prompt = _prompts(1, seed=3)[0]
    group = [prompt] * 4
    _assert_same(
        cached.generate(group, max_new_tokens=8, temperature=0.0),
        reference.generate(group, max_new_tokens=8, temperature=0.0),
    )
    assert cached.stats["prefilled_tokens"] == len(prompt) - 1 + len(
        group
    )  # all but the last token once, then that token per row
    torch.manual_seed(0)
    sampled = cached.generate(group, max_new_tokens=8, temperature=1.0)
    assert len({tuple(s.token_ids) for s in sampled}) > 1


def test_prefilled_tokens_count_the_shared_prefix_once(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    cached, _ = _generators(model, tokenizer)
    prompts = _prompts(5, seed=4, shared=40)
    cached.generate(prompts, max_new_tokens=4, temperature=0.0)
    shared = 40
    assert cached.stats["prefilled_tokens"] == shared + sum(len(p) - shared for p in prompts)


def test_a_rewritten_history_is_detected_and_recomputed(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    cached, reference = _generators(model, tokenizer)

    def rewrite(turn, prompts):
        if turn == 0:
            prompts[2] = [*prompts[2][:45], 77, 78, *prompts[2][47:]]  # turn 2 changes two tokens of its history
        return prompts

    _play(cached, reference, _prompts(4, seed=5), 3, random.Random(5), between=rewrite)
    assert cached.stats["mismatched_rows"] == 1
    assert cached.stats["recomputed_tokens"] > 0


def test_a_template_that_drops_past_reasoning_is_recomputed(model_and_tokenizer):
    """A chat template that keeps ``<think>`` only in the last assistant turn re-renders history
    when a turn is added: the engine reuses what still matches and prefills the rest."""
    model, tokenizer = model_and_tokenizer
    template = (
        "{% set last = namespace(i=-1) %}{% for m in messages %}{% if m.role == 'assistant' %}"
        "{% set last.i = loop.index0 %}{% endif %}{% endfor %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' and loop.index0 != last.i %}{{ m.content.split('</think>')[-1] }}"
        "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    system = {"role": "system", "content": "You are a careful assistant. " * 4}

    def ids(chat):
        text = tokenizer.apply_chat_template(chat, chat_template=template, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    chat = [
        system,
        {"role": "user", "content": "Count the files."},
        {"role": "assistant", "content": "<think>ls first, then wc</think>Action: ls"},
        {"role": "user", "content": "a b c"},
    ]
    later = [*chat, {"role": "assistant", "content": "<think>three</think>3"}, {"role": "user", "content": "Thanks."}]
    first, second = ids(chat), ids(later)
    assert second[: len(first)] != first  # the template rewrote an earlier turn
    cached, reference = _generators(model, tokenizer)
    for prompts in ([first, [*first[:-3], 900, 901, 902]], [second, [*first[:-3], 900, 901, 902, 903]]):
        _assert_same(
            cached.generate(prompts, max_new_tokens=6, temperature=0.0),
            reference.generate(prompts, max_new_tokens=6, temperature=0.0),
        )
    assert cached.stats["mismatched_rows"] == 1
    assert cached.stats["reused_tokens"] > 0


def test_over_the_byte_budget_rows_are_reprefilled_and_counted(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    cached, reference = _generators(model, tokenizer, cache_bytes=1)  # room for one row only
    _play(cached, reference, _prompts(4, seed=6), 3, random.Random(6))
    assert cached.stats["over_budget_rows"] == 3 * 3


def test_packing_holes_keeps_the_answers(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    cached, reference = _generators(model, tokenizer)
    engine = cached.engine

    def pack(turn, prompts):
        before = engine.store.width
        engine.store.pack()
        assert engine.store.width <= before
        assert not engine.store.mask[:, engine.store.width :].any()
        return prompts

    _play(cached, reference, _prompts(5, seed=7), 4, random.Random(7), between=pack)


def test_sampled_logprobs_are_the_models_own(model_and_tokenizer):
    """At temperature 1 the log-prob of each sampled token equals a fresh forward of prompt + answer."""
    model, tokenizer = model_and_tokenizer
    cached, _ = _generators(model, tokenizer)
    prompts = _prompts(3, seed=8)
    torch.manual_seed(1)
    first = cached.generate(prompts, max_new_tokens=6, temperature=1.0)
    prompts = [p + s.token_ids + [555, 556] for p, s in zip(prompts, first)]
    second = cached.generate(prompts, max_new_tokens=6, temperature=1.0, top_p=0.9)
    for prompt, sample in zip(prompts, second):
        ids = torch.tensor([prompt + sample.token_ids])
        with torch.no_grad():
            logps = model(ids).logits[0].log_softmax(-1)
        expected = [float(logps[len(prompt) - 1 + k, t]) for k, t in enumerate(sample.token_ids)]
        assert max(abs(a - b) for a, b in zip(sample.logprobs, expected)) < 1e-4


def test_weights_updated_drops_the_cache(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    cached = LocalGenerator(model, tokenizer)
    prompts = _prompts(2, seed=9)
    cached.generate(prompts, max_new_tokens=3, temperature=0.0)
    assert cached.engine.store is not None
    cached.weights_updated()
    assert cached.engine.store is None


def test_engine_refuses_an_empty_prompt(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    engine = ActingEngine(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([[1, 2], []], max_new_tokens=2, temperature=0.0, top_p=1.0)
    assert engine.generate([], max_new_tokens=2, temperature=0.0, top_p=1.0) == []


@pytest.mark.integration
@pytest.mark.long  # minutes of SmolLM2 generation twice over (cached and re-prefilled): the long tier
def test_smollm2_retail_episodes_act_the_same_with_the_cache():
    """SmolLM2-135M, fp32, greedy: retail test episodes through the local policy give the same
    action at every step with the acting engine as with a full re-prefill each turn."""
    from agentsandbox.suites import get_suite
    from agenttrainer.acting import TokenPolicy
    from trajectoryhub.evaluate import evaluate_policy

    torch.set_num_threads(2)
    suite = get_suite("retail")
    tasks = suite.generate("test", 6, 11)
    actions = {}
    for reuse in (True, False):
        policy = TokenPolicy.from_pretrained(
            "smollm2-135m", system_prompt=suite.system_prompt, max_new_tokens=48, temperature=0.0, reuse_cache=reuse
        )
        _, runs = evaluate_policy(
            policy,
            tasks,
            env=suite.env_id,
            name="x",
            split="test",
            max_steps=6,
            env_kwargs=suite.env_kwargs,
            batch_size=len(tasks),
            model_name="x",
            progress=False,
        )
        actions[reuse] = [[(s.tool_call.name, s.tool_call.parameters) for s in r.steps] for r in runs]
        if reuse:
            stats = policy.generator.stats
    assert actions[True] == actions[False]
    assert stats["reused_tokens"] > 0  # the system turn, prefilled once


@pytest.mark.integration
@pytest.mark.long  # minutes of SmolLM2 generation twice over (cached and re-prefilled): the long tier
def test_smollm2_multi_turn_chats_equal_full_reprefill():
    """SmolLM2-135M, fp32, greedy, token-in/token-out as online RL acts (``ChatTokens``): four turns
    of four chats, each turn's prompt the last one + the answer + a tool observation; every answer
    (ids and log-probs) equals a full re-prefill's, and the history is reused, not prefilled."""
    from agenttrainer.acting.chat import ChatTokens
    from agenttrainer.models import load_model_and_tokenizer

    torch.set_num_threads(2)
    model, tokenizer = load_model_and_tokenizer("smollm2-135m")
    cached, reference = _generators(model.eval(), tokenizer)
    chat = ChatTokens(tokenizer, system_prompt="You are a retail support agent. Use the tools to help the customer.")
    requests = ["Where is my order #W1?", "Cancel order #W2 please.", "What is my address?", "Return the lamp."]
    prompts = [chat.prompt({"role": "user", "content": text}) for text in requests]
    for turn in range(4):
        got = cached.generate(prompts, max_new_tokens=24, temperature=0.0)
        want = reference.generate(prompts, max_new_tokens=24, temperature=0.0)
        _assert_same(got, want)
        observation = {"role": "user", "content": f"Observation: status shipped, turn {turn}, items 3"}
        prompts = [p + s.token_ids + chat.continuation(s.token_ids, observation) for p, s in zip(prompts, want)]
    stats = cached.stats
    assert stats["mismatched_rows"] == 0
    assert stats["reused_tokens"] > 2 * stats["prefilled_tokens"]
