"""The OpenAI-compatible server on the embedded SmolLM2-135M-Instruct, through the openai SDK
(integration: real weights, real server on 127.0.0.1).

    pytest packages/trainer/tests/test_serving_smollm2.py -m integration
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import openai
import pytest

pytestmark = pytest.mark.integration

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def client():
    proc = subprocess.Popen(
        [sys.executable, "-m", "agenttrainer.serving", "smollm2-135m", "--port", "0", "--dtype", "bfloat16"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()  # printed once the model is loaded
    assert line.startswith("serving smollm2-135m at "), line + proc.stderr.read()
    base_url = line.rsplit(" ", 1)[-1].strip()
    deadline = time.monotonic() + 60
    while True:  # poll readiness
        try:
            if httpx.get(base_url.removesuffix("/v1") + "/health", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
    yield openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    proc.terminate()
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()


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
