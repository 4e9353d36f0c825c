"""``knowlyr-trainer serve`` as a token-in / token-out backend for online RL: ``/v1/completions``
with vLLM's token fields and ``/v1/load_weights``, run for real (``ServerProcess``) on 127.0.0.1
and checked against the same weights in this process (``LocalGenerator``, a plain forward pass).

    pytest packages/trainer/tests/test_serving_tokens.py -m integration
"""

from __future__ import annotations

import copy
import json
import shutil
import socket
import urllib.error
import urllib.request
from types import SimpleNamespace

import openai
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from agenttrainer.acting.generators import GenerationError, LocalGenerator, ServerGenerator
from agenttrainer.models import build_tiny_model, load_model_and_tokenizer, overfit_tiny_model, save_model
from agenttrainer.models.lora import apply_lora
from agenttrainer.serving.background import ServerProcess
from agenttrainer.serving.cli import serve

MODEL = "tiny-tokens"
HELLO = [{"role": "user", "content": "Say hello."}]
HI = [{"role": "user", "content": "Say hi."}]
MAX_NEW = 8

pytestmark = pytest.mark.integration  # real server processes on loopback


def _lora(model, tokenizer, directory, seed):
    """A LoRA adapter on ``model`` whose (normally zero) B matrices are random, so it changes the answers."""
    peft_model = apply_lora(copy.deepcopy(model), {"r": 4, "lora_dropout": 0.0})
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 2.0)
    return str(save_model(peft_model, tokenizer, directory, merge_lora=False))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """The served checkpoint (fitted to answer HELLO), one with other weights, one of another
    architecture, and LoRA adapters for the first and the other architecture."""
    root = tmp_path_factory.mktemp("tokens")
    model, tokenizer = build_tiny_model(hidden_size=64, seed=0)
    overfit_tiny_model(model, tokenizer, [{"messages": HELLO, "answer": "Hello there!"}])
    narrow, _ = build_tiny_model(hidden_size=32, seed=0)
    return SimpleNamespace(
        fitted=str(save_model(model, tokenizer, root / MODEL)),
        other=str(save_model(build_tiny_model(hidden_size=64, seed=1)[0], tokenizer, root / "other")),
        narrow=str(save_model(narrow, tokenizer, root / "narrow")),
        lora1=_lora(model, tokenizer, root / "lora1", seed=1),
        lora2=_lora(model, tokenizer, root / "lora2", seed=2),
        narrow_lora=_lora(narrow, tokenizer, root / "narrow-lora", seed=1),
    )


@pytest.fixture(scope="module")
def server(ckpt):
    with ServerProcess(ckpt.fitted, "--allow-weight-updates", "--max-tokens", "16") as server:
        assert server.model_name == MODEL
        yield server


@pytest.fixture
def restore(server, ckpt):
    """Tests that load weights put the fitted checkpoint back (which also drops any adapter)."""
    yield
    status, body = _post(server, "/load_weights", {"path": ckpt.fitted})
    assert status == 200, body


@pytest.fixture(scope="module")
def prompts(tokenizer):
    """Two chat prompts sharing a long prefix (the default system turn) and a short raw one."""

    def chat(messages):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]

    return [chat(HELLO), chat(HI), [5, 6, 7]]


def _post(server, route, body):
    """``(status, json body)`` of a POST to the server's ``/v1`` API."""
    request = urllib.request.Request(
        server.base_url + route, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _complete(server, prompt, **fields):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0, **fields}
    status, reply = _post(server, "/completions", body)
    assert status == 200, reply
    return reply


def _greedy_ids(server, prompts):
    reply = _complete(server, prompts, return_token_ids=True)
    return [choice["token_ids"] for choice in reply["choices"]]


def _local(path_or_model, prompts, tokenizer=None, **options):
    """Greedy samples of the same weights in this process."""
    if isinstance(path_or_model, str):
        path_or_model, tokenizer = load_model_and_tokenizer(path_or_model)
    generator = LocalGenerator(path_or_model, tokenizer)
    return generator.generate(prompts, max_new_tokens=MAX_NEW, temperature=0, **options)


def _with_adapter(base_path, adapter_path):
    from peft import PeftModel

    model, tokenizer = load_model_and_tokenizer(base_path)
    return PeftModel.from_pretrained(model, adapter_path).eval(), tokenizer


