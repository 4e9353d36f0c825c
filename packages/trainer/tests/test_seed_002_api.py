"""Seed 002's snippets (``hello_agents.rl``), run as written on a tiny model.

Each snippet below is the seed's text verbatim; ``adapt`` rewrites only what cannot be the
same here, each change listed in it: the import lines (to ``agenttrainer.compat.hello_agents_rl``),
the model name (a tiny random model saved as a checkpoint) and the sizes (``max_samples``,
``num_epochs``: tiny runs keep the test at seconds). Paths stay as written: each test runs in its
own temporary directory. The snippets draw their data from knowlyr-sandbox's retail suite.
"""

import json
from importlib.util import find_spec
from pathlib import Path

import pytest

from agenttrainer.compat.hello_agents_rl import (
    RLTrainingTool,
    create_accuracy_reward,
    create_rl_dataset,
    create_sft_dataset,
)

# the seed datasets come from knowlyr-sandbox's task suites; the snippets train LoRA adapters
needs_suites = pytest.mark.skipif(find_spec("agentsandbox") is None, reason="needs knowlyr-sandbox's task suites")
needs_peft = pytest.mark.skipif(find_spec("peft") is None, reason="needs peft (LoRA)")


BASIC_SFT = """
from hello_agents.rl import create_sft_dataset, SFTTrainerWrapper

# 加载数据集
dataset = create_sft_dataset(split="train", max_samples=1000)

# 创建训练器
trainer = SFTTrainerWrapper(
    model_name="Qwen/Qwen3-0.6B",
    dataset=dataset,
    output_dir="./output/sft",
    num_epochs=3,
    batch_size=4
)

# 训练
trainer.train()
"""

LORA_SFT = """
from hello_agents.rl import create_lora_config

# 创建LoRA配置
lora_config = create_lora_config(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05
)

# 创建训练器
trainer = SFTTrainerWrapper(
    model_name="Qwen/Qwen3-0.6B",
    dataset=dataset,
    output_dir="./output/sft_lora",
    use_lora=True,
    lora_config=lora_config
)

trainer.train()
"""

RESULT_AND_SAVE = """
result = trainer.train()
print(f"训练完成,模型保存在: {result['output_dir']}")
trainer.save_model("./my_model")
"""

LORA_TARGETS = """
from hello_agents.rl import create_lora_config

lora_config = create_lora_config(
    r=16,              # LoRA秩
    lora_alpha=32,     # LoRA alpha
    lora_dropout=0.05, # Dropout率
    target_modules=["q_proj", "v_proj"]  # 目标模块
)
"""

BASIC_GRPO = """
from hello_agents.rl import (
    create_rl_dataset,
    create_accuracy_reward,
    GRPOTrainerWrapper
)

# 加载数据集
dataset = create_rl_dataset(
    split="train",
    max_samples=500,
    model_name="Qwen/Qwen3-0.6B"
)

# 创建奖励函数
reward_fn = create_accuracy_reward()

# 创建训练器
trainer = GRPOTrainerWrapper(
    model_name="Qwen/Qwen3-0.6B",
    dataset=dataset,
    reward_fn=reward_fn,
    output_dir="./output/grpo",
    num_epochs=3,
    batch_size=2
)

# 训练
trainer.train()
"""

ADVANCED = """
from hello_agents.rl import (
    create_sft_dataset,
    create_rl_dataset,
    create_accuracy_reward,
    create_lora_config,
    SFTTrainerWrapper,
    GRPOTrainerWrapper
)

# 准备数据
sft_dataset = create_sft_dataset(split="train", max_samples=1000)
rl_dataset = create_rl_dataset(split="train", max_samples=500, model_name="Qwen/Qwen3-0.6B")

# 准备奖励函数
reward_fn = create_accuracy_reward()

# 准备LoRA配置
lora_config = create_lora_config(r=16, lora_alpha=32)

# SFT训练
sft_trainer = SFTTrainerWrapper(
    model_name="Qwen/Qwen3-0.6B",
    dataset=sft_dataset,
    output_dir="./output/sft",
    num_epochs=3,
    batch_size=4,
    use_lora=True,
    lora_config=lora_config
)
sft_trainer.train()

# GRPO训练
grpo_trainer = GRPOTrainerWrapper(
    model_name="./output/sft",
    dataset=rl_dataset,
    reward_fn=reward_fn,
    output_dir="./output/grpo",
    num_epochs=3,
    batch_size=2,
    use_lora=True,
    lora_config=lora_config
)
grpo_trainer.train()
"""

