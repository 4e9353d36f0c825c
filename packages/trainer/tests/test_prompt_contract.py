"""A checkpoint carries the prompt it was trained with: written by SFT and online RL, read back on
load, passed along a training chain, and the default of online RL and the server."""

import json

import httpx
import pytest

from agenttrainer.config import OnlineRLConfig, SFTConfig
from agenttrainer.models import (
    ModelLoadError,
    PromptContract,
    attach_contract,
    build_tiny_model,
    contract_of,
    load_model_and_tokenizer,
    read_contract,
    save_model,
)
from agenttrainer.models.prompt_contract import CONTRACT_FILE, contract_of_chats
from agenttrainer.online import OnlineRLTrainer
from agenttrainer.serving.background import ServerProcess
from agenttrainer.trainers.sft import SFTTrainer
from knowlyrcore import AgentEnv, TimeStep, register, unregister
from knowlyrcore.testing import require_module

SYSTEM = "You are the shop's agent. Answer briefly."


def chat_rows(n=6, system=SYSTEM, tools=None):
    rows = []
    for i in range(n):
        messages = [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
        row = {"messages": ([{"role": "system", "content": system}] if system else []) + messages}
        if tools:
            row["tools"] = tools
        rows.append(row)
    return rows


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def sft(tmp_path, model, rows, name="sft", **kw):
    config = SFTConfig.from_dict(
        {
            "model_name_or_path": model,
            "train_file": write_rows(tmp_path / f"{name}.jsonl", rows),
            "output_dir": str(tmp_path / name),
            "max_optimizer_steps": 2,
            "batch_size": 2,
            "save_steps": 1,
            "bf16": False,
            "progress_bar": False,
            "learning_rate": 1e-3,
            **kw,
        }
    )
    return SFTTrainer(config).train()["output_dir"]


def test_contract_file_round_trip_and_errors_name_the_file_and_field(tmp_path):
    from agenttrainer.models.prompt_contract import write_contract

    contract = PromptContract(system_prompt=SYSTEM, include_tools=False)
    write_contract(tmp_path, contract)
    assert read_contract(tmp_path) == contract
    assert read_contract(tmp_path / "nowhere") is None
    for body, field in (
        ('{"schema_version": 1, "system_prompt": 3, "include_tools": true}', "system_prompt"),
        ('{"schema_version": 1, "system_prompt": null, "include_tools": "no"}', "include_tools"),
        ('{"schema_version": 2, "include_tools": true}', "schema_version"),
        ("[1, 2]", "expected a JSON object"),
        ("{not json", "not readable JSON"),
    ):
        (tmp_path / CONTRACT_FILE).write_text(body)
        with pytest.raises(ModelLoadError, match=rf"{CONTRACT_FILE}: .*{field}|{CONTRACT_FILE}: {field}") as info:
            read_contract(tmp_path)
        assert "\n" not in str(info.value)


def test_the_chats_decide_the_contract_only_when_they_agree():
    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    chats = [(r["messages"], r.get("tools")) for r in chat_rows(3)]
    assert contract_of_chats(chats) == PromptContract(SYSTEM, include_tools=False)
    assert contract_of_chats([(r["messages"], r.get("tools")) for r in chat_rows(2, system=None, tools=tool)]) == (
        PromptContract(None, include_tools=True)
    )
    assert contract_of_chats(chats + [(r["messages"], None) for r in chat_rows(1, system="other")]) is None
    assert contract_of_chats(chats + [(r["messages"], tool) for r in chat_rows(1)]) is None
    assert contract_of_chats([]) is None


def test_sft_writes_the_contract_of_its_data_into_every_checkpoint_and_a_chain_passes_it_on(tiny_path, tmp_path):
    final = sft(tmp_path, tiny_path, chat_rows())
    expected = PromptContract(SYSTEM, include_tools=False)
    assert read_contract(final) == expected
    assert read_contract(tmp_path / "sft" / "checkpoint-2") == expected  # resumable checkpoints too
    model, _ = load_model_and_tokenizer(final)
    assert contract_of(model) == expected
    # data that disagrees says nothing: the starting checkpoint's contract carries on
    mixed = chat_rows(2) + chat_rows(2, system="another prompt")
    assert read_contract(sft(tmp_path, final, mixed, name="again")) == expected
    # a base model has none, and saving a model without one removes a stale file
    assert read_contract(tiny_path) is None
    bare, tok = build_tiny_model(seed=0)
    assert read_contract(save_model(bare, tok, final)) is None


def test_a_lora_adapter_checkpoint_carries_the_contract(tiny_path, tmp_path):
    require_module("peft", "LoRA needs peft (knowlyr-trainer[peft], in [dev])")
    final = sft(tmp_path, tiny_path, chat_rows(), use_lora=True, lora_preset="minimal")
    adapter_checkpoint = tmp_path / "sft" / "checkpoint-2"
    assert (adapter_checkpoint / "adapter_config.json").is_file()
    assert read_contract(adapter_checkpoint) == read_contract(final) == PromptContract(SYSTEM, include_tools=False)
    model, _ = load_model_and_tokenizer(str(adapter_checkpoint))
    assert contract_of(model) == PromptContract(SYSTEM, include_tools=False)


class OneStep(AgentEnv):
    domain = "generic"

    def reset(self, *, task=None, seed=None):
        return TimeStep(observation="Say something.")

    def step(self, action):
        return TimeStep(observation="ok", reward=float(len(str(action)) % 2), terminated=True, info={"success": True})

    @property
    def available_tools(self):
        return ["respond"]


def test_online_rl_defaults_to_the_checkpoints_contract_and_flags_override_it(tmp_path):
    model, tokenizer = build_tiny_model(seed=0)
    attach_contract(model, PromptContract(SYSTEM, include_tools=False))
    checkpoint = str(save_model(model, tokenizer, tmp_path / "sft-final"))
    tasks = write_rows(tmp_path / "tasks.jsonl", [{"metadata": {"system_prompt": "the task's own prompt"}}])
    register("test/one-step", OneStep)
    try:

        def trainer(**overrides):
            values = dict(
                model_name_or_path=checkpoint,
                env_id="test/one-step",
                tasks_file=tasks,
                output_dir=str(tmp_path / "rl"),
                group_size=2,
                tasks_per_iteration=1,
                num_iterations=1,
                max_steps=1,
                max_new_tokens=4,
                max_episode_tokens=256,
                bf16=False,
                progress_bar=False,
                process_reward="none",
            )
            return OnlineRLTrainer(OnlineRLConfig.from_dict({**values, **overrides}))

        assert trainer().prompt == PromptContract(SYSTEM, include_tools=False)
        assert trainer(include_tools=True, system_prompt="mine").prompt == PromptContract("mine", include_tools=True)
        run = trainer()
        run.train()
        assert read_contract(tmp_path / "rl" / "final") == PromptContract(SYSTEM, include_tools=False)
        # a base model with no contract: the tasks' shared system prompt, tool schemas shown
        base_path = str(save_model(*build_tiny_model(seed=0), tmp_path / "base"))
        assert trainer(model_name_or_path=base_path).prompt == PromptContract("the task's own prompt", True)
    finally:
        unregister("test/one-step")


def test_the_server_lists_the_contract_and_uses_its_system_prompt_when_a_chat_has_none(tmp_path):
    model, tokenizer = build_tiny_model(seed=0)
    attach_contract(model, PromptContract(SYSTEM, include_tools=False))
    checkpoint = str(save_model(model, tokenizer, tmp_path / "ckpt"))
    with ServerProcess(checkpoint, "--model-name", "m") as server:
        card = httpx.get(f"{server.base_url}/models", timeout=30).json()["data"][0]
        assert card["prompt_contract"] == {"schema_version": 1, "system_prompt": SYSTEM, "include_tools": False}

        def prompt_tokens(messages):
            body = {"model": "m", "messages": messages, "max_tokens": 1, "temperature": 0}
            reply = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60).json()
            return reply["usage"]["prompt_tokens"]

        user = [{"role": "user", "content": "hello"}]
        trained = prompt_tokens([{"role": "system", "content": SYSTEM}, *user])
        assert prompt_tokens(user) == trained
        assert prompt_tokens([{"role": "system", "content": "x"}, *user]) < trained  # the request's own wins