# -- /v1/completions ----------------------------------------------------------------------


def test_batch_of_token_prompts_gets_one_choice_per_prompt(server, prompts, tokenizer):
    reply = _complete(server, prompts, logprobs=0, return_token_ids=True)
    assert reply["id"].startswith("cmpl-") and reply["object"] == "text_completion" and reply["model"] == MODEL
    choices = reply["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    for prompt, choice in zip(prompts, choices):
        ids, logprobs = choice["token_ids"], choice["logprobs"]
        assert choice["prompt_token_ids"] == prompt
        assert 0 < len(ids) <= MAX_NEW
        assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["text_offset"]) == len(ids)
        assert all(lp <= 0 for lp in logprobs["token_logprobs"]) and logprobs["top_logprobs"] is None
        assert logprobs["tokens"] == [tokenizer.decode([t]) for t in ids]
        assert logprobs["text_offset"][0] == 0
        assert choice["finish_reason"] == ("stop" if len(ids) < MAX_NEW else "length")
    # The fitted answer ends on the end-of-turn token: in token_ids, not in the text.
    hello = choices[0]
    assert (hello["text"], hello["finish_reason"]) == ("Hello there!", "stop")
    assert tokenizer.decode(hello["token_ids"]) == "Hello there!<|im_end|>"
    assert reply["usage"] == {
        "prompt_tokens": sum(map(len, prompts)),
        "completion_tokens": sum(len(c["token_ids"]) for c in choices),
        "total_tokens": sum(map(len, prompts)) + sum(len(c["token_ids"]) for c in choices),
    }


