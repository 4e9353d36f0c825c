"""AgentInference and its agent (the local policy, ``create_agent``) on a tiny model trained to known
answers (tool call, Action text, reply). The agent keeps its chat as token ids: the tests read it decoded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from agenttrainer.acting.chat import action_from_answer, chat_template_tools
from agenttrainer.acting.inference import AgentInference
from agenttrainer.models import build_tiny_model, overfit_tiny_model, save_model
from knowlyrcore.tool_parsing import FunctionCall, parse_tool_calls, possible_tool_call_start

from .test_token_policy import TOOL_CALL_ANSWER, WEATHER

EXAMPLES = [
    {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER], "answer": TOOL_CALL_ANSWER},
    {
        "messages": [{"role": "user", "content": "List the files."}],
        "answer": "Thought: look first\nAction: bash ls -la",
    },
    {"messages": [{"role": "user", "content": "Say hello."}], "answer": "Hello there!"},
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model, tokenizer = build_tiny_model(hidden_size=64, seed=0)
    overfit_tiny_model(model, tokenizer, EXAMPLES)
    return str(save_model(model, tokenizer, tmp_path_factory.mktemp("fitted") / "ckpt"))


@pytest.fixture(scope="module")
def engine(checkpoint):
    return AgentInference.from_pretrained(checkpoint, max_new_tokens=48)


# -- parsing (no model) ----------------------------------------------------------------------


def test_tool_call_blocks_are_split_from_content():
    text = 'I will check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}'
    assert parse_tool_calls(text) == ("I will check.", [FunctionCall("a", {"x": 1}), FunctionCall("b", {"y": 2})])


def test_malformed_tool_call_stays_in_the_content():
    text = "<tool_call>{not json}</tool_call> ok"
    assert parse_tool_calls(text) == (text, [])


def test_possible_tool_call_start_holds_back_partial_tags():
    assert possible_tool_call_start("hello <tool") == len("hello ")
    assert possible_tool_call_start("hello <tool_call>{") == len("hello ")
    assert possible_tool_call_start("a < b") == len("a < b")
    assert possible_tool_call_start("hello <") == len("hello ")


def test_text_actions_are_parse_replys_with_the_tools_passed_on():
    """``action_from_answer`` returns ``knowlyrcore.parse_reply``'s action and style; the text
    forms it reads are core's to test (``test_tool_parsing``). With the tool's schema a bare
    argument fills its one required parameter; without it the argument stays ``input``."""
    read_file = {
        "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {}}, "required": ["path"]},
    }
    text = "Thought: read it\nAction: read_file /sort.py"
    assert action_from_answer(text, [read_file]) == (
        {"tool": "read_file", "params": {"path": "/sort.py"}, "thought": "read it"},
        "text",
    )
    assert action_from_answer(text) == (
        {"tool": "read_file", "params": {"input": "/sort.py"}, "thought": "read it"},
        "text",
    )


def test_native_tool_call_action_keeps_the_thought():
    action, style = action_from_answer("Thought: need weather\n" + TOOL_CALL_ANSWER)
    assert action == {"tool": "get_weather", "params": {"city": "Paris"}, "thought": "need weather"}
    assert style == "tool_call"


def test_plain_prose_is_not_an_action():
    assert action_from_answer("The answer is 4.") is None


def test_tool_schemas_accept_openai_plain_and_attribute_forms():
    spec = SimpleNamespace(name="bash", description="run", parameters={"type": "object", "properties": {}})
    schemas = chat_template_tools([WEATHER, {"name": "ls"}, spec])
    assert [s["function"]["name"] for s in schemas] == ["get_weather", "ls", "bash"]
    assert schemas[1]["function"]["parameters"] == {"type": "object", "properties": {}}
    with pytest.raises(ValueError, match="needs a name"):
        chat_template_tools([{"description": "nameless"}])


# -- generation with a real model -----------------------------------------------------------


def test_generate_reproduces_the_trained_answers(engine):
    for example in EXAMPLES:
        assert engine.generate(example["messages"], example.get("tools")) == example["answer"]


def test_completion_accounting_and_finish_reasons(engine):
    messages = EXAMPLES[2]["messages"]
    full = engine.complete(messages)
    assert full.finish_reason == "stop"
    assert full.prompt_tokens == engine.encode(messages).shape[1]
    assert full.completion_tokens == len(
        engine.tokenizer("Hello there!<|im_end|>", add_special_tokens=False)["input_ids"]
    )
    short = engine.complete(messages, max_new_tokens=2)
    assert (short.finish_reason, short.completion_tokens) == ("length", 2)
    assert full.text.startswith(short.text)


def test_stop_strings_end_the_answer_before_them(engine):
    completion = engine.complete(EXAMPLES[1]["messages"], stop=["Action:"])
    assert completion.text == "Thought: look first\n"
    assert completion.finish_reason == "stop"


def test_stream_pieces_add_up_to_the_completion(engine):
    for example in EXAMPLES:
        stream = engine.stream(example["messages"], example.get("tools"))
        pieces = list(stream)
        assert len(pieces) > 1
        assert "".join(pieces) == example["answer"] == stream.completion.text
    stream = engine.stream(EXAMPLES[1]["messages"], stop=["first"])
    assert "".join(stream) == "Thought: look "


def test_sampling_is_reproducible_with_a_seed(engine):
    messages = [{"role": "user", "content": "Something it never saw"}]
    a = engine.generate(messages, temperature=1.5, seed=11, max_new_tokens=12)
    b = engine.generate(messages, temperature=1.5, seed=11, max_new_tokens=12)
    assert a == b
    torch.manual_seed(0)  # unseeded calls draw from the global RNG, so they differ from each other
    c = engine.generate(messages, temperature=1.5, max_new_tokens=12)
    d = engine.generate(messages, temperature=1.5, max_new_tokens=12)
    assert c != d


# -- the agent ------------------------------------------------------------------------------


def chat(agent):
    """The agent's episode so far, decoded (special tokens kept)."""
    return agent.tokenizer.decode(agent.records[0].token_ids)


