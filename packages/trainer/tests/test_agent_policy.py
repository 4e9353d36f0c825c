"""The trainer's ``Agent`` passes knowlyr-core's policy suite. The engine is a stand-in whose
``generate`` returns scripted text (the model is only the text source: what is tested is the
parsing and the conversation), rendered the way the chat template teaches the model to write
tool calls."""

from __future__ import annotations

import copy

import pytest

from agenttrainer.inference import Agent
from agenttrainer.models import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from agenttrainer.models.tool_calls import ToolCall
from knowlyrcore import TOOL_CALL_CLOSE as CORE_CLOSE
from knowlyrcore import TOOL_CALL_OPEN as CORE_OPEN
from knowlyrcore import FunctionCall
from knowlyrcore.domain import get_domain_profile
from knowlyrcore.testing import PolicyConformance

CODING_TOOLS = get_domain_profile("coding").tools


class ScriptedEngine:
    """``generate`` answers with the next scripted text and records the messages it was given."""

    def __init__(self):
        self.answers: list[str] = []
        self.requests: list[list[dict]] = []
        self.tools_seen: list = []

    def generate(self, messages, tools=None, **options):
        self.requests.append(copy.deepcopy(messages))
        self.tools_seen.append(tools)
        return self.answers.pop(0)


class TestAgentConforms(PolicyConformance):
    closing_tool, closing_param = "finish", "message"  # the coding domain's first closing tool

    @pytest.fixture(autouse=True)
    def _engine(self):
        self.engine = ScriptedEngine()

    def make_policy(self):
        return Agent(self.engine, system_prompt="You are a coding agent.", tools=CODING_TOOLS)

    def script_replies(self, replies):
        self.engine.answers.extend(self.hermes_text(reply) for reply in replies)

    def model_requests(self):
        return self.engine.requests


@pytest.fixture
def engine():
    return ScriptedEngine()


def test_the_agent_offers_its_tools_as_openai_schemas(engine):
    engine.answers.append("ok")
    Agent(engine, tools=CODING_TOOLS)("task")
    assert "bash" in {schema["function"]["name"] for schema in engine.tools_seen[0]}


def test_a_call_with_unusable_arguments_is_kept_verbatim_and_answered_as_text(engine):
    broken = '<tool_call>{"name": "bash", "arguments": "{\\"command\\": "}</tool_call>'
    engine.answers += [broken, "Done."]
    agent = Agent(engine, tools=CODING_TOOLS)
    action = agent("task")
    assert (action["tool"], action["params"]) == ("bash", {})
    assert action["format_error"].startswith("arguments of 'bash' are not valid JSON")
    agent("error: invalid parameters")
    assert engine.requests[1][1:] == [
        {"role": "assistant", "content": broken},
        {"role": "user", "content": "Observation: error: invalid parameters"},
    ]


def test_after_a_plain_reply_the_next_observation_is_a_plain_user_turn(engine):
    engine.answers += ["Which file?", "Action: read_file a.py", "ok"]
    agent = Agent(engine)
    assert agent("fix it") == {"tool": "respond", "params": {"message": "Which file?"}, "thought": ""}
    assert agent("sort.py")["tool"] == "read_file"
    agent("def sort(): ...")
    assert [m["content"] for m in engine.requests[2] if m["role"] == "user"] == [
        "fix it",
        "sort.py",
        "Observation: def sort(): ...",
    ]


def test_fallback_tool_forces_the_closing_tool(engine):
    engine.answers.append("bye")
    agent = Agent(engine, tools=CODING_TOOLS, fallback_tool="submit")
    assert agent("task") == {"tool": "submit", "params": {"answer": "bye"}, "thought": ""}


def test_the_trainer_names_are_the_core_parser():
    assert ToolCall is FunctionCall and ToolCall("a", {"x": 1}) == FunctionCall("a", {"x": 1})
    assert (TOOL_CALL_OPEN, TOOL_CALL_CLOSE) == (CORE_OPEN, CORE_CLOSE)