def test_greedy_answers_and_logprobs_match_the_same_weights_in_process(server, ckpt, prompts):
    model, tokenizer = load_model_and_tokenizer(ckpt.fitted)
    # With and without the short prompt: the chat prompts alone share a prefix prefilled once.
    for batch in (prompts, prompts[:2]):
        choices = _complete(server, batch, logprobs=0, return_token_ids=True)["choices"]
        local = _local(model, batch, tokenizer)
        assert [c["token_ids"] for c in choices] == [s.token_ids for s in local]
        assert [c["finish_reason"] for c in choices] == [s.finish_reason for s in local]
        for prompt, choice in zip(batch, choices):
            ids = choice["token_ids"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([prompt + ids])).logits[0]  # (T, V)
            expected = logits[len(prompt) - 1 : -1].log_softmax(-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
            assert torch.allclose(torch.tensor(choice["logprobs"]["token_logprobs"]), expected, atol=1e-4)


def test_server_generator_drives_the_server_unchanged(server, ckpt, prompts):
    generator = ServerGenerator(server.base_url, MODEL)
    samples = generator.generate(prompts, max_new_tokens=MAX_NEW, temperature=0)
    local = _local(ckpt.fitted, prompts)
    assert [(s.token_ids, s.finish_reason) for s in samples] == [(s.token_ids, s.finish_reason) for s in local]
    assert all(
        torch.allclose(torch.tensor(s.logprobs), torch.tensor(e.logprobs), atol=1e-4) for s, e in zip(samples, local)
    )
    sampled = generator.generate(prompts, max_new_tokens=MAX_NEW, temperature=1.0, top_p=0.9)
    assert all(0 < len(s.token_ids) == len(s.logprobs) <= MAX_NEW for s in sampled)


def test_seeded_sampling_is_reproducible(server, prompts):
    first, again = (_complete(server, prompts, temperature=1.0, seed=7, return_token_ids=True) for _ in range(2))
    assert [c["token_ids"] for c in first["choices"]] == [c["token_ids"] for c in again["choices"]]


def test_a_seeded_server_samples_the_same_after_a_restart_and_unseeded_ones_differ(tiny_path, prompts):
    """``serve --seed`` seeds the sampler once at start: two server processes with the same seed
    answer the same unseeded requests alike; without it each process draws its own samples."""

    def samples(*args):
        with ServerProcess(tiny_path, "--model-name", MODEL, *args) as server:
            return [
                [c["token_ids"] for c in _complete(server, prompts, temperature=1.0, return_token_ids=True)["choices"]]
                for _ in range(2)
            ]

    seeded = samples("--seed", "11")
    assert seeded[0] != seeded[1]  # the stream moves on between requests
    assert samples("--seed", "11") == seeded
    assert samples() != samples()


def test_string_prompts_and_the_openai_sdk(server, tokenizer):
    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        reply = client.completions.create(
            model=MODEL, prompt=["Hello", "The sky"], max_tokens=4, temperature=0, extra_body={"return_token_ids": True}
        )
    assert len(reply.choices) == 2 and reply.choices[0].logprobs is None
    for text, choice in zip(["Hello", "The sky"], reply.choices):
        assert choice.prompt_token_ids == tokenizer(text)["input_ids"]  # plain tokenization, no chat template
        answer = choice.token_ids[:-1] if choice.finish_reason == "stop" else choice.token_ids
        assert choice.text == tokenizer.decode(answer, skip_special_tokens=True)
    mixed = _complete(server, ["Hello", [5, 6]], return_token_ids=True)["choices"]
    assert [c["prompt_token_ids"] for c in mixed] == [tokenizer("Hello")["input_ids"], [5, 6]]


def test_special_tokens_stay_out_of_the_text_and_in_the_logprob_tokens(server, prompts):
    choice = _complete(server, prompts[0], logprobs=0, skip_special_tokens=False)["choices"][0]
    assert choice["text"] == "Hello there!"  # the end-of-turn token that stopped generation is not text
    assert choice["logprobs"]["tokens"][-1] == "<|im_end|>"
    assert "token_ids" not in choice and "prompt_token_ids" not in choice  # only with return_token_ids


@pytest.mark.parametrize(
    ("fields", "param", "status"),
    [
        ({"prompt": []}, "prompt", 400),
        ({"prompt": ""}, "prompt", 400),
        ({"prompt": {"ids": [5]}}, "prompt", 400),
        ({"prompt": [5, -1]}, "prompt", 400),
        ({"prompt": [5, 6.5]}, "prompt", 400),
        ({"prompt": [[5, 6], []]}, "prompt[1]", 400),
        ({"prompt": [[5, 6], [5, 10**6]]}, "prompt[1]", 400),
        ({"prompt": ["hi", 5]}, "prompt[1]", 400),
        ({"n": 2}, "n", 400),
        ({"stream": True}, "stream", 400),
        ({"echo": True}, "echo", 400),
        ({"logprobs": -1}, "logprobs", 400),
        ({"logprobs": 5}, "logprobs", 400),
        ({"temperature": 2.5}, "temperature", 400),
        ({"max_tokens": 0}, "max_tokens", 400),
        ({"stop": ["there"]}, "stop", 400),
        ({"return_token_ids": "yes"}, "return_token_ids", 400),
        ({"model": "gpt-4o"}, "model", 404),
    ],
)
def test_bad_requests_get_openai_errors_naming_the_field(server, fields, param, status):
    code, body = _post(server, "/completions", {"model": MODEL, "prompt": [5, 6], **fields})
    assert code == status
    error = body["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"


def test_error_messages_say_what_is_wrong(server):
    _, body = _post(server, "/completions", {"model": MODEL, "prompt": [[5], [5, 49152]]})
    assert "prompt[1][1] must be a token id in [0, 49152), got 49152" in body["error"]["message"]
    _, body = _post(server, "/completions", {"model": MODEL, "prompt": [5], "stream": True})
    assert "stream is not supported on /v1/completions" in body["error"]["message"]
    code, body = _post(server, "/completions", {"model": MODEL, "prompt": [5] * 2048})
    assert (code, body["error"]["code"]) == (400, "context_length_exceeded")
    assert "prompt has 2048 tokens; the model's context is 2048" in body["error"]["message"]


def test_a_down_endpoint_raises_generation_error(server):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free, and nothing listens once the socket is closed
    with pytest.raises(GenerationError, match="unreachable"):
        ServerGenerator(f"http://127.0.0.1:{port}/v1", MODEL, timeout=10).generate([[5, 6]], max_new_tokens=2)
    with pytest.raises(GenerationError, match="HTTP 404"):  # the server answers, but refuses
        ServerGenerator(server.base_url, "not-served").generate([[5, 6]], max_new_tokens=2)


# -- /v1/load_weights ---------------------------------------------------------------------


def test_weight_updates_are_off_by_default(tiny_path):
    with ServerProcess(tiny_path) as server:
        code, body = _post(server, "/load_weights", {"path": tiny_path})
    assert code == 403
    assert body["error"]["code"] == "weight_updates_disabled"
    assert "--allow-weight-updates" in body["error"]["message"]


def test_help_warns_that_weight_updates_read_the_servers_disk():
    result = CliRunner().invoke(serve, ["--help"])
    assert "--allow-weight-updates" in result.output and "disk" in result.output


def test_loading_a_checkpoint_changes_the_answers_to_its_own(server, ckpt, prompts, restore):
    before = _greedy_ids(server, prompts)
    code, body = _post(server, "/load_weights", {"path": ckpt.other})
    assert code == 200 and (body["status"], body["path"]) == ("ok", ckpt.other)
    after = _greedy_ids(server, prompts)
    assert after != before
    assert after == [s.token_ids for s in _local(ckpt.other, prompts)]
    # The chat endpoint serves the same, new weights.
    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        chat = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=MAX_NEW)
    assert chat.choices[0].message.content != "Hello there!"
    code, again = _post(server, "/load_weights", {"path": ckpt.fitted})
    assert (code, again["version"]) == (200, body["version"] + 1)
    assert _greedy_ids(server, prompts) == before


def test_server_generator_pushes_weights(server, ckpt, prompts, restore):
    generator = ServerGenerator(server.base_url, MODEL, push_weights="knowlyr")
    generator.weights_updated(path=ckpt.other)
    samples = generator.generate(prompts, max_new_tokens=MAX_NEW, temperature=0)
    assert [s.token_ids for s in samples] == [s.token_ids for s in _local(ckpt.other, prompts)]


def test_a_mismatched_checkpoint_is_refused_and_the_weights_stay(server, ckpt, prompts, tmp_path):
    before = _greedy_ids(server, prompts)
    code, body = _post(server, "/load_weights", {"path": ckpt.narrow})
    assert (code, body["error"]["param"], body["error"]["code"]) == (400, "path", "weights_mismatch")
    assert (
        "'model.embed_tokens.weight' has shape [49152, 32], the served model's is [49152, 64]"
        in (body["error"]["message"])
    )
    (tmp_path / "empty").mkdir()
    weights = load_file(f"{ckpt.fitted}/model.safetensors")
    for name, tensors in [
        ("lacking", {k: v for k, v in weights.items() if k != "model.norm.weight"}),
        ("extra", {**weights, "model.extra.weight": torch.zeros(2)}),
    ]:
        shutil.copytree(ckpt.fitted, tmp_path / name)
        save_file(tensors, tmp_path / name / "model.safetensors")
    for path, message in [
        (str(tmp_path / "missing"), "is not a directory on the server"),
        (str(tmp_path / "empty"), "holds neither a checkpoint"),
        (str(tmp_path / "lacking"), "'model.norm.weight' is missing"),
        (str(tmp_path / "extra"), "'model.extra.weight' is not a weight of the served model"),
    ]:
        code, body = _post(server, "/load_weights", {"path": path})
        assert (code, body["error"]["param"]) == (400, "path") and message in body["error"]["message"]
    code, body = _post(server, "/load_weights", {"path": 3})
    assert (code, body["error"]["param"]) == (400, "path")
    assert _greedy_ids(server, prompts) == before


def test_lora_adapters_replace_each_other(server, ckpt, prompts, restore):
    fitted = _greedy_ids(server, prompts)
    answers = []
    for adapter in (ckpt.lora1, ckpt.lora2):
        code, body = _post(server, "/load_weights", {"path": adapter})
        assert code == 200, body
        answers.append(_greedy_ids(server, prompts))
        model, tokenizer = _with_adapter(ckpt.fitted, adapter)
        assert answers[-1] == [s.token_ids for s in _local(model, prompts, tokenizer)]
    assert fitted != answers[0] != answers[1]  # the second replaced the first: not stacked on it
    code, body = _post(server, "/load_weights", {"path": ckpt.narrow_lora})
    assert (code, body["error"]["code"]) == (400, "weights_mismatch")
    assert "size mismatch for base_model.model.model.layers.0.self_attn.q_proj.lora_A" in body["error"]["message"]
    assert _greedy_ids(server, prompts) == answers[1]  # the previous adapter is back on
    code, _ = _post(server, "/load_weights", {"path": ckpt.fitted})
    assert code == 200 and _greedy_ids(server, prompts) == fitted  # a full checkpoint drops the adapter
