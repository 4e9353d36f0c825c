"""Seed 003's snippets (``sage.tools.agent_training``), run as written on a tiny model.

The snippets are the seed's text verbatim; ``adapt`` rewrites the import lines (to
``agenttrainer.compat.agent_training``) and, where a trainer loads a model, names the tiny
model (``base_model=``) and a small ``max_samples`` (the seed's default data size is 1000
dialogs). Each test runs in its own temporary directory.
"""

import dataclasses
import re

import pytest

from agenttrainer.compat.agent_training import AgentSFTConfig, RLTrainingConfig
from agenttrainer.config import ConfigError, DPOConfig, OnlineRLConfig

CONFIG_WITH_CORESET = """
sft_config = AgentSFTConfig(
    base_model="Qwen/Qwen2.5-0.5B-Instruct",
    use_coreset_selection=True,
    coreset_target_size=8000,
    coreset_strategy="hybrid",
    use_online_continual=True,
    continual_buffer_size=4096,
    continual_replay_ratio=0.3,
)
"""

PREPARE_DATASETS = """
from sage.tools.agent_training import AgentSFTTrainer, AgentSFTConfig

config = AgentSFTConfig(
    use_coreset_selection=True,
    coreset_target_size=6000,
    use_online_continual=True,
    continual_buffer_size=3000,
    continual_replay_ratio=0.4,
)

trainer = AgentSFTTrainer(config)
trainer.prepare_datasets()  # 内部自动触发 coreset + replay
"""

PYTHON_API_SFT = """
from sage.tools.agent_training import (
    AgentSFTConfig,
    AgentLoRATrainer,
    RLTrainingConfig,
    AgentRewardModel,
)

# 1. SFT 阶段
sft_config = AgentSFTConfig(
    base_model="Qwen/Qwen2.5-7B-Instruct",
    num_epochs=3,
)
sft_trainer = AgentLoRATrainer(sft_config)
sft_trainer.train()
sft_trainer.save_model("./output/agent_sft")

# 2. RL 阶段 (DPO)
rl_config = RLTrainingConfig(algorithm="dpo")
reward_model = AgentRewardModel(AgentRewardConfig())
"""


def adapt(snippet: str, model: str | None = None, max_samples: int = 4) -> str:
    snippet = snippet.replace("from sage.tools.agent_training import", "from agenttrainer.compat.agent_training import")
    for name in ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"):
        snippet = snippet.replace(f'base_model="{name}",', f"base_model={model!r}, max_samples={max_samples},")
    snippet = re.sub(  # a config without a model (it would load the default one) gets the tiny model
        r"^config = AgentSFTConfig\(\n",
        f"config = AgentSFTConfig(\n    base_model={model!r}, max_samples={max_samples},\n",
        snippet,
        flags=re.MULTILINE,
    )
    snippet = snippet.replace("num_epochs=3,", "num_epochs=1,")
    assert "sage." not in snippet and "Qwen" not in snippet
    return snippet


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_config_snippet_maps_onto_sft_config():
    config = {}
    exec(adapt(CONFIG_WITH_CORESET, "smollm2-135m"), {"AgentSFTConfig": AgentSFTConfig}, config)
    sft = config["sft_config"].to_sft_config("train.jsonl")
    assert (sft.use_coreset_selection, sft.coreset_target_size, sft.coreset_strategy) == (True, 8000, "hybrid")
    assert (sft.use_online_continual, sft.continual_buffer_size, sft.continual_replay_ratio) == (True, 4096, 0.3)
    assert (sft.gradient_accumulation_steps, sft.lora_r, sft.lora_alpha, sft.use_lora) == (8, 64, 128, True)
    assert len(sft.lora_target_modules) == 7 and sft.max_length == 4096 and sft.lr_scheduler == "cosine"


def test_seed_defaults_are_kept_except_model_and_data():
    seed = {"max_length": 4096, "lora_r": 64, "lora_alpha": 128, "lora_dropout": 0.05, "num_epochs": 3, "batch_size": 4,
            "gradient_accumulation": 8, "learning_rate": 2e-5, "warmup_ratio": 0.1, "lr_scheduler": "cosine"}  # fmt: skip
    defaults = {f.name: getattr(AgentSFTConfig(), f.name) for f in dataclasses.fields(AgentSFTConfig)}
    assert {k: defaults[k] for k in seed} == seed


def test_prepare_datasets_mixes_replay_from_the_previous_run(workdir, tiny_path):
    pytest.importorskip("agentsandbox", reason="the default train_data is knowlyr-sandbox's retail suite")
    pytest.importorskip("peft", reason="AgentSFTConfig trains LoRA adapters")
    ns = {}
    exec(adapt(PREPARE_DATASETS, tiny_path), ns)
    assert ns["trainer"].prepare_datasets() == {"train": 4, "replay": 0}  # an empty buffer the first time
    ns["trainer"].config.max_steps = 1
    ns["trainer"].train()  # saves the buffer
    again = {}
    exec(adapt(PREPARE_DATASETS, tiny_path), again)
    assert again["trainer"].prepare_datasets() == {"train": 4, "replay": 1}  # int(4 * 0.4)