SFT_THEN_GRPO = """
# 先SFT训练
sft_trainer = SFTTrainerWrapper(
    model_name="Qwen/Qwen3-0.6B",
    dataset=sft_dataset,
    output_dir="./output/sft"
)
sft_trainer.train()

# 再GRPO训练
grpo_trainer = GRPOTrainerWrapper(
    model_name="./output/sft",  # 使用SFT模型
    dataset=rl_dataset,
    reward_fn=reward_fn,
    output_dir="./output/grpo"
)
grpo_trainer.train()
"""

TOOL = """
from hello_agents.tools import RLTrainingTool

tool = RLTrainingTool()

# SFT训练
sft_result = tool.run({
    "action": "train",
    "algorithm": "sft",
    "model_name": "Qwen/Qwen3-0.6B",
    "max_samples": 1000,
    "num_epochs": 3,
    "output_dir": "./output/sft",
    "use_lora": True,
    "batch_size": 4
})

# GRPO训练
grpo_result = tool.run({
    "action": "train",
    "algorithm": "grpo",
    "model_name": "./output/sft",
    "max_samples": 500,
    "num_epochs": 3,
    "output_dir": "./output/grpo",
    "use_lora": True,
    "batch_size": 2
})
"""


def adapt(snippet: str, model: str) -> str:
    """The only rewrites of a seed snippet: imports, the model name, the sizes."""
    for old in (
        "from hello_agents.rl.trainers import",
        "from hello_agents.rl import",
        "from hello_agents.tools import",
    ):
        snippet = snippet.replace(old, "from agenttrainer.compat.hello_agents_rl import")
    snippet = snippet.replace('"Qwen/Qwen3-0.6B"', repr(model))
    for old, new in (
        ("max_samples=1000", "max_samples=2"),
        ("max_samples=500", "max_samples=1"),
        ('"max_samples": 1000', '"max_samples": 2'),
        ('"max_samples": 500', '"max_samples": 1'),
        ("num_epochs=3", "num_epochs=1"),
        ('"num_epochs": 3', '"num_epochs": 1'),
    ):
        snippet = snippet.replace(old, new)
    assert "hello_agents." not in snippet and "Qwen" not in snippet
    return snippet


def run(snippet: str, model: str, namespace: dict | None = None) -> dict:
    namespace = {} if namespace is None else namespace
    exec(compile(adapt(snippet, model), "<seed 002 snippet>", "exec"), namespace)
    return namespace


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@needs_suites
@needs_peft
def test_basic_sft_lora_sft_result_and_save(workdir, tiny_path, capsys):
    ns = run(BASIC_SFT, tiny_path)
    assert len(ns["dataset"]) == 2 and (workdir / "output/sft/final/model.safetensors").is_file()
    ns = run(LORA_SFT, tiny_path, ns)
    assert ns["trainer"].config.lora.use_lora and ns["trainer"].config.lora.lora_r == 16
    assert (workdir / "output/sft_lora/final/model.safetensors").is_file()
    run(RESULT_AND_SAVE, tiny_path, ns)
    assert "模型保存在: output/sft_lora/final" in capsys.readouterr().out
    assert (workdir / "my_model" / "model.safetensors").is_file()


@needs_peft
def test_lora_config_with_target_modules(tiny_path):
    config = run(LORA_TARGETS, tiny_path)["lora_config"]
    assert (config.r, config.lora_alpha, config.lora_dropout) == (16, 32, 0.05)
    assert sorted(config.target_modules) == ["q_proj", "v_proj"]


