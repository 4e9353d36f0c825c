"""The inference bridge on the embedded SmolLM2-135M-Instruct (integration: real weights).

pytest packages/trainer/tests/test_inference_smollm2.py -m integration
"""

from __future__ import annotations

import pytest

from agenttrainer.acting.inference import AgentInference

pytestmark = pytest.mark.integration

RESPOND = {
    "name": "respond",
    "description": "Reply to the user with a message.",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
}


@pytest.fixture(scope="module")
def engine():
    return AgentInference.from_pretrained("smollm2-135m", max_new_tokens=48)


def test_answers_a_simple_question(engine):
    assert "4" in engine.generate([{"role": "user", "content": "What is 2+2?"}])


def test_stream_matches_the_greedy_completion(engine):
    messages = [{"role": "user", "content": "Name a primary colour."}]
    assert "".join(engine.stream(messages)) == engine.generate(messages)


def test_agent_produces_well_formed_actions_over_several_steps(engine):
    agent = engine.create_agent(system_prompt="You are a helpful assistant.", tools=[RESPOND])
    for observation in ["Greet the user.", "The user says: thanks!"]:
        action = agent(observation)
        assert set(action) == {"tool", "params", "thought"}
        assert isinstance(action["tool"], str) and action["tool"]
        assert isinstance(action["params"], dict) and isinstance(action["thought"], str)
    text = agent.tokenizer.decode(agent.records[0].token_ids)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.")
    assert len(agent.records[0].step_spans) == 2  # two answers, each after its observation
    assert text.count("<|im_start|>user\n") == 2 and text.count("<|im_start|>assistant\n") == 2


def test_the_acting_engine_answers_as_generate_does(engine):
    """``complete`` goes through the acting engine; ``model.generate`` gives the same greedy answer
    and the same top log-probs (up to float rounding) for the same request."""
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    reference = AgentInference(engine.model, engine.tokenizer, reuse_cache=False)
    got = engine.complete(messages, max_new_tokens=10, top_logprobs=3)
    want = reference.complete(messages, max_new_tokens=10, top_logprobs=3)
    assert (got.text, got.finish_reason, got.completion_tokens) == (
        want.text,
        want.finish_reason,
        want.completion_tokens,
    )
    assert [(t, [i for i, _ in top]) for t, _, top in got.logprobs] == [
        (t, [i for i, _ in top]) for t, _, top in want.logprobs
    ]
    for (_, lp, top), (_, want_lp, want_top) in zip(got.logprobs, want.logprobs):
        assert [lp, *(v for _, v in top)] == pytest.approx([want_lp, *(v for _, v in want_top)], abs=1e-4)
