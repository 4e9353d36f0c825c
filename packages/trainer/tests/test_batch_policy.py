"""LocalBatchPolicy: batched greedy answers equal one-at-a-time answers; chats kept as Agent keeps them.

Two tiny fp32 Llamas with the real SmolLM2 tokenizer: a random one with wide initial weights (so
greedy answers are long, varied token sequences that depend on every prompt token), and one
overfitted to known answers (a native tool call, an ``Action:`` line, a reply) whose rows end at
different lengths. The integration test repeats the parity check on SmolLM2-135M.

pytest packages/trainer/tests/test_batch_policy.py            # unit
pytest packages/trainer/tests/test_batch_policy.py -m integration
"""

from __future__ import annotations

import copy

import pytest
import torch

from agenttrainer.batch_policy import LocalBatchPolicy
from agenttrainer.inference import AgentInference, Completion
from agenttrainer.models import build_tiny_model, overfit_tiny_model
from knowlyrcore.domain import get_domain_profile
from knowlyrcore.policy import BatchPolicy
from knowlyrcore.testing import PolicyConformance
from knowlyrcore.tool_parsing import parse_reply

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one torch thread per test


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_CALL_ANSWER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CODING_TOOLS = get_domain_profile("coding").tools
EXAMPLES = [  # short prompts without tool schemas, so the tiny model fits them in seconds
    {"messages": [{"role": "user", "content": "Weather in Paris?"}], "answer": TOOL_CALL_ANSWER},
    {
        "messages": [{"role": "user", "content": "List the files."}],
        "answer": "Thought: look first\nAction: bash ls -la",
    },
    {"messages": [{"role": "user", "content": "Say hello."}], "answer": "Hello there!"},
]
CHATS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "user", "content": "List the files in the current directory, then count the lines of every file."}],
    [{"role": "user", "content": "Weather in Paris?"}],
    [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
        },
        {"role": "tool", "content": "-3 degrees"},
    ],
]


