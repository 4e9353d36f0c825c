"""The OpenAI-compatible server, run for real (``ServerProcess``: ``python -m agenttrainer.serving``) on 127.0.0.1 and
driven by the official ``openai`` SDK, on a tiny model trained to known answers.

    pytest packages/trainer/tests/test_serving.py -m integration
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from agenttrainer.models import build_tiny_model, load_tokenizer, overfit_tiny_model, save_model
from agenttrainer.serving.background import ServerProcess

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
PARIS = [{"role": "user", "content": "Weather in Paris?"}]
HELLO = [{"role": "user", "content": "Say hello."}]
EXAMPLES = [
    {
        "messages": PARIS,
        "tools": [WEATHER],
        "answer": 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    },
    {"messages": HELLO, "answer": "Hello there!"},
]
MODEL = "tiny-fitted"

pytestmark = pytest.mark.integration  # a real server process on loopback


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model, tokenizer = build_tiny_model(hidden_size=64, seed=0)
    overfit_tiny_model(model, tokenizer, EXAMPLES)
    return str(save_model(model, tokenizer, tmp_path_factory.mktemp("served") / MODEL))


@pytest.fixture(scope="module")
def client(checkpoint):
    with ServerProcess(checkpoint, "--max-tokens", "64") as server:
        assert server.model_name == MODEL
        with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client:
            yield client


def _prompt_tokens(checkpoint, messages, tools=None) -> int:
    tokenizer = load_tokenizer(checkpoint)
    return len(
        tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_dict=True)["input_ids"]
    )


def test_models_endpoint_lists_the_served_checkpoint(client):
    assert [m.id for m in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).owned_by == "knowlyr"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_plain_completion(client, checkpoint):
    response = client.chat.completions.create(model=MODEL, messages=HELLO)
    choice = response.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == ("assistant", "Hello there!", "stop")
    assert choice.message.tool_calls is None
    assert response.usage.prompt_tokens == _prompt_tokens(checkpoint, HELLO)
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens
    assert response.id.startswith("chatcmpl-")


def test_tool_call_comes_back_as_tool_calls(client):
    response = client.chat.completions.create(model=MODEL, messages=PARIS, tools=[WEATHER])
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})


def test_tool_result_round_trip_is_accepted(client):
    first = client.chat.completions.create(model=MODEL, messages=PARIS, tools=[WEATHER]).choices[0].message
    messages = [
        *PARIS,
        first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "18C and sunny"},
    ]
    response = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
    assert response.usage.prompt_tokens > 0
    assert response.choices[0].finish_reason in {"stop", "length", "tool_calls"}


def test_tool_choice_none_hides_the_tools(client):
    response = client.chat.completions.create(model=MODEL, messages=PARIS, tools=[WEATHER], tool_choice="none")
    assert response.choices[0].message.tool_calls is None


def test_stream_of_text(client, checkpoint):
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=HELLO, stream=True, stream_options={"include_usage": True})
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there!"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1  # really streamed
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == _prompt_tokens(checkpoint, HELLO)


def test_stream_of_a_tool_call_never_leaks_the_markup(client):
    chunks = list(client.chat.completions.create(model=MODEL, messages=PARIS, tools=[WEATHER], stream=True))
    deltas = [c.choices[0].delta for c in chunks]
    text = "".join(d.content or "" for d in deltas)
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    assert "<tool" not in text and text.strip() == "Checking."
    assert [(tc.index, tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
        (0, "get_weather", {"city": "Paris"})
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_max_tokens_and_stop(client):
    short = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2)
    assert (short.choices[0].finish_reason, short.usage.completion_tokens) == ("length", 2)
    stopped = client.chat.completions.create(model=MODEL, messages=HELLO, stop=["there"])
    assert (stopped.choices[0].message.content, stopped.choices[0].finish_reason) == ("Hello ", "stop")
    streamed = client.chat.completions.create(model=MODEL, messages=HELLO, stop="there", stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == "Hello "


def test_logprobs_are_the_models_own(client, checkpoint):
    import torch

    from agenttrainer.models import load_model_and_tokenizer

    response = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=3, logprobs=True, top_logprobs=4)
    content = response.choices[0].logprobs.content
    assert len(content) == response.usage.completion_tokens == 3
    # the first token's distribution, computed here from the checkpoint and the prompt
    model, tokenizer = load_model_and_tokenizer(checkpoint)
    ids = tokenizer.apply_chat_template(HELLO, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    with torch.no_grad():
        dist = model(input_ids=ids["input_ids"]).logits[0, -1].float().log_softmax(-1)
    values, top_ids = dist.topk(4)
    first = content[0]
    alone = tokenizer.batch_decode([[i] for i in top_ids.tolist()], clean_up_tokenization_spaces=False)
    assert [t.token for t in first.top_logprobs] == alone  # each token decoded alone, as vLLM shows them
    assert [t.logprob for t in first.top_logprobs] == pytest.approx(values.tolist(), abs=1e-4)
    assert first.token == first.top_logprobs[0].token  # greedy took the likeliest
    assert first.logprob == pytest.approx(values[0].item(), abs=1e-4)
    assert first.bytes == list(first.token.encode())
    assert "".join(t.token for t in content) == "Hello there!"[: len("".join(t.token for t in content))]
    assert client.chat.completions.create(model=MODEL, messages=HELLO).choices[0].logprobs is None
    plain = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2, logprobs=True)
    assert all(t.top_logprobs == [] for t in plain.choices[0].logprobs.content)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_logprobs": 2}, "top_logprobs needs logprobs: true"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs must be an integer in [0, 20]"),
        ({"logprobs": "yes"}, "logprobs must be true or false"),
        ({"logprobs": True, "stream": True}, "logprobs are not streamed"),
    ],
)
def test_bad_logprobs_requests_are_refused(client, kwargs, message):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=HELLO, **kwargs)
    assert message in info.value.body["message"]


def test_concurrent_requests_are_served_one_at_a_time_with_the_same_answer(client):
    with ThreadPoolExecutor(4) as pool:
        answers = list(
            pool.map(
                lambda _: client.chat.completions.create(model=MODEL, messages=HELLO).choices[0].message.content,
                range(4),
            )
        )
    assert answers == ["Hello there!"] * 4


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"model": "gpt-4o"}, "model"),
        ({"n": 2}, "n"),
        ({"temperature": 3.5}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages[0].content",
        ),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"messages": []}, "messages"),
    ],
)
def test_bad_requests_get_openai_errors_naming_the_field(client, kwargs, param):
    request = {"model": MODEL, "messages": HELLO, **kwargs}
    with pytest.raises((openai.BadRequestError, openai.NotFoundError)) as info:
        client.chat.completions.create(**request)
    assert info.value.body["param"] == param
    assert info.value.body["message"]


def test_prompt_longer_than_the_context_is_refused(client):
    too_long = [{"role": "user", "content": "hello " * 2100}]  # the tiny model's context is 2048 tokens
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=too_long)
    assert info.value.body["code"] == "context_length_exceeded"
    assert "context is 2048" in info.value.body["message"]


def test_server_process_reports_a_startup_failure_with_the_servers_error():
    with pytest.raises(RuntimeError, match="exited with code") as info, ServerProcess("./no/such/checkpoint"):
        pass
    assert "does not exist" in str(info.value)