def test_agent_turns_a_native_tool_call_into_an_action_and_feeds_back_a_tool_message(engine):
    agent = engine.create_agent(tools=[WEATHER])
    assert agent("Weather in Paris?") == {"tool": "get_weather", "params": {"city": "Paris"}, "thought": ""}
    agent("18 degrees, sunny")
    answered = f"<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n{TOOL_CALL_ANSWER}<|im_end|>\n"
    tool_turn = "<|im_start|>user\n<tool_response>\n18 degrees, sunny\n</tool_response><|im_end|>\n"
    assert answered + tool_turn + "<|im_start|>assistant\n" in chat(agent)
    assert len(agent.records[0].step_spans) == 2


def test_agent_parses_action_text_and_sends_observations_as_user_turns(engine):
    agent = engine.create_agent()
    assert agent("List the files.") == {"tool": "bash", "params": {"input": "ls -la"}, "thought": "look first"}
    agent({"output": "a.py", "exit_code": 0})
    assert (
        "<|im_start|>assistant\nThought: look first\nAction: bash ls -la<|im_end|>\n"
        '<|im_start|>user\nObservation: {"output": "a.py", "exit_code": 0}<|im_end|>\n'
    ) in chat(agent)


def test_system_prompt_leads_the_conversation_and_survives_reset(engine):
    agent = engine.create_agent(system_prompt="You are a coder.")
    agent("List the files.")
    opening = "<|im_start|>system\nYou are a coder.<|im_end|>\n<|im_start|>user\nList the files.<|im_end|>\n"
    assert chat(agent).startswith(opening)
    agent.reset()
    assert agent.records[0].token_ids == []
    agent("List the files.")
    assert chat(agent).startswith(opening)


def test_unparseable_answer_falls_back_to_a_reply(engine):
    agent = engine.create_agent()
    assert agent("Say hello.") == {"tool": "respond", "params": {"message": "Hello there!"}, "thought": ""}
    other = engine.create_agent(fallback_tool="finish")
    assert other("Say hello.")["tool"] == "finish"
