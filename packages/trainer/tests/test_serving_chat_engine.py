"""The chat endpoint generates through the acting engine, the one every local policy acts with.

In process (Starlette's ``TestClient``, no server process), on a random tiny Llama with wide
weights, so greedy answers are long and depend on every prompt token. References: the same
request answered by transformers' ``model.generate`` (``AgentInference(reuse_cache=False)``, the
endpoint's path before), and a fresh forward pass over prompt + answer for the log-probs.

pytest packages/trainer/tests/test_serving_chat_engine.py
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from starlette.testclient import TestClient

from agenttrainer.acting.engine import ActingEngine
from agenttrainer.acting.inference import AgentInference
from agenttrainer.models import save_model
from agenttrainer.serving.app import create_app
from knowlyrcore.tool_parsing import parse_tool_calls

from .test_token_policy import WEATHER, wide_random_model

MODEL = "wide-random"
SYSTEM = "You are a careful judge. Score the agent's step against the rubric and answer with JSON only."


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one torch thread per test


@pytest.fixture
def model(tokenizer):
    return wide_random_model(tokenizer).eval()


@pytest.fixture
def served(model, tokenizer):
    """(client, the served AgentInference) with weight updates on; answers of 16 tokens by default."""
    inference = AgentInference(model, tokenizer, max_new_tokens=16)
    with TestClient(create_app(inference, MODEL, default_max_tokens=16, allow_weight_updates=True)) as client:
        yield client, inference


def chat(client, messages, **fields):
    response = client.post("/v1/chat/completions", json={"model": MODEL, "messages": messages, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def user(text, system=SYSTEM):
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def test_greedy_answers_equal_generates(served, model, tokenizer):
    client, inference = served
    reference = AgentInference(model, tokenizer, max_new_tokens=16, reuse_cache=False)
    requests = [
        (user("Step 1: the agent listed the files."), {}),
        (user("Step 2: the agent read sort.py."), {"max_tokens": 7}),
        ([{"role": "user", "content": "Weather in Paris?"}], {"tools": [WEATHER]}),
    ]
    answers = set()
    for messages, fields in requests:
        reply = chat(client, messages, temperature=0, **fields)
        want = reference.complete(messages, fields.get("tools"), max_new_tokens=fields.get("max_tokens", 16))
        choice = reply["choices"][0]
        content = parse_tool_calls(want.text)[0] if "tools" in fields else want.text  # as the endpoint shows it
        assert (choice["message"]["content"], choice["finish_reason"]) == (content, want.finish_reason)
        assert (reply["usage"]["prompt_tokens"], reply["usage"]["completion_tokens"]) == (
            want.prompt_tokens,
            want.completion_tokens,
        )
        answers.add(want.text)
    assert len(answers) == len(requests)  # the answers depend on the prompts
    assert inference.acting_engine.stats["calls"] == len(requests)  # all of them went through the engine


def test_top_logprobs_are_a_fresh_forwards_top_k(served, model, tokenizer):
    client, inference = served
    messages = user("Did the step succeed? Answer Yes or No.")
    reply = chat(client, messages, temperature=0, max_tokens=4, logprobs=True, top_logprobs=5)
    content = reply["choices"][0]["logprobs"]["content"]
    assert len(content) == reply["usage"]["completion_tokens"] == 4
    # the engine's structure is the one generate's path gave: (id, log-prob, [(id, log-prob)] * k)
    got = inference.complete(messages, max_new_tokens=4, top_logprobs=5).logprobs
    want = AgentInference(model, tokenizer, reuse_cache=False).complete(messages, max_new_tokens=4, top_logprobs=5)
    assert [(t, [i for i, _ in top]) for t, _, top in got] == [(t, [i for i, _ in top]) for t, _, top in want.logprobs]
    for (_, lp, top), (_, want_lp, want_top) in zip(got, want.logprobs):
        assert lp == pytest.approx(want_lp, abs=1e-5)
        assert [v for _, v in top] == pytest.approx([v for _, v in want_top], abs=1e-5)
    # the endpoint's numbers: position t's distribution from one forward over prompt + answer[:t]
    prompt = inference.encode(messages)[0].tolist()
    answer = [token for token, _, _ in got]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1].float()  # (4, V)
    dist = logits.log_softmax(-1)
    values, ids = dist.topk(5, dim=-1)
    for t, entry in enumerate(content):
        alone = tokenizer.batch_decode([[i] for i in ids[t].tolist()], clean_up_tokenization_spaces=False)
        assert [alt["token"] for alt in entry["top_logprobs"]] == alone
        assert [alt["logprob"] for alt in entry["top_logprobs"]] == pytest.approx(values[t].tolist(), abs=1e-5)
        assert entry["logprob"] == pytest.approx(dist[t, answer[t]].item(), abs=1e-5)
    # the judge's logprob verdict: one token, its likeliest alternatives
    verdict = chat(client, messages, temperature=0, max_tokens=1, logprobs=True, top_logprobs=3)
    (first,) = verdict["choices"][0]["logprobs"]["content"]
    assert [alt["logprob"] for alt in first["top_logprobs"]] == pytest.approx(values[0, :3].tolist(), abs=1e-5)
    plain = chat(client, messages, max_tokens=2, logprobs=True)  # top_logprobs 0: no alternatives
    assert [entry["top_logprobs"] for entry in plain["choices"][0]["logprobs"]["content"]] == [[], []]


def _stop_string(tokenizer, ids: list[int]) -> tuple[str, int]:
    """A piece of the answer that one token adds (letters only, first seen there) and that token's index."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    for index in range(3, len(ids) - 2):
        before = tokenizer.decode(ids[:index], skip_special_tokens=True)
        piece = tokenizer.decode(ids[: index + 1], skip_special_tokens=True)[len(before) :].lstrip()
        if len(piece) >= 3 and piece.isalpha() and piece.isascii() and text.find(piece) >= len(before):
            return piece, index
    raise AssertionError(f"no usable stop string in {text!r}")


