"""Seed 003's snippets (``sage.tools.agent_training``), run as written on a tiny model.

The snippets are the seed's text verbatim; ``adapt`` rewrites the import lines (to
``agenttrainer.compat.agent_training``) and, where a trainer loads a model, names the tiny
model (``base_model=``, ``base_model_path=``) and a small ``max_samples`` (the seed's default
data size is 1000 dialogs), one epoch, and for ``AgentRLTrainer`` short sampled replies
(``max_new_tokens=16``). Each test runs in its own temporary directory.
"""

import dataclasses
import json
import re

import pytest

from agenttrainer.compat.agent_training import (
    AgentRLTrainer,
    AgentSFTConfig,
    AgentTrainingEvaluator,
    RLTrainingConfig,
    next_action_metrics,
    preference_pairs,
    reward_scorer,
)
from agenttrainer.compat.hello_agents_rl import create_rl_dataset, create_sft_dataset
from agenttrainer.config import ConfigError, DPOConfig, OnlineRLConfig
from agenttrainer.losses.sft import IGNORE_INDEX
from knowlyrcore import write_jsonl
from knowlyrcore.testing import require_module
from knowlyrcore.tool_parsing import parse_reply

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

PYTHON_API = """
from sage.tools.agent_training import (
    AgentSFTConfig,
    AgentLoRATrainer,
    RLTrainingConfig,
    AgentRLTrainer,
    AgentRewardModel,
    AgentTrainingEvaluator
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
rl_trainer = AgentRLTrainer(
    config=rl_config,
    base_model_path="Qwen/Qwen2.5-7B-Instruct",
    sft_model_path="./output/agent_sft",
    reward_model=reward_model
)
rl_trainer.train()
rl_trainer.save_model("./output/agent_dpo")

# 3. 评估
evaluator = AgentTrainingEvaluator(benchmark_loader)
results = evaluator.evaluate(
    model=rl_trainer.model,
    split="test"
)
print(f"Tool Selection Accuracy: {results['tool_selection_accuracy']['mean']:.2%}")
print(f"Plan Success Rate: {results['plan_success_rate']['mean']:.2%}")
"""


def adapt(snippet: str, model: str | None = None, max_samples: int = 4) -> str:
    snippet = snippet.replace("from sage.tools.agent_training import", "from agenttrainer.compat.agent_training import")
    for name in ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"):
        snippet = snippet.replace(f'base_model="{name}",', f"base_model={model!r}, max_samples={max_samples},")
        snippet = snippet.replace(  # DPO: short sampled replies, one epoch
            f'base_model_path="{name}",',
            f"base_model_path={model!r}, max_samples={max_samples}, max_new_tokens=16, num_epochs=1,",
        )
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
    chosen, lora = sft.selection, sft.lora
    assert (chosen.use_coreset_selection, chosen.coreset_target_size, chosen.coreset_strategy) == (True, 8000, "hybrid")
    assert chosen.use_online_continual and (chosen.continual_buffer_size, chosen.continual_replay_ratio) == (4096, 0.3)
    assert (sft.gradient_accumulation_steps, lora.lora_r, lora.lora_alpha, lora.use_lora) == (8, 64, 128, True)
    assert len(lora.lora_target_modules) == 7 and sft.max_length == 4096 and sft.lr_scheduler == "cosine"


def test_seed_defaults_are_kept_except_model_and_data():
    seed = {
        "max_length": 4096,
        "lora_r": 64,
        "lora_alpha": 128,
        "lora_dropout": 0.05,
        "num_epochs": 3,
        "batch_size": 4,
        "gradient_accumulation": 8,
        "learning_rate": 2e-5,
        "warmup_ratio": 0.1,
        "lr_scheduler": "cosine",
    }
    defaults = {f.name: getattr(AgentSFTConfig(), f.name) for f in dataclasses.fields(AgentSFTConfig)}
    assert {k: defaults[k] for k in seed} == seed