@needs_suites
@needs_peft
def test_basic_grpo(workdir, tiny_path):
    ns = run(BASIC_GRPO, tiny_path)
    assert len(ns["dataset"]) == 1 and all("expected_action" in row for row in ns["dataset"])
    groups = [json.loads(line) for line in (workdir / "output/grpo/rollouts-epoch0.jsonl").read_text().splitlines()]
    assert [len(g["trajectories"]) for g in groups] == [4]
    assert (workdir / "output/grpo/final/model.safetensors").is_file()


@needs_suites
@needs_peft
def test_advanced_sft_then_grpo_from_the_sft_run_directory(workdir, tiny_path):
    """Needs ``model_name="./output/sft"`` to load ``./output/sft/final`` (model loading's run-dir resolution)."""
    ns = run(ADVANCED, tiny_path)
    assert ns["sft_trainer"].config.lora.use_lora and ns["grpo_trainer"].config.lora.use_lora
    assert (workdir / "output/grpo/final/model.safetensors").is_file()


@pytest.mark.slow
@needs_suites
@needs_peft
def test_sft_then_grpo_with_every_default(workdir, tiny_path):
    """The shorter form: three epochs of each (the defaults), so minutes on a CPU."""
    ns = run(ADVANCED, tiny_path)
    before = (workdir / "output/grpo/final/model.safetensors").stat().st_mtime_ns
    run(SFT_THEN_GRPO, tiny_path, ns)
    assert (workdir / "output/grpo/rollouts-epoch2.jsonl").is_file()
    assert (workdir / "output/grpo/final/model.safetensors").stat().st_mtime_ns != before


@needs_suites
@needs_peft
def test_rl_training_tool(workdir, tiny_path):
    """Needs the run-dir resolution too (its GRPO step starts from ``./output/sft``)."""
    ns = run(TOOL, tiny_path)
    sft, grpo = json.loads(ns["sft_result"]), json.loads(ns["grpo_result"])
    assert sft["status"] == grpo["status"] == "success"
    assert Path(sft["output_dir"]).resolve() == (workdir / "output/sft/final").resolve()
    assert len(grpo["reward_mean_per_epoch"]) == 1
    evaluated = json.loads(
        ns["tool"].run(
            {"action": "evaluate", "model_name": "./output/grpo/final", "max_samples": 2, "max_new_tokens": 8}
        )
    )
    assert evaluated["num_samples"] == 2 and 0.0 <= evaluated["accuracy"] <= 1.0
    with pytest.raises(ValueError, match="action must be 'train' or 'evaluate'"):
        ns["tool"].run({"action": "deploy"})


def test_fp16_is_refused_in_one_line_where_the_device_lacks_it(workdir, tiny_path, rows):
    """Seed 002's ``fp16=True``: a CPU has no fp16 training (needs the config's ``fp16`` field)."""
    from agenttrainer.compat.hello_agents_rl import SFTTrainerWrapper

    with pytest.raises(ValueError, match="fp16") as info:
        SFTTrainerWrapper(tiny_path, rows.sft(2), output_dir="./output/sft", fp16=True)
    assert "\n" not in str(info.value)


@needs_suites
def test_datasets_are_expert_dialogs_with_real_observations():
    sft = create_sft_dataset(split="train", max_samples=3)
    assert [r["messages"][1]["role"] for r in sft] == ["user"] * 3
    first = sft[0]["messages"]
    assert first[2]["content"].startswith("<tool_call>") and first[3]["role"] == "tool"
    assert json.loads(first[3]["content"])["order_id"] in first[1]["content"]  # the env looked the order up
    test = create_sft_dataset(split="test", max_samples=3)
    assert {r["task_id"] for r in test}.isdisjoint(r["task_id"] for r in sft)
    rl = create_rl_dataset(split="train", max_samples=5)
    assert len(rl) == 5 and rl[0]["prompt"] == first[:2] and rl[1]["prompt"] == first[:4]