def test_stop_strings_cut_the_answer_and_end_its_decoding(served, model, tokenizer):
    client, inference = served
    messages = user("Explain the score.")
    full = inference.complete(messages, max_new_tokens=16)
    ids = inference.encode(messages)[0].tolist()
    (sample,) = ActingEngine(model, inference.end_token_ids, 0).generate(
        [ids], max_new_tokens=16, temperature=0.0, top_p=1.0
    )
    stop, index = _stop_string(tokenizer, sample.token_ids)
    reply = chat(client, messages, temperature=0, max_tokens=16, stop=[stop, "never appears"])
    choice = reply["choices"][0]
    assert choice["message"]["content"] == full.text[: full.text.find(stop)]
    assert choice["finish_reason"] == "stop"
    # decoding ended at the token that completed the stop string, as generate's stop_strings end it
    assert reply["usage"]["completion_tokens"] == index + 1 < full.completion_tokens
    generate = AgentInference(model, tokenizer, reuse_cache=False).complete(messages, max_new_tokens=16, stop=[stop])
    assert (generate.text, generate.completion_tokens) == (choice["message"]["content"], index + 1)
    # streamed through the same engine: the same text, the stop string never sent
    events = client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 16, "stop": stop, "stream": True},
    ).text
    chunks = [json.loads(line[6:]) for line in events.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == choice["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_stream_equals_the_plain_answer(served):
    client, inference = served
    messages = user("Summarise the trajectory.")
    plain = chat(client, messages, temperature=0)["choices"][0]["message"]["content"]
    calls = inference.acting_engine.stats["calls"]
    events = client.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": messages, "temperature": 0, "stream": True}
    ).text
    chunks = [json.loads(line[6:]) for line in events.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == plain
    assert inference.acting_engine.stats["calls"] == calls + 1  # streamed by the engine too


def test_requests_sharing_a_prefix_reuse_its_cache(served, model, tokenizer):
    """A judge's consecutive verdicts: the system prompt (the rubric) is computed once."""
    client, inference = served
    rubric = SYSTEM + " Rubric: goal progress, tool selection, parameter correctness, each in [0, 1]. " * 3
    reference = AgentInference(model, tokenizer, reuse_cache=False)
    stats = inference.acting_engine.stats
    for step in ("Step 1: the agent called query_stats.", "Step 2: the agent responded."):
        reused = stats["reused_tokens"]
        reply = chat(client, user(step, rubric), temperature=0, max_tokens=8)
        assert (
            reply["choices"][0]["message"]["content"] == reference.complete(user(step, rubric), max_new_tokens=8).text
        )
    assert stats["reused_tokens"] - reused >= len(tokenizer(rubric)["input_ids"])  # the second one reused the rubric
    # the token endpoint acts through the very same engine (one KV cache per served model)
    before = stats["calls"]
    response = client.post("/v1/completions", json={"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 2})
    assert response.status_code == 200 and stats["calls"] == before + 1


def test_loaded_weights_drop_the_cache(served, model, tokenizer, tmp_path):
    client, inference = served
    messages = user("Score this step.")
    chat(client, messages, temperature=0, max_tokens=8)
    assert inference.acting_engine.store is not None
    trained = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    save_model(trained, tokenizer, tmp_path / "trained")
    assert client.post("/v1/load_weights", json={"path": str(tmp_path / "trained")}).status_code == 200
    assert inference.acting_engine.store is None  # nothing computed by the old weights is reused
    reply = chat(client, messages, temperature=0, max_tokens=8)
    want = AgentInference(trained, tokenizer, reuse_cache=False).complete(messages, max_new_tokens=8)
    assert reply["choices"][0]["message"]["content"] == want.text


# -- the engine's additions, alone -------------------------------------------------------------


def test_engine_top_logprobs_and_a_stop_check_per_row(model, tokenizer):
    prompts = [AgentInference(model, tokenizer).encode(user(text))[0].tolist() for text in ("one", "two", "three")]
    engine = ActingEngine(model, [tokenizer.eos_token_id], 0, logprobs=False)
    free = engine.generate(prompts, max_new_tokens=10, temperature=0.0, top_p=1.0)
    assert all(s.top_logprobs is None and s.finish_reason == "length" for s in free)
    seen = []

    def stop(row, ids):
        seen.append(row)
        return row == 1 and len(ids) == 4  # only the second answer ends early

    engine.weights_updated()
    cut = engine.generate(prompts, max_new_tokens=10, temperature=0.0, top_p=1.0, top_logprobs=3, stop=stop)
    assert [s.token_ids for s in cut] == [free[0].token_ids, free[1].token_ids[:4], free[2].token_ids]
    assert [s.finish_reason for s in cut] == ["length", "stop", "length"]
    assert seen.count(1) == 4 and seen.count(0) == seen.count(2) == 10  # row 1 left the decode batch
    for prompt, sample in zip(prompts, cut):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + sample.token_ids])).logits[0, len(prompt) - 1 : -1]
        values, ids = logits.float().log_softmax(-1).topk(3, dim=-1)
        assert [[i for i, _ in top] for top in sample.top_logprobs] == ids.tolist()
        got = torch.tensor([[v for _, v in top] for top in sample.top_logprobs])
        torch.testing.assert_close(got, values, rtol=0, atol=1e-5)
        assert sample.logprobs == pytest.approx(values[:, 0].tolist(), abs=1e-5)  # greedy: the likeliest


def test_an_interrupted_call_drops_the_cache(model, tokenizer):
    """A forward that raises (a cancelled request: serving.limits.Cancellation's hook) leaves no
    half-written rows behind: the next call prefills from scratch and answers as a fresh engine."""
    prompts = [AgentInference(model, tokenizer).encode(user("interrupted"))[0].tolist()]
    engine = ActingEngine(model, [tokenizer.eos_token_id], 0)
    engine.generate(prompts, max_new_tokens=4, temperature=0.0, top_p=1.0)
    calls = []

    def fail_third_forward(module, args):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("cancelled")

    hook = model.register_forward_pre_hook(fail_third_forward)
    try:
        with pytest.raises(RuntimeError, match="cancelled"):
            engine.generate([prompts[0] + [11, 12]], max_new_tokens=8, temperature=0.0, top_p=1.0)
    finally:
        hook.remove()
    assert engine.store is None
    again = engine.generate([prompts[0] + [11, 12]], max_new_tokens=8, temperature=0.0, top_p=1.0)
    fresh = ActingEngine(model, [tokenizer.eos_token_id], 0).generate(
        [prompts[0] + [11, 12]], max_new_tokens=8, temperature=0.0, top_p=1.0
    )
    assert [s.token_ids for s in again] == [s.token_ids for s in fresh]
