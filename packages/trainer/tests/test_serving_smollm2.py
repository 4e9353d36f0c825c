"""The OpenAI-compatible server on the embedded SmolLM2-135M-Instruct, through the openai SDK
(integration: real weights, real server on 127.0.0.1).

    pytest packages/trainer/tests/test_serving_smollm2.py -m integration
"""

from __future__ import annotations

import json

import openai
import pytest

from agenttrainer.serving.background import ServerProcess

pytestmark = pytest.mark.integration

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def client():
    with (
        ServerProcess("smollm2-135m", "--dtype", "bfloat16") as server,
        openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client,
    ):
        yield client


def test_answers_through_the_sdk(client):
    response = client.chat.completions.create(model="smollm2-135m", messages=QUESTION, max_tokens=24)
    assert "4" in response.choices[0].message.content
    assert response.choices[0].finish_reason == "stop"


def test_streamed_answer_equals_the_plain_one(client):
    plain = client.chat.completions.create(model="smollm2-135m", messages=QUESTION, max_tokens=24)
    stream = client.chat.completions.create(model="smollm2-135m", messages=QUESTION, max_tokens=24, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream) == plain.choices[0].message.content


def test_a_request_with_tools_gets_a_well_formed_answer(client):
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    choice = client.chat.completions.create(
        model="smollm2-135m", messages=messages, tools=[tool], max_tokens=48
    ).choices[0]
    if choice.finish_reason == "tool_calls":  # the 135M model may or may not call the tool
        assert all(isinstance(json.loads(c.function.arguments), dict) for c in choice.message.tool_calls)
    else:
        assert choice.message.content and "<tool_call>" not in choice.message.content