def test_prepare_datasets_mixes_replay_from_the_previous_run(workdir, tiny_path):
    pytest.importorskip("agentsandbox", reason="the default train_data is knowlyr-sandbox's retail suite")
    require_module("peft", "AgentSFTConfig trains LoRA adapters: peft (knowlyr-trainer[peft], in [dev])")
    ns = {}
    exec(adapt(PREPARE_DATASETS, tiny_path), ns)
    assert ns["trainer"].prepare_datasets() == {"train": 4, "replay": 0}  # an empty buffer the first time
    ns["trainer"].config.max_optimizer_steps = 1
    ns["trainer"].train()  # saves the buffer
    again = {}
    exec(adapt(PREPARE_DATASETS, tiny_path), again)
    assert again["trainer"].prepare_datasets() == {"train": 4, "replay": 1}  # int(4 * 0.4)


def test_python_api_runs_sft_dpo_and_evaluation(workdir, tiny_path, capsys):
    """Section 5.2 end to end: SFT, DPO on the SFT policy's lost replies, next-action evaluation.

    ``benchmark_loader`` (undefined in the seed) is a JSONL file of two test-split expert steps."""
    pytest.importorskip("agentsandbox", reason="the default train_data is knowlyr-sandbox's retail suite")
    require_module("peft", "AgentSFTConfig trains LoRA adapters: peft (knowlyr-trainer[peft], in [dev])")
    agentreward = pytest.importorskip("agentreward.seed003", reason="the reward half is knowlyr-reward's")
    benchmark = rows_file(workdir / "benchmark.jsonl", create_rl_dataset("test", 2))
    ns = {"AgentRewardConfig": agentreward.AgentRewardConfig, "benchmark_loader": str(benchmark)}
    exec(adapt(PYTHON_API, tiny_path), ns)

    assert (workdir / "output/agent_sft/model.safetensors").is_file()
    assert (workdir / "output/agent_dpo/model.safetensors").is_file()
    assert isinstance(ns["rl_trainer"].config, DPOConfig) and ns["rl_trainer"].config.model_name_or_path.endswith(
        "agent_sft"
    )
    result = ns["reward_model"].compute_reward(query="hi", response="hello", ground_truth={}, execution_trace=[])
    assert set(result) == {"total", "breakdown", "feedback"}
    pairs = [json.loads(line) for line in (workdir / "output/agent_dpo/pairs.jsonl").read_text().splitlines()]
    assert 1 <= len(pairs) <= 4 and all(p["margin"] > 0 and p["chosen"] != p["rejected"] for p in pairs)
    printed = capsys.readouterr().out
    for name, key in (
        ("Tool Selection Accuracy", "tool_selection_accuracy"),
        ("Plan Success Rate", "plan_success_rate"),
    ):
        value = ns["results"][key]
        assert f"{name}: {value['mean']:.2%}" in printed
        assert 0.0 <= value["mean"] <= 1.0 and value["count"] == 2


