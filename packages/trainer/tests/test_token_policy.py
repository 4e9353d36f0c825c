"""The local policy (``agenttrainer.acting.TokenPolicy``): batched answers equal one-at-a-time
answers, an episode's chat is its token ids, and its actions follow the shared chat-policy rules.

Two tiny fp32 Llamas with the real SmolLM2 tokenizer: a random one with wide initial weights (so
greedy answers are long, varied token sequences that depend on every prompt token), and one
overfitted to known answers (a native tool call, an ``Action:`` line, a reply) whose rows end at
different lengths. The integration test repeats the batched == one-at-a-time check on
SmolLM2-135M. knowlyr-core's policy suite runs on a scripted generator.

pytest packages/trainer/tests/test_token_policy.py            # unit
pytest packages/trainer/tests/test_token_policy.py -m integration
"""

from __future__ import annotations

import json

import pytest
import torch

from agenttrainer.acting import AgentInference, ChatTokens, LocalGenerator, TokenPolicy, TokenSample
from agenttrainer.models import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, build_tiny_model, overfit_tiny_model
from knowlyrcore import TOOL_CALL_CLOSE as CORE_CLOSE
from knowlyrcore import TOOL_CALL_OPEN as CORE_OPEN
from knowlyrcore import TaskInfo
from knowlyrcore.domain import get_domain_profile
from knowlyrcore.policy import BatchPolicy, Policy
from knowlyrcore.testing import PolicyConformance
from knowlyrcore.tool_parsing import parse_reply, parse_tool_calls

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
def random_model(tokenizer):
    return wide_random_model(tokenizer)


@pytest.fixture(scope="module")
def fitted():
    model, tokenizer = build_tiny_model(hidden_size=64, seed=0)
    overfit_tiny_model(model, tokenizer, EXAMPLES)
    return model, tokenizer


def greedy(model, tokenizer, *, batch_size=None, reuse_cache=True, max_new_tokens=12, **options):
    """The local policy over ``model``, greedy."""
    generator = LocalGenerator(model, tokenizer, batch_size=batch_size, reuse_cache=reuse_cache)
    return TokenPolicy(generator, tokenizer, max_new_tokens=max_new_tokens, temperature=0.0, **options)


def prompts_of(tokenizer, chats, *, system_prompt=None, tools=None):
    return [ChatTokens(tokenizer, system_prompt=system_prompt, tools=tools).prompt(chat) for chat in chats]


def one_at_a_time(policy_of, observations_by_turn, tasks=None):
    """Each episode played alone by a fresh policy (``policy_of(i)``, a batch of one): its actions per turn."""
    n = len(observations_by_turn[0])
    policies = [policy_of(i) for i in range(n)]
    for i, policy in enumerate(policies):
        policy.reset(tasks[i] if tasks else None)
    turns = []
    for observations in observations_by_turn:
        turns.append([None if obs is None else policy(obs) for policy, obs in zip(policies, observations)])
    return turns, policies


def played(policy, observations_by_turn, tasks=None):
    """The episodes played in lockstep by ``policy``: its actions per turn."""
    policy.reset_batch(tasks or [None] * len(observations_by_turn[0]))
    return [policy.act_batch(observations) for observations in observations_by_turn]


# -- generation: batched == one at a time ------------------------------------------------------


def test_padded_batch_sees_what_the_prompt_alone_sees(random_model, tokenizer):
    """The mechanism behind the re-prefill path's parity. With left padding, the mask hides the pads
    as keys and generate derives position ids from it (``cumsum(mask) - 1``), so a padded row's last
    logits are those of its prompt alone. Without the mask the pads leak into attention. (Rotary
    attention depends only on position differences, so for Llama a constant position shift would
    cancel; the mask cannot be skipped.)"""
    short, long = (torch.tensor(p) for p in prompts_of(tokenizer, CHATS[:2]))
    pad = len(long) - len(short)
    input_ids = torch.stack([torch.cat([torch.full((pad,), 2), short]), long])  # (2, T)
    mask = (torch.arange(len(long)) >= torch.tensor([[pad], [0]])).long()  # (2, T): row 0 left-padded
    from_mask = (mask.cumsum(-1) - 1).clamp(min=0)  # (2, T), as generate derives them
    with torch.no_grad():
        alone = random_model(short[None]).logits[0, -1]
        batched = random_model(input_ids, attention_mask=mask, position_ids=from_mask).logits[0, -1]
        unmasked = random_model(input_ids).logits[0, -1]
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(unmasked, alone, atol=1e-2)


