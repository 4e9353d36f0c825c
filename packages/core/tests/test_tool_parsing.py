"""The one tool-call parser: the <tool_call> state machine over chunks, every call shape, the
Thought/Action forms, and the two shared fallbacks (format_error, closing tool)."""

from __future__ import annotations

import json

import pytest

from knowlyrcore import (
    FunctionCall,
    ParserState,
    ToolCallParser,
    action_from_message,
    call_from_json,
    closing_action,
    parse_reply,
    parse_tool_calls,
    possible_tool_call_start,
    select_closing_tool,
)
from knowlyrcore.domain import get_domain_profile

READ_FILE = {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {}}, "required": ["path"]}}
TWO_CALLS = (
    'I will check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
    '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}'
)

# -- the state machine ---------------------------------------------------------------------------


def test_blocks_are_split_from_content_and_an_unclosed_last_block_is_accepted():
    assert parse_tool_calls(TWO_CALLS) == ("I will check.", [FunctionCall("a", {"x": 1}), FunctionCall("b", {"y": 2})])


@pytest.mark.parametrize("size", [1, 2, 3, 5, 11])
def test_any_chunking_gives_the_same_result_and_never_emits_a_tag(size):
    parser = ToolCallParser()
    emitted = [parser.feed(TWO_CALLS[i : i + size]) for i in range(0, len(TWO_CALLS), size)]
    emitted.append(parser.close())
    assert (parser.content, parser.calls) == parse_tool_calls(TWO_CALLS)
    assert "".join(emitted) == "I will check.\n\n"
    assert not any("<" in piece for piece in emitted)
    assert parser.state is ParserState.DONE


def test_states_follow_the_text():
    parser = ToolCallParser()
    assert parser.feed("a <tool_") == "a " and parser.state is ParserState.CONTENT
    assert parser.feed('call>{"name": "x"}') == "" and parser.state is ParserState.TOOL_CALL
    assert parser.feed("</tool_call> b") == " b" and parser.state is ParserState.CONTENT
    parser.close()
    assert parser.calls == [FunctionCall("x")]
    with pytest.raises(ValueError, match="after close"):
        parser.feed("more")


def test_a_partial_tag_that_is_not_a_tag_is_released():
    parser = ToolCallParser()
    assert parser.feed("a <tool") == "a "
    assert parser.feed("box> b") == "<toolbox> b"
    assert parser.close() == "" and parser.content == "a <toolbox> b" and parser.calls == []


def test_a_block_whose_json_fails_stays_in_the_content_as_a_format_error():
    text = 'ok <tool_call>{"name": "bash", "arguments": </tool_call> then <tool_call>{"x": 1}</tool_call>'
    parser = ToolCallParser()
    parser.feed(text)
    parser.close()
    assert parser.calls == [] and parser.content == text
    assert len(parser.errors) == 2
    assert parser.errors[0].startswith("<tool_call> block is not valid JSON (Expecting value at char 30)")
    assert parser.errors[1] == '<tool_call> block names no function: {"x": 1}'


def test_an_unclosed_broken_block_is_kept_without_a_closing_tag():
    parser = ToolCallParser()
    parser.feed("hi <tool_call>{broken")
    assert parser.close() == "<tool_call>{broken"
    assert parser.content == "hi <tool_call>{broken" and len(parser.errors) == 1


def test_possible_tool_call_start_holds_back_partial_tags():
    assert possible_tool_call_start("hello <tool") == len("hello ")
    assert possible_tool_call_start("hello <tool_call>{") == len("hello ")
    assert possible_tool_call_start("a < b") == len("a < b")
    assert possible_tool_call_start("hello <") == len("hello ")


# -- call shapes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"name": "ls", "arguments": {"path": "."}}, FunctionCall("ls", {"path": "."})),
        ({"name": "ls", "arguments": '{"path": "."}'}, FunctionCall("ls", {"path": "."})),
        ({"name": "ls", "arguments": ""}, FunctionCall("ls", {})),
        ({"name": " ls ", "parameters": {"path": "."}}, FunctionCall("ls", {"path": "."})),
        ({"tool": "ls", "params": {"path": "."}}, FunctionCall("ls", {"path": "."})),
        ({"tool": "ls", "params": None}, FunctionCall("ls", {})),
        ({"id": "c9", "function": {"name": "ls", "arguments": "{}"}}, FunctionCall("ls", {}, id="c9")),
        ({"arguments": {}}, None),
        ({"name": ""}, None),
        ("ls", None),
    ],
)
def test_call_shapes(obj, expected):
    assert call_from_json(obj) == expected


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ('{"path": ', "arguments of 'ls' are not valid JSON (Expecting value at char 9): {\"path\":"),
        ("[1, 2]", "arguments of 'ls' must be a JSON object, got array"),
        ('"a.py"', "arguments of 'ls' must be a JSON object, got string"),
        (7, "arguments of 'ls' must be a JSON object, got number"),
    ],
)
def test_unusable_arguments_keep_the_name_and_say_what_was_wrong(arguments, error):
    assert call_from_json({"name": "ls", "arguments": arguments}) == FunctionCall("ls", {}, error)