def rows_file(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def expert_replies(split, n_tasks):
    """The expert's own replies, in the order of ``create_rl_dataset``'s rows (one per expert step)."""
    dialogs = create_sft_dataset(split, n_tasks)
    return [m["content"] for d in dialogs for m in d["messages"] if m["role"] == "assistant"]


def test_preference_pairs_prefer_the_expert_over_a_lower_scoring_reply():
    pytest.importorskip("agentsandbox", reason="the rows are knowlyr-sandbox's retail suite")
    rows = create_rl_dataset("train", 3)
    expert = expert_replies("train", 3)[: len(rows)]
    replies = [expert[0]] + ["I am not sure what to do."] * (len(rows) - 1)  # the policy matches step 0 only

    pairs = preference_pairs(rows, replies, reward_scorer())
    assert [p.task_id for p in pairs] == [r["task_id"] for r in rows[1:]]  # a matching reply gives no pair
    for pair, row, text in zip(pairs, rows[1:], expert[1:]):
        assert pair.chosen == text and pair.rejected != text
        assert pair.model_dump()["prompt"] == row["prompt"] and pair.margin == 1.0
        assert parse_reply(pair.chosen).action["tool"] == row["expected_action"]["tool"]


def test_the_dpo_recipe_scores_the_reply_the_policy_sampled(workdir, tiny_path, sampled):
    """Before: the pairs held the sampled reply as text, which the DPO recipe tokenised again with
    the chat template. Now the rejected side holds the ids the policy sampled and the prompt's,
    and the recipe's rejected input is exactly them; the expert's text (chosen) is rendered."""
    drawn = sampled
    call = {"tool": "get_order", "params": {"order_id": "#W1"}}
    rows = [
        {"task_id": f"t/step{i}", "prompt": [{"role": "user", "content": f"Where is order #W{i}?"}]}
        | {"expected_action": call, "answer_contains": [], "answer_excludes": []}
        for i in range(2)
    ]
    trainer = AgentRLTrainer(
        RLTrainingConfig(),
        base_model_path=tiny_path,
        train_data=str(rows_file(workdir / "rows.jsonl", rows)),
        max_new_tokens=8,
        bf16=False,
    )
    pairs = trainer.build_pairs()  # a random model never calls get_order: every prompt gives a pair
    assert len(pairs) == len(drawn) == 2
    write_jsonl(workdir / "pairs.jsonl", pairs)
    tokenizer = trainer.trainer.tokenizer
    for (chosen, rejected), (prompt_ids, ids), row in zip(
        trainer.trainer.load_pairs(workdir / "pairs.jsonl"), drawn, rows
    ):
        template = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=True)
        assert prompt_ids == template["input_ids"]
        assert rejected.input_ids == prompt_ids + ids
        assert [t for t in rejected.labels if t != IGNORE_INDEX] == ids
        assert chosen.input_ids[: len(prompt_ids)] == prompt_ids and chosen.input_ids[len(prompt_ids) :] != ids


def test_expert_replies_score_one_and_wrong_arguments_only_select_the_tool():
    pytest.importorskip("agentsandbox", reason="the rows are knowlyr-sandbox's retail suite")
    rows = create_rl_dataset("test", 4)
    expert = expert_replies("test", 4)[: len(rows)]
    assert next_action_metrics(expert, rows) == {
        "tool_selection_accuracy": {"mean": 1.0, "count": len(rows)},
        "plan_success_rate": {"mean": 1.0, "count": len(rows)},
    }
    calls = [i for i, r in enumerate(rows) if r["expected_action"]["tool"] != "respond"]
    wrong = [text.replace("#W", "#X") if i in calls else text for i, text in enumerate(expert)]
    metrics = next_action_metrics(wrong, rows)
    assert metrics["tool_selection_accuracy"]["mean"] == 1.0
    with_ids = sum("#W" in expert[i] for i in calls)
    assert with_ids and metrics["plan_success_rate"]["mean"] == 1.0 - with_ids / len(rows)


def test_evaluator_scores_a_checkpoint_on_a_suite_split(tiny_path):
    pytest.importorskip("agentsandbox", reason="the benchmark is knowlyr-sandbox's retail suite")
    results = AgentTrainingEvaluator("retail").evaluate(tiny_path, split="test", max_samples=2, max_new_tokens=8)
    assert set(results) == {"tool_selection_accuracy", "plan_success_rate"}
    assert all(0.0 <= r["mean"] <= 1.0 and r["count"] == 2 for r in results.values())


def test_online_algorithms_name_online_rl_trainer(tiny_path):
    with pytest.raises(ConfigError, match="OnlineRLTrainer") as info:
        AgentRLTrainer(RLTrainingConfig(algorithm="grpo"), base_model_path=tiny_path)
    assert "\n" not in str(info.value)


def test_names_still_absent_name_their_equivalents():
    with pytest.raises(ImportError, match="AgentSFTFormatter is not provided.*create_sft_dataset"):
        from agenttrainer.compat.agent_training import AgentSFTFormatter  # noqa: F401


def test_rl_config_maps_ppo_and_grpo_names():
    ppo = RLTrainingConfig(algorithm="ppo").to_knowlyr_config()
    assert isinstance(ppo, OnlineRLConfig) and ppo.algorithm == "ppo"
    assert ppo.tasks_per_iteration * ppo.group_size == 128 and ppo.batch_size == 64  # num_rollouts, chunk_size
    assert (ppo.kl_coef, ppo.clip_eps, ppo.ppo.vf_coef) == (0.02, 0.2, 0.5)
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