def test_python_api_sft_stage_and_reward_model(workdir, tiny_path):
    pytest.importorskip("agentsandbox", reason="the default train_data is knowlyr-sandbox's retail suite")
    pytest.importorskip("peft", reason="AgentSFTConfig trains LoRA adapters")
    agentreward = pytest.importorskip("agentreward.seed003", reason="the reward half is knowlyr-reward's")
    ns = {"AgentRewardConfig": agentreward.AgentRewardConfig}
    exec(adapt(PYTHON_API_SFT, tiny_path), ns)
    assert (workdir / "output/agent_sft/model.safetensors").is_file()
    assert isinstance(ns["rl_config"].to_knowlyr_config(), DPOConfig)
    result = ns["reward_model"].compute_reward(query="hi", response="hello", ground_truth={}, execution_trace=[])
    assert set(result) == {"total", "breakdown", "feedback"}


def test_rl_trainer_and_evaluator_name_their_equivalents():
    with pytest.raises(ImportError, match="AgentRLTrainer is not provided.*DPOTrainer"):
        from agenttrainer.compat.agent_training import AgentRLTrainer  # noqa: F401
    with pytest.raises(ImportError, match="AgentTrainingEvaluator is not provided.*evaluate"):
        from agenttrainer.compat.agent_training import AgentTrainingEvaluator  # noqa: F401


def test_rl_config_maps_ppo_and_grpo_names():
    ppo = RLTrainingConfig(algorithm="ppo").to_knowlyr_config()
    assert isinstance(ppo, OnlineRLConfig) and ppo.algorithm == "ppo"
    assert ppo.tasks_per_iteration * ppo.group_size == 128 and ppo.batch_size == 64  # num_rollouts, chunk_size
    assert (ppo.kl_coef, ppo.clip_eps, ppo.vf_coef) == (0.02, 0.2, 0.5)
    grpo = RLTrainingConfig(algorithm="grpo").to_knowlyr_config(num_iterations=2)
    assert (grpo.algorithm, grpo.group_size, grpo.kl_coef, grpo.num_iterations) == ("grpo", 4, 0.1, 2)
    dpo = RLTrainingConfig().to_knowlyr_config()
    assert (dpo.beta, dpo.reference_free, dpo.label_smoothing, dpo.loss_type) == (0.1, False, 0.0, "sigmoid")


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: RLTrainingConfig(algorithm="grpo", grpo_config={"use_advantage": False}), "use_advantage=False.*rloo"),
        (lambda: AgentSFTConfig(load_in_4bit=True), "load_in_4bit=True.*use_lora=True"),
        (lambda: AgentSFTConfig(load_in_8bit=True), "load_in_8bit=True.*use_lora=True"),
        (lambda: RLTrainingConfig(load_in_8bit=True), "load_in_8bit=True"),
        (lambda: RLTrainingConfig(algorithm="ppo", ppo_config={"num_rollouts": 7}), "num_rollouts"),
        (lambda: AgentSFTConfig(coreset_strategy="best"), "coreset_strategy"),
    ],
)
def test_unsupported_values_are_refused_in_one_line(make, match):
    with pytest.raises(ConfigError, match=match) as info:
        make()
    assert "\n" not in str(info.value)


def test_sage_data_source_names_the_equivalent(workdir, tiny):
    model, tok = tiny
    from agenttrainer.compat.agent_training import AgentSFTTrainer

    trainer = AgentSFTTrainer(
        AgentSFTConfig(train_data="agent_sft:train", extra={"bf16": False}), model=model, tokenizer=tok
    )
    with pytest.raises(ConfigError, match="'retail:train'.*JSONL"):
        trainer.prepare_datasets()


def test_jsonl_train_data(workdir, tiny, rows):
    model, tok = tiny
    from agenttrainer.compat.agent_training import AgentSFTTrainer

    path = rows.write(workdir / "sft.jsonl", rows.sft(3))
    config = AgentSFTConfig(train_data=str(path), use_lora=False, extra={"bf16": False, "progress_bar": False})
    trainer = AgentSFTTrainer(config, model=model, tokenizer=tok)
    assert trainer.prepare_datasets() == {"train": 3, "replay": 0}
    assert trainer.train()["num_examples"] == 3


@pytest.mark.parametrize("module", ["agenttrainer.compat.agent_training", "agenttrainer.compat.hello_agents_rl"])
def test_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