@needs_suites
def test_accuracy_reward_matches_the_expert_action_and_the_answer():
    rows = create_rl_dataset(split="train", max_samples=2)  # get_order, then the reply
    reward = create_accuracy_reward()
    call = rows[0]["expected_action"]
    good_call = "<tool_call>" + json.dumps({"name": call["tool"], "arguments": call["params"]}) + "</tool_call>"
    wrong_args = good_call.replace(call["params"]["order_id"], "#W0000000")
    columns = {
        k: [rows[0][k], rows[0][k], rows[1][k], rows[1][k]]
        for k in ("expected_action", "answer_contains", "answer_excludes")
    }
    status = rows[1]["answer_contains"][0]
    completions = [
        good_call,
        wrong_args,
        f"It is {status} now.",
        f"It is {status}, or maybe {rows[1]['answer_excludes'][0]}.",
    ]
    assert reward(completions, **columns) == [1.0, 0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="expected_action or answer_contains"):
        reward(["x"])


def test_data_file_instead_of_a_suite(tmp_path, rows):
    path = rows.write(tmp_path / "sft.jsonl", rows.sft(5))
    assert create_sft_dataset(max_samples=3, data_file=path) == rows.sft(5)[:3]


def test_unknown_suite_names_the_alternatives():
    with pytest.raises(ValueError, match="unknown task suite 'gsm8k'.*data_file"):
        create_sft_dataset(suite="gsm8k")
    with pytest.raises(ValueError, match="max_samples must be a positive number"):
        create_rl_dataset(max_samples=None)


@needs_suites
def test_the_expert_plays_through_the_acting_loop_within_the_suites_step_budget(monkeypatch):
    """Before: the expert's dialogs came from a loop of their own, with no step cap. Now each is
    an episode of ``play_episodes`` capped at the suite's ``max_steps``: an expert that does not
    finish in it means a broken suite, and within it the dialog is what the environment said."""
    from agentsandbox.suites import TaskSuite
    from agenttrainer.compat import hello_agents_rl
    from knowlyrcore import AgentEnv, TimeStep
    from knowlyrcore.registry import register, unregister

    class Countdown(AgentEnv):
        def reset(self, *, task=None, seed=None):
            self.left = 3
            return TimeStep("count down from 3")

        def step(self, action):
            self.left -= 1
            return TimeStep(f"{self.left} left", terminated=self.left == 0, info={"success": self.left == 0})

    tick = {"tool": "tick", "params": {"by": 1}}

    def tasks(split, n, seed):  # a solution longer than the episode: the environment ends it
        return [{"id": f"c{i}", "metadata": {"solution": [tick] * 4}} for i in range(n)]

    tight = TaskSuite("countdown", "test/countdown-suite", "three ticks", tasks, max_steps=2)
    register("test/countdown-suite", Countdown)
    try:
        monkeypatch.setattr(hello_agents_rl, "_suite", lambda name: tight)
        with pytest.raises(RuntimeError, match="did not solve task c0 in 2 steps"):
            create_sft_dataset(suite="countdown", max_samples=1)
        roomy = TaskSuite("countdown", "test/countdown-suite", "three ticks", tasks, max_steps=5)
        monkeypatch.setattr(hello_agents_rl, "_suite", lambda name: roomy)
        (row,) = create_sft_dataset(suite="countdown", max_samples=1)
    finally:
        unregister("test/countdown-suite")
    call = hello_agents_rl.tool_call_text(tick)
    assert [m["content"] for m in row["messages"]] == [
        "count down from 3",
        call,
        "2 left",
        call,
        "1 left",
        call,
        "0 left",
    ]


def test_rl_training_tool_refuses_unknown_algorithms():
    with pytest.raises(ValueError, match="'sft' or 'grpo'"):
        RLTrainingTool().run({"algorithm": "ppo", "max_samples": 1})