def test_batched_greedy_equals_one_at_a_time(random_model, tokenizer):
    prompts = prompts_of(tokenizer, CHATS, system_prompt="You are terse.", tools=[WEATHER])
    alone = [
        LocalGenerator(random_model, tokenizer).generate([p], max_new_tokens=12, temperature=0.0)[0] for p in prompts
    ]
    assert len({len(p) for p in prompts}) == len(prompts)  # every row but the longest is padded
    assert len({tuple(s.token_ids) for s in alone}) == len(prompts)  # and the answers depend on the prompts
    for options in ({}, {"batch_size": 3}, {"reuse_cache": False}, {"reuse_cache": False, "batch_size": 3}):
        batched = LocalGenerator(random_model, tokenizer, **options).generate(
            prompts, max_new_tokens=12, temperature=0.0
        )
        assert [s.token_ids for s in batched] == [s.token_ids for s in alone], options
        for a, b in zip(batched, alone):
            assert a.finish_reason == b.finish_reason
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=1e-4, atol=1e-4)


def test_the_shared_prefix_is_the_system_turn_with_the_tools(random_model, tokenizer):
    """Re-prefill path: the prompts' common prefix is computed once and kept; the acting engine:
    the same prefix is prefilled once and forked into every row."""
    prompts = prompts_of(tokenizer, CHATS, system_prompt="You are terse.", tools=[WEATHER])
    reprefill = LocalGenerator(random_model, tokenizer, reuse_cache=False)
    want = reprefill.generate(prompts, max_new_tokens=12, temperature=0.0)
    prefix_ids, prefix_kv = reprefill._prefix
    text = tokenizer.decode(list(prefix_ids))
    assert text.startswith("<|im_start|>system\nYou are terse.") and "<|im_start|>user\n" in text
    assert '"name": "get_weather"' in text
    assert len(prefix_kv) == random_model.config.num_hidden_layers
    assert prefix_kv[0][0].shape[-2] == len(prefix_ids)  # (1, H_kv, P, D)

    cached = LocalGenerator(random_model, tokenizer)
    got = cached.generate(prompts, max_new_tokens=12, temperature=0.0)
    assert [s.token_ids for s in got] == [s.token_ids for s in want]
    stats = cached.stats
    assert stats["prompt_tokens"] == sum(len(p) for p in prompts)
    # the prefix once, then each prompt's rest
    assert stats["prefilled_tokens"] == len(prefix_ids) + sum(len(p) - len(prefix_ids) for p in prompts)


def test_rows_that_end_early_are_cut_at_their_end_token(fitted):
    model, tokenizer = fitted
    chats = [example["messages"] for example in EXAMPLES] + [[{"role": "user", "content": "Capital of Spain?"}]]
    prompts = prompts_of(tokenizer, chats)
    for max_new_tokens in (40, 20):  # 20: the tool call (31 tokens) is cut off, the shorter answers end
        options = dict(max_new_tokens=max_new_tokens, temperature=0.0)
        alone = [LocalGenerator(model, tokenizer).generate([p], **options)[0] for p in prompts]
        if max_new_tokens == 40:
            texts = [tokenizer.decode(s.token_ids, skip_special_tokens=True) for s in alone[:3]]
            assert texts == [example["answer"] for example in EXAMPLES]
            assert len({len(s.token_ids) for s in alone[:3]}) == 3  # rows end at different steps
        else:
            assert {s.finish_reason for s in alone} == {"stop", "length"}
        for generator in (LocalGenerator(model, tokenizer), LocalGenerator(model, tokenizer, batch_size=2)):
            batched = generator.generate(prompts, **options)
            assert [(s.token_ids, s.finish_reason) for s in batched] == [(s.token_ids, s.finish_reason) for s in alone]


# -- acting: batched == one episode at a time --------------------------------------------------