# -- text replies ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tools", "expected"),
    [
        (
            'Thought: t\nAction: {"name": "bash", "parameters": {"command": "ls"}}',
            None,
            ("bash", {"command": "ls"}, "t"),
        ),
        ('Action: {"tool": "respond", "params": {"message": "hi"}}', None, ("respond", {"message": "hi"}, "")),
        ('Thought: read it\nAction: read_file {"path": "a.py"}', None, ("read_file", {"path": "a.py"}, "read it")),
        ("Thought: read it\nAction: read_file /sort.py", None, ("read_file", {"input": "/sort.py"}, "read it")),
        (
            "Action: read_file /sort.py\nObservation: def sort(): ...",
            [READ_FILE],
            ("read_file", {"path": "/sort.py"}, ""),
        ),
        ('Action: read_file("a.py")', [READ_FILE], ("read_file", {"path": "a.py"}, "")),
        ('Action: read_file(path="a.py", lines=3)', None, ("read_file", {"path": "a.py", "lines": 3}, "")),
        ('Action: read_file({"path": "a.py"})', None, ("read_file", {"path": "a.py"}, "")),
        ("Action: read_file(src/a.py)", [READ_FILE], ("read_file", {"path": "src/a.py"}, "")),
        ("Action: submit", None, ("submit", {}, "")),
        ("Action: submit()", None, ("submit", {}, "")),
        ('Sure:\n```json\n{"name": "ls", "arguments": {}}\n```', None, ("ls", {}, "Sure:")),
        ('{"name": "Bob", "age": 3} and {"tool": "ls"}', None, ("ls", {}, '{"name": "Bob", "age": 3} and')),
    ],
)
def test_text_actions(text, tools, expected):
    reply = parse_reply(text, tools)
    assert (reply.action["tool"], reply.action["params"], reply.action["thought"]) == expected
    assert reply.style == "text" and "format_error" not in reply.action


def test_a_tool_call_block_wins_and_keeps_the_thought():
    text = 'Thought: need weather\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    reply = parse_reply(text)
    assert reply.action == {"tool": "get_weather", "params": {"city": "Paris"}, "thought": "need weather"}
    assert reply.style == "tool_call" and reply.content == "Thought: need weather"


def test_action_text_with_broken_json_arguments_names_the_tool():
    action = parse_reply('Action: bash {"command": "ls"').action
    assert (action["tool"], action["params"]) == ("bash", {})
    assert action["format_error"].startswith("arguments of 'bash' are not valid JSON")


@pytest.mark.parametrize(
    "text",
    ["<tool_call>{not json}</tool_call>", 'Thought: x\nAction: {"name": "bash", "arguments": {}', "Action: ???"],
)
def test_a_failed_attempt_at_a_call_closes_with_a_format_error(text):
    reply = parse_reply(text)
    assert reply.style == "reply"
    assert reply.action["tool"] == "respond" and reply.action["params"] == {"message": text}
    assert reply.action["format_error"]


def test_plain_prose_and_non_call_json_close_without_a_format_error():
    for text in ("The answer is 4.", 'Here: {"name": "Bob"}'):
        reply = parse_reply(f"  {text}\n")
        assert reply.style == "reply"
        assert reply.action == {"tool": "respond", "params": {"message": text}, "thought": ""}


# -- the closing tool ------------------------------------------------------------------------------


def test_closing_tool_is_the_first_of_finish_submit_respond_the_domain_has():
    assert select_closing_tool(get_domain_profile("coding").tools) == "finish"
    assert select_closing_tool(["respond", "submit"]) == "submit"
    assert select_closing_tool([{"type": "function", "function": {"name": "respond"}}]) == "respond"
    assert select_closing_tool(["bash"]) == "respond"
    assert closing_action("42", ["bash", "submit"]) == {"tool": "submit", "params": {"answer": "42"}, "thought": ""}
    assert closing_action("hi", closing_tool="finish")["params"] == {"message": "hi"}
    assert closing_action("hi", closing_tool="shout")["params"] == {"message": "hi"}


# -- OpenAI assistant messages ---------------------------------------------------------------------


def _message(arguments, content="Look.", name="bash"):
    call = {"id": "call_7", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": content, "tool_calls": [call, {**call, "id": "call_8"}]}


def test_the_first_native_call_is_the_action():
    action = action_from_message(_message('{"command": "ls"}'))
    assert action == {"tool": "bash", "params": {"command": "ls"}, "thought": "Look.", "id": "call_7"}


@pytest.mark.parametrize("arguments", ['{"command": ', "[]", '"ls"', "null x"])
def test_native_calls_with_unusable_arguments_carry_a_format_error(arguments):
    action = action_from_message(_message(arguments))
    assert (action["tool"], action["params"], action["id"]) == ("bash", {}, "call_7")
    assert action["format_error"].startswith("arguments of 'bash' ")


def test_a_native_call_without_id_gets_one_and_a_legacy_function_call_counts():
    call = {"function": {"name": "ls", "arguments": "{}"}}
    assert action_from_message({"content": None, "tool_calls": [call]})["id"] == "call_0"
    legacy = {"content": None, "function_call": {"name": "ls", "arguments": "{}"}}
    assert action_from_message(legacy) == {"tool": "ls", "params": {}, "thought": "", "id": "call_0"}


def test_a_message_without_native_calls_is_parsed_as_text():
    text = 'Thought: t\n<tool_call>{"name": "ls", "arguments": {}}</tool_call>'
    assert action_from_message({"content": text})["tool"] == "ls"
    parts = [{"type": "text", "text": "All "}, {"type": "text", "text": "done."}]
    assert action_from_message({"content": parts}, ["finish"]) == {
        "tool": "finish",
        "params": {"message": "All done."},
        "thought": "",
    }


def test_a_nameless_native_call_closes_with_a_format_error():
    message = {"content": "done", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}
    action = action_from_message(message)
    assert action["tool"] == "respond" and action["params"] == {"message": "done"}
    assert action["format_error"].startswith("tool call names no function")


def test_sdk_objects_are_read_through_model_dump():
    class SdkMessage:
        def model_dump(self, exclude_none=False):
            return _message(json.dumps({"command": "pwd"}))

    assert action_from_message(SdkMessage())["params"] == {"command": "pwd"}
    with pytest.raises(TypeError, match="assistant message"):
        action_from_message("just text")