def wide_random_model(tokenizer):
    """Wide initial weights (std 0.2): greedy answers run to max_new_tokens and differ per prompt."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def random_engine(tokenizer):
    return AgentInference(wide_random_model(tokenizer), tokenizer, max_new_tokens=12)


@pytest.fixture(scope="module")
def fitted_engine():
    model, tokenizer = build_tiny_model(hidden_size=64, seed=0)
    overfit_tiny_model(model, tokenizer, EXAMPLES)
    return AgentInference(model, tokenizer, max_new_tokens=40)


# -- generation: batched == one at a time ------------------------------------------------------


def test_padded_batch_sees_what_the_prompt_alone_sees(random_engine):
    """The mechanism behind the parity. With left padding, the mask hides the pads as keys and generate
    derives position ids from it (``cumsum(mask) - 1``), so a padded row's last logits are those of its
    prompt alone. Without the mask the pads leak into attention. (Rotary attention depends only on
    position differences, so for Llama a constant position shift would cancel; the mask cannot be skipped.)"""
    model = random_engine.model
    short, long = (random_engine.encode(chat)[0] for chat in CHATS[:2])
    pad = len(long) - len(short)
    input_ids = torch.stack([torch.cat([torch.full((pad,), 2), short]), long])  # (2, T)
    mask = (torch.arange(len(long)) >= torch.tensor([[pad], [0]])).long()  # (2, T): row 0 left-padded
    from_mask = (mask.cumsum(-1) - 1).clamp(min=0)  # (2, T), as generate derives them
    with torch.no_grad():
        alone = model(short[None]).logits[0, -1]
        batched = model(input_ids, attention_mask=mask, position_ids=from_mask).logits[0, -1]
        unmasked = model(input_ids).logits[0, -1]
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(unmasked, alone, atol=1e-2)


def test_batched_greedy_equals_one_at_a_time(random_engine):
    policy = LocalBatchPolicy(random_engine, system_prompt="You are terse.", tools=[WEATHER])
    chats = [[{"role": "system", "content": "You are terse."}, *chat] for chat in CHATS]
    one_at_a_time = [random_engine.complete(chat, [WEATHER]) for chat in chats]
    assert len({c.prompt_tokens for c in one_at_a_time}) == len(chats)  # every row but the longest is padded
    assert len({c.text for c in one_at_a_time}) == len(chats)  # and the answers depend on the prompts
    assert policy.generate_batch(chats) == one_at_a_time
    assert LocalBatchPolicy(random_engine, tools=[WEATHER], batch_size=3).generate_batch(CHATS) == [
        random_engine.complete(chat, [WEATHER]) for chat in CHATS
    ]


def test_the_shared_prefix_is_the_system_turn_with_the_tools(random_engine):
    """Re-prefill path: the prompts' common prefix is computed once and kept; the acting engine:
    the same prefix is prefilled once and forked into every row."""
    policy = LocalBatchPolicy(random_engine, system_prompt="You are terse.", tools=[WEATHER], reuse_cache=False)
    chats = [[{"role": "system", "content": "You are terse."}, *chat] for chat in CHATS]
    policy.generate_batch(chats)
    prefix_ids, prefix_kv = policy.generator._prefix
    text = random_engine.tokenizer.decode(list(prefix_ids))
    assert text.startswith("<|im_start|>system\nYou are terse.") and "<|im_start|>user\n" in text
    assert '"name": "get_weather"' in text
    assert len(prefix_kv) == random_engine.model.config.num_hidden_layers
    assert prefix_kv[0][0].shape[-2] == len(prefix_ids)  # (1, H_kv, P, D)

    cached = LocalBatchPolicy(random_engine, system_prompt="You are terse.", tools=[WEATHER])
    assert cached.generate_batch(chats) == policy.generate_batch(chats)
    prompts = [random_engine.encode(chat, [WEATHER])[0].tolist() for chat in chats]
    stats = cached.generator.stats
    assert stats["prompt_tokens"] == sum(len(p) for p in prompts)
    # the prefix once, then each prompt's rest
    assert stats["prefilled_tokens"] == len(prefix_ids) + sum(len(p) - len(prefix_ids) for p in prompts)


def test_reset_batch_recomputes_the_prefix_after_training(tokenizer):
    engine = AgentInference(wide_random_model(tokenizer), tokenizer, max_new_tokens=12)
    policy = LocalBatchPolicy(engine, tools=[WEATHER])
    policy.reset_batch([None])
    policy.act_batch(["hi"])
    with torch.no_grad():  # an optimizer step between two rollouts
        for parameter in engine.model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    policy.reset_batch([None])
    assert policy.generate_batch(CHATS) == [engine.complete(chat, [WEATHER]) for chat in CHATS]


def test_chats_without_the_policys_system_turn_are_answered_without_the_prefix(random_engine):
    policy = LocalBatchPolicy(random_engine, system_prompt="You are terse.")
    chats = [CHATS[0], [{"role": "system", "content": "Be verbose."}, *CHATS[1]]]
    assert policy.generate_batch(chats) == [random_engine.complete(chat) for chat in chats]


def test_rows_that_end_early_are_cut_at_their_end_token(fitted_engine):
    chats = [example["messages"] for example in EXAMPLES] + [[{"role": "user", "content": "Capital of Spain?"}]]
    for max_new_tokens in (40, 20):  # 20: the tool call (31 tokens) is cut off, the shorter answers end
        engine = AgentInference(fitted_engine.model, fitted_engine.tokenizer, max_new_tokens=max_new_tokens)
        one_at_a_time = [engine.complete(chat) for chat in chats]
        if max_new_tokens == 40:
            assert [c.text for c in one_at_a_time[:3]] == [example["answer"] for example in EXAMPLES]
            assert len({c.completion_tokens for c in one_at_a_time[:3]}) == 3  # rows end at different steps
        else:
            assert {c.finish_reason for c in one_at_a_time} == {"stop", "length"}
        for batch_size in (None, 2):
            assert LocalBatchPolicy(engine, batch_size=batch_size).generate_batch(chats) == one_at_a_time


def test_sampling_draws_from_the_global_rng(random_engine):
    sampler = AgentInference(random_engine.model, random_engine.tokenizer, max_new_tokens=12, temperature=1.0)
    policy = LocalBatchPolicy(sampler)
    draws = []
    for _ in range(2):
        torch.manual_seed(7)
        draws.append([c.text for c in policy.generate_batch(CHATS)])
    assert draws[0] == draws[1]
    assert draws[0] != [c.text for c in LocalBatchPolicy(random_engine).generate_batch(CHATS)]


# -- acting: the same actions and chats as one Agent per episode -------------------------------


def test_act_batch_matches_one_agent_per_episode(fitted_engine):
    turns = [  # per turn, one observation per episode; None once an episode has ended
        ["Weather in Paris?", "List the files.", "Say hello."],
        ["18 degrees, sunny", {"output": "a.py", "exit_code": 0}, None],
        [None, "done", None],
    ]
    policy = LocalBatchPolicy(fitted_engine)
    agents = [fitted_engine.create_agent() for _ in range(3)]
    policy.reset_batch([None] * 3)
    for observations in turns:
        actions = policy.act_batch(observations)
        expected = [None if obs is None else agent(obs) for agent, obs in zip(agents, observations)]
        assert [a and {k: v for k, v in a.items() if k != "usage"} for a in actions] == expected
    assert policy.messages == [agent.messages for agent in agents]

    weather, files, hello = policy.messages
    assert weather[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    }
    assert weather[2] == {"role": "tool", "content": "18 degrees, sunny"}
    assert files[1] == {"role": "assistant", "content": "Thought: look first\nAction: bash ls -la"}
    assert files[2] == {"role": "user", "content": 'Observation: {"output": "a.py", "exit_code": 0}'}
    assert [m["role"] for m in hello] == ["user", "assistant"]
    assert files[4] == {"role": "user", "content": "done"}  # the model replied without a call at turn 2


def test_each_episode_is_prompted_and_parsed_with_its_own_tools(random_engine):
    """``set_tools_batch`` (an environment whose tools come with the task, e.g. BFCL's functions):
    each episode acts as one Agent built with its own tools would, prompt and parsing alike; an
    episode whose entry is None keeps the tools the policy was built with."""
    policy = LocalBatchPolicy(random_engine, system_prompt="You are terse.", tools=[WEATHER])
    agents = [random_engine.create_agent("You are terse.", tools) for tools in ([WEATHER], CODING_TOOLS, None)]
    policy.reset_batch([None] * 3)
    policy.set_tools_batch([None, CODING_TOOLS, []])
    for observations in (["Weather?", "List the files.", "hi"], ["ok", "ok", None]):
        actions = policy.act_batch(observations)
        expected = [None if obs is None else agent(obs) for agent, obs in zip(agents, observations)]
        assert [a and {k: v for k, v in a.items() if k != "usage"} for a in actions] == expected
    assert policy.messages == [agent.messages for agent in agents]
    with pytest.raises(ValueError, match="2 tool lists for 3 episodes"):
        policy.set_tools_batch([None, None])


def test_tools_not_included_are_still_parsed_with(random_engine):
    """``include_tools=False``: the prompt shows no tools, the reply is parsed with the episode's."""
    policy = LocalBatchPolicy(random_engine, include_tools=False)
    policy.reset_batch([None])
    policy.set_tools_batch([CODING_TOOLS])
    (action,) = policy.act_batch(["hi"])
    alone = random_engine.complete([{"role": "user", "content": "hi"}])
    assert action["usage"]["prompt_tokens"] == alone.prompt_tokens
    assert {k: v for k, v in action.items() if k != "usage"} == parse_reply(alone.text, CODING_TOOLS).action


def test_actions_carry_thought_and_token_usage(fitted_engine):
    policy = LocalBatchPolicy(fitted_engine)
    policy.reset_batch([None, None])
    weather, hello = policy.act_batch(["Weather in Paris?", "Say hello."])
    assert weather == {
        "tool": "get_weather",
        "params": {"city": "Paris"},
        "thought": "",
        "usage": {
            "prompt_tokens": fitted_engine.encode(policy.messages[0][:1]).shape[1],
            "completion_tokens": len(fitted_engine.tokenizer(TOOL_CALL_ANSWER)["input_ids"]) + 1,
        },
    }
    assert hello["tool"] == "respond" and hello["params"] == {"message": "Hello there!"}


def test_unparseable_answers_fall_back_to_the_fallback_tool(random_engine):
    policy = LocalBatchPolicy(random_engine, fallback_tool="finish")
    policy.reset_batch([None])
    (action,) = policy.act_batch(["hi"])
    text = random_engine.generate([{"role": "user", "content": "hi"}])
    assert action["tool"] == "finish" and action["params"] == {"message": text.strip()} and action["thought"] == ""
    assert policy.messages[0][-1] == {"role": "assistant", "content": text}


def test_ended_episodes_get_none_and_keep_their_chat(random_engine):
    policy = LocalBatchPolicy(random_engine, system_prompt="You help.")
    policy.reset_batch([None, None])
    policy.act_batch(["hi", "hello"])
    before = [list(m) for m in policy.messages]
    first, second = policy.act_batch([None, "again"])
    assert first is None and second["tool"] == "respond"
    assert policy.messages[0] == before[0] and len(policy.messages[0]) == 3
    assert [m["role"] for m in policy.messages[1]] == ["system", "user", "assistant", "user", "assistant"]
    assert policy.messages[1][3] == {"role": "user", "content": "again"}  # a reply is answered by a plain user turn
    assert policy.act_batch([None, None]) == [None, None]
    with pytest.raises(ValueError, match="3 observations for 2 episodes"):
        policy.act_batch(["a", "b", "c"])


def test_is_a_knowlyr_batch_policy_and_loads_checkpoints(tiny_path):
    policy = LocalBatchPolicy.from_pretrained(tiny_path, max_new_tokens=5, temperature=0.5, batch_size=4)
    assert (policy.engine.max_new_tokens, policy.engine.temperature, policy.batch_size) == (5, 0.5, 4)
    assert isinstance(policy, BatchPolicy)
    with pytest.raises(ValueError, match="batch_size"):
        LocalBatchPolicy(policy.engine, batch_size=0)


# -- the real model ------------------------------------------------------------------------------


@pytest.mark.integration
def test_smollm2_batched_greedy_equals_sequential():
    system = "You are a helpful assistant."
    policy = LocalBatchPolicy.from_pretrained("smollm2-135m", system_prompt=system, tools=[WEATHER], max_new_tokens=32)
    chats = [
        [{"role": "system", "content": system}, {"role": "user", "content": question}]
        for question in ("What is 2+2?", "Name a primary colour.", "What is the weather like in Paris today?")
    ]
    sequential = [policy.engine.complete(chat, [WEATHER]) for chat in chats]
    assert len({c.text for c in sequential}) == 3
    assert policy.generate_batch(chats) == sequential


# -- the shared chat-policy rules (knowlyr-core's suite, on a batch of one) ------------------------


class ScriptedBatchPolicy(LocalBatchPolicy):
    """The policy with its model replaced by scripted answers (the suite tests parsing and chats)."""

    def __init__(self, **options):
        super().__init__(engine=None, **options)
        self.answers: list[str] = []
        self.requests: list[list[dict]] = []

    def generate_batch(self, chats):
        self.requests.extend(copy.deepcopy(chat) for chat in chats)
        return [Completion(self.answers.pop(0), 0, 0, "stop") for _ in chats]


class OneEpisode:
    """A batch policy seen as a per-episode ``Policy`` (a batch of one)."""

    def __init__(self, policy):
        self.policy = policy

    def reset(self, task=None):
        self.policy.reset_batch([task])

    def __call__(self, observation):
        return self.policy.act_batch([observation])[0]


class TestLocalBatchPolicyConforms(PolicyConformance):
    closing_tool, closing_param = "finish", "message"  # the coding domain's first closing tool

    @pytest.fixture(autouse=True)
    def _policy(self):
        self.scripted = ScriptedBatchPolicy(system_prompt="You are a coding agent.", tools=CODING_TOOLS)

    def make_policy(self):
        return OneEpisode(self.scripted)

    def script_replies(self, replies):
        self.scripted.answers.extend(self.hermes_text(reply) for reply in replies)

    def model_requests(self):
        return self.scripted.requests