def test_act_batch_matches_one_agent_per_episode(fitted):
    """The lockstep policy acts as the seed API's agents (``AgentInference.create_agent``), one per
    episode, and each chat threads its observations by the answer before them: a ``tool`` message
    after a native call, ``Observation: ...`` after an ``Action:`` line, a plain user turn after a reply."""
    model, tokenizer = fitted
    turns = [  # per turn, one observation per episode; None once an episode has ended
        ["Weather in Paris?", "List the files.", "Say hello."],
        ["18 degrees, sunny", {"output": "a.py", "exit_code": 0}, None],
        [None, "done", None],
    ]
    policy = greedy(model, tokenizer, max_new_tokens=40)
    inference = AgentInference(model, tokenizer, max_new_tokens=40)
    expected, agents = one_at_a_time(lambda i: inference.create_agent(), turns)
    assert played(policy, turns) == expected
    assert [r.token_ids for r in policy.records] == [agent.records[0].token_ids for agent in agents]

    weather, files, hello = (tokenizer.decode(r.token_ids) for r in policy.records)
    assert f"<|im_start|>assistant\n{TOOL_CALL_ANSWER}<|im_end|>\n" in weather
    assert "<|im_start|>user\n<tool_response>\n18 degrees, sunny\n</tool_response><|im_end|>" in weather
    assert "Action: bash ls -la<|im_end|>\n<|im_start|>user\n" in files
    assert '<|im_start|>user\nObservation: {"output": "a.py", "exit_code": 0}<|im_end|>' in files
    assert "<|im_start|>user\ndone<|im_end|>" in files  # the model replied without a call at turn 2
    assert hello.count("<|im_start|>assistant\n") == 1 and hello.endswith("Hello there!<|im_end|>")


def test_each_episode_is_prompted_and_parsed_with_its_own_tools(random_model, tokenizer):
    """``set_tools_batch`` (an environment whose tools come with the task, e.g. BFCL's functions):
    each episode acts as a policy built with its own tools would, prompt and parsing alike; an
    episode whose entry is None keeps the tools the policy was built with."""
    own = ([WEATHER], CODING_TOOLS, None)
    turns = [["Weather?", "List the files.", "hi"], ["ok", "ok", None]]
    expected, alone = one_at_a_time(
        lambda i: greedy(random_model, tokenizer, system_prompt="Be terse.", tools=own[i]), turns
    )
    policy = greedy(random_model, tokenizer, system_prompt="Be terse.", tools=[WEATHER])
    policy.reset_batch([None] * 3)
    policy.set_tools_batch([None, CODING_TOOLS, []])
    assert [policy.act_batch(observations) for observations in turns] == expected
    assert [r.token_ids for r in policy.records] == [p.records[0].token_ids for p in alone]
    with pytest.raises(ValueError, match="2 tool lists for 3 episodes"):
        policy.set_tools_batch([None, None])


def test_each_task_brings_its_system_prompt_unless_the_policy_has_one(random_model, tokenizer):
    """``system_prompt=None``: each task's ``metadata.system_prompt`` (as online RL prompts it);
    a policy's own wins; ``""``: no system turn at all."""
    tasks = [TaskInfo(metadata={"system_prompt": "Be verbose."}), TaskInfo()]

    def first_prompt(system_prompt):
        policy = greedy(random_model, tokenizer, system_prompt=system_prompt, max_new_tokens=2)
        played(policy, [["hi", "hi"]], tasks)
        return [tokenizer.decode(r.token_ids[: r.step_spans[0][0]]) for r in policy.records]

    verbose, default = first_prompt(None)
    assert verbose.startswith("<|im_start|>system\nBe verbose.<|im_end|>")
    assert default.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")  # the template's
    assert all(p.startswith("<|im_start|>system\nMine.<|im_end|>") for p in first_prompt("Mine."))
    assert first_prompt("") == [default, default]
    expected, _ = one_at_a_time(lambda i: greedy(random_model, tokenizer), [["hi", "hi"]], tasks)
    assert played(greedy(random_model, tokenizer), [["hi", "hi"]], tasks) == expected


def test_tools_not_included_are_still_parsed_with(random_model, tokenizer):
    """``include_tools=False``: the prompt shows no tools, the reply is parsed with the episode's."""
    policy = greedy(random_model, tokenizer, include_tools=False)
    policy.reset_batch([None])
    policy.set_tools_batch([CODING_TOOLS])
    (action,) = policy.act_batch(["hi"])
    record = policy.records[0]
    start, end = record.step_spans[0]
    assert record.token_ids[:start] == prompts_of(tokenizer, [[{"role": "user", "content": "hi"}]])[0]
    text = tokenizer.decode(record.token_ids[start:end], skip_special_tokens=True)
    assert action == parse_reply(text, CODING_TOOLS).action


def test_actions_carry_thought_and_the_record_the_tokens(fitted):
    model, tokenizer = fitted
    policy = greedy(model, tokenizer, max_new_tokens=40)
    weather, hello = played(policy, [["Weather in Paris?", "Say hello."]])[0]
    assert weather == {"tool": "get_weather", "params": {"city": "Paris"}, "thought": ""}
    assert hello == {"tool": "respond", "params": {"message": "Hello there!"}, "thought": ""}
    record = policy.records[0]
    (start, end), prompt = record.step_spans[0], prompts_of(tokenizer, [EXAMPLES[0]["messages"]])[0]
    assert record.token_ids[:start] == prompt and not any(record.sampled[:start])
    assert end - start == len(tokenizer(TOOL_CALL_ANSWER)["input_ids"]) + 1  # the answer and its end token
    assert all(record.sampled[start:end]) and all(lp <= 0 for lp in record.logprobs[start:end])


def test_unparseable_answers_fall_back_to_the_closing_tool(random_model, tokenizer):
    policy = greedy(random_model, tokenizer, closing_tool="finish")
    ((action,),) = played(policy, [["hi"]])
    start, end = policy.records[0].step_spans[0]
    text = tokenizer.decode(policy.records[0].token_ids[start:end], skip_special_tokens=True)
    assert action == {"tool": "finish", "params": {"message": text.strip()}, "thought": ""}


def test_ended_episodes_get_none_and_keep_their_tokens(random_model, tokenizer):
    policy = greedy(random_model, tokenizer, system_prompt="You help.")
    policy.reset_batch([None, None])
    policy.act_batch(["hi", "hello"])
    before = [list(r.token_ids) for r in policy.records]
    first, second = policy.act_batch([None, "again"])
    assert first is None and second["tool"] == "respond"
    assert policy.records[0].token_ids == before[0] and len(policy.records[0].step_spans) == 1
    assert tokenizer.decode(policy.records[1].token_ids).count("<|im_start|>user\n") == 2
    assert policy.act_batch([None, None]) == [None, None]
    with pytest.raises(ValueError, match="3 observations for 2 episodes"):
        policy.act_batch(["a", "b", "c"])


def test_reset_batch_recomputes_the_prefix_after_training(tokenizer):
    model = wide_random_model(tokenizer)
    policy = greedy(model, tokenizer, tools=[WEATHER])
    played(policy, [["hi"]])
    with torch.no_grad():  # an optimizer step between two rollouts
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    turns = [["hi", "Weather in Paris?"]]
    assert played(policy, turns) == played(greedy(model, tokenizer, tools=[WEATHER]), turns)


def test_sampling_draws_from_the_global_rng(random_model, tokenizer):
    sampler = TokenPolicy(LocalGenerator(random_model, tokenizer), tokenizer, max_new_tokens=12, temperature=1.0)
    turns = [["hi", "List the files.", "Weather?"]]
    draws = []
    for _ in range(2):
        torch.manual_seed(7)
        draws.append(played(sampler, turns))
    assert draws[0] == draws[1]
    assert draws[0] != played(greedy(random_model, tokenizer), turns)


def test_is_a_knowlyr_batch_policy_and_loads_checkpoints(tiny_path):
    policy = TokenPolicy.from_pretrained(tiny_path, max_new_tokens=5, temperature=0.5, batch_size=4)
    assert (policy.max_new_tokens, policy.temperature, policy.generator.batch_size) == (5, 0.5, 4)
    assert isinstance(policy, BatchPolicy) and isinstance(policy, Policy)
    with pytest.raises(ValueError, match="batch_size"):
        TokenPolicy.from_pretrained(tiny_path, batch_size=0)


def test_the_chat_template_markers_are_the_core_parsers():
    assert (TOOL_CALL_OPEN, TOOL_CALL_CLOSE) == (CORE_OPEN, CORE_CLOSE)


# -- the real model ------------------------------------------------------------------------------


@pytest.mark.integration
def test_smollm2_batched_greedy_equals_sequential():
    system = "You are a helpful assistant."
    policy = TokenPolicy.from_pretrained(
        "smollm2-135m", system_prompt=system, tools=[WEATHER], max_new_tokens=32, temperature=0.0
    )
    turns = [["What is 2+2?", "Name a primary colour.", "What is the weather like in Paris today?"]]
    alone, _ = one_at_a_time(
        lambda i: TokenPolicy(
            LocalGenerator(policy.generator.model, policy.tokenizer),
            policy.tokenizer,
            system_prompt=system,
            tools=[WEATHER],
            max_new_tokens=32,
            temperature=0.0,
        ),
        turns,
    )
    assert len({json.dumps(action) for action in alone[0]}) == 3
    assert played(policy, turns) == alone


# -- the shared chat-policy rules (knowlyr-core's suite, one episode) --------------------------------


class ScriptedGenerator:
    """A ``Generator`` answering each prompt with the next scripted text (its ids and the end
    token), keeping every prompt it was given."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.answers: list[str] = []
        self.prompts: list[list[int]] = []

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0):
        samples = []
        for prompt in prompts:
            self.prompts.append(list(prompt))
            ids = self.tokenizer(self.answers.pop(0), add_special_tokens=False)["input_ids"]
            ids += [self.tokenizer.eos_token_id]
            samples.append(TokenSample(ids, [0.0] * len(ids), "stop"))
        return samples

    def weights_updated(self, model=None, path=None):
        pass


def chatml_messages(text: str) -> list[dict]:
    """The messages a ChatML prompt (SmolLM2's tool template, the assistant turn opened) holds:
    ``<tool_call>`` blocks read back as native calls, ``<tool_response>`` turns as tool messages."""
    messages = []
    for turn in text.split("<|im_start|>")[1:]:
        role, _, content = turn.partition("\n")
        content = content.removesuffix("\n").removesuffix("<|im_end|>")
        if role == "assistant" and TOOL_CALL_OPEN in content:
            content, calls = parse_tool_calls(content)
            functions = [{"name": c.name, "arguments": c.arguments} for c in calls]
            messages.append({"role": role, "content": content, "tool_calls": [{"function": f} for f in functions]})
        elif role == "user" and content.startswith("<tool_response>\n"):
            messages.append({"role": "tool", "content": content[len("<tool_response>\n") : -len("\n</tool_response>")]})
        else:
            messages.append({"role": role, "content": content})
    assert messages[-1] == {"role": "assistant", "content": ""}  # the assistant turn, opened
    return messages[:-1]


class TestTokenPolicyConforms(PolicyConformance):
    closing_tool, closing_param = "finish", "message"  # the coding domain's first closing tool

    @pytest.fixture(autouse=True)
    def _generator(self, tokenizer):
        self.tokenizer = tokenizer
        self.generator = ScriptedGenerator(tokenizer)

    def make_policy(self):
        return TokenPolicy(self.generator, self.tokenizer, system_prompt="You are a coding agent.", tools=CODING_TOOLS)

    def script_replies(self, replies):
        self.generator.answers.extend(self.hermes_text(reply) for reply in replies)

    def model_requests(self):
        return [chatml_messages(self.tokenizer.decode(prompt)) for prompt in self.generator.prompts]


@pytest.fixture
def scripted(tokenizer):
    return ScriptedGenerator(tokenizer)


def test_the_policy_offers_its_tools_as_openai_schemas(scripted, tokenizer):
    scripted.answers.append("ok")
    agent = TokenPolicy(scripted, tokenizer, tools=CODING_TOOLS)
    agent.reset()
    agent("task")
    assert '{"type": "function", "function": {"name": "bash"' in tokenizer.decode(scripted.prompts[0])


def test_a_call_with_unusable_arguments_is_kept_verbatim_and_answered_as_text(scripted, tokenizer):
    broken = '<tool_call>{"name": "bash", "arguments": "{\\"command\\": "}</tool_call>'
    scripted.answers += [broken, "Done."]
    agent = TokenPolicy(scripted, tokenizer, tools=CODING_TOOLS)
    agent.reset()
    action = agent("task")
    assert (action["tool"], action["params"]) == ("bash", {})
    assert action["format_error"].startswith("arguments of 'bash' are not valid JSON")
    agent("error: invalid parameters")
    second = tokenizer.decode(scripted.prompts[1])
    assert second.endswith(
        f"<|im_start|>assistant\n{broken}<|im_end|>\n"
        "<|im_start|>user\nObservation: error: invalid parameters<|im_end|>\n<|im_start|>assistant\n"
    )


def test_after_a_plain_reply_the_next_observation_is_a_plain_user_turn(scripted, tokenizer):
    scripted.answers += ["Which file?", "Action: read_file a.py", "ok"]
    agent = TokenPolicy(scripted, tokenizer)
    agent.reset()
    assert agent("fix it") == {"tool": "respond", "params": {"message": "Which file?"}, "thought": ""}
    assert agent("sort.py")["tool"] == "read_file"
    agent("def sort(): ...")
    users = [m["content"] for m in chatml_messages(tokenizer.decode(scripted.prompts[2])) if m["role"] == "user"]
    assert users == ["fix it", "sort.py", "Observation: def sort(): ..."]


def test_closing_tool_forces_the_closing_tool(scripted, tokenizer):
    scripted.answers.append("bye")
    agent = TokenPolicy(scripted, tokenizer, tools=CODING_TOOLS, closing_tool="submit")
    agent.reset()
    assert agent("task") == {"tool": "submit", "params": {"answer": "bye"}, "thought": ""}
