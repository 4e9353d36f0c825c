"""``bench/efficiency.py``: its step clock times every optimizer step, with or without gradient
accumulation and whether or not the recipe walks ``RunStart.steps``; a failed worker says why."""

import json
import math
from pathlib import Path

import pytest

from knowlyrcore.testing import import_file

BENCH = Path(__file__).resolve().parents[1] / "bench" / "efficiency.py"


@pytest.fixture(scope="module")
def bench():
    return import_file(BENCH, "bench_efficiency")


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def _grpo_rows(n=4, group=4):
    return [
        {
            "task_id": f"t{i}",
            "prompt": f"Task {i}: list the files of the project",
            "trajectories": [
                {"response": f"Thought: look {k}\nAction: ls -la {i * k}", "reward": float(k == 0)}
                for k in range(group)
            ],
        }
        for i in range(n)
    ]


def _sft_rows(n=8):
    return [
        {
            "instruction": f"Task {i}: fix the bug",
            "steps": [{"thought": f"think {i}", "action": f"run cmd{i}", "observation": "ok", "reward": 1.0}],
            "task_id": f"t{i}",
        }
        for i in range(n)
    ]


def _check(result, steps):
    assert result["steps"] == steps
    assert result["seconds"] > 0 and all(s > 0 for s in result["step_seconds"])
    assert math.isfinite(result["loss"]) and math.isfinite(result["grad_norm"])
    assert len(result["losses"]) == len(result["grad_norms"]) == steps


@pytest.mark.parametrize("share_prefix", [False, True])
def test_grpo_with_gradient_accumulation_times_each_optimizer_step(bench, tmp_path, share_prefix):
    from agenttrainer.config import GRPOConfig
    from agenttrainer.models import build_tiny_model
    from agenttrainer.trainers import loop
    from agenttrainer.trainers.grpo import GRPOTrainer

    originals = loop.RunStart.steps, loop.RunStart.optimizer_step
    model, tokenizer = build_tiny_model(seed=0)
    config = GRPOConfig(
        train_file=_write_jsonl(tmp_path / "grpo.jsonl", _grpo_rows()),
        output_dir=str(tmp_path / "out"),
        batch_size=1,
        group_size=4,
        gradient_accumulation_steps=2,
        max_optimizer_steps=2,
        save_steps=0,
        bf16=False,
        progress_bar=False,
        share_prefix=share_prefix,
    )
    with bench.StepClock() as clock:
        GRPOTrainer(config, model=model, tokenizer=tokenizer).train()
    _check(clock.result(), steps=2)
    assert (loop.RunStart.steps, loop.RunStart.optimizer_step) == originals


def test_sft_with_gradient_accumulation_times_each_optimizer_step(bench, tmp_path):
    from agenttrainer.config import SFTConfig
    from agenttrainer.models import build_tiny_model
    from agenttrainer.trainers.sft import SFTTrainer

    model, tokenizer = build_tiny_model(seed=0)
    config = SFTConfig(
        train_file=_write_jsonl(tmp_path / "sft.jsonl", _sft_rows()),
        output_dir=str(tmp_path / "out"),
        batch_size=2,
        gradient_accumulation_steps=2,
        max_optimizer_steps=2,
        save_steps=0,
        bf16=False,
        progress_bar=False,
    )
    with bench.StepClock() as clock:
        SFTTrainer(config, model=model, tokenizer=tokenizer).train()
    _check(clock.result(), steps=2)


def test_the_first_step_warms_up_and_no_step_is_an_error(bench):
    with bench.StepClock() as clock:
        with pytest.raises(RuntimeError, match="no optimizer step was recorded"):
            clock.result()
        clock.seconds, clock.losses, clock.grad_norms = [5.0], [0.5], [1.0]
        assert clock.result()["seconds"] == 5.0 and not clock.result()["warmup_excluded"]
        clock.seconds, clock.losses, clock.grad_norms = [5.0, 1.0, 2.0], [0.5] * 3, [1.0] * 3
        assert clock.result()["seconds"] == 1.5 and clock.result()["warmup_excluded"]


def test_a_failed_worker_names_its_cause_not_its_progress_bar(bench):
    stderr = (
        "[efficiency 10:00:00] grpo_retail (old) ...\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "RuntimeError: boom\n"
        "grpo:   0%|          | 0/3 [00:00<?, ?it/s]\rgrpo:  33%|###3      | 1/3 [01:40<03:20, 100.0s/it, loss=0.0000]\n"
        "\r3it [00:03,  1.00s/it]\n"
    )
    tail = bench.stderr_tail(stderr)
    assert tail[-1] == "RuntimeError: boom" and tail[0].startswith("[efficiency")
    failed = bench.WorkerFailed("grpo_retail", "old", f"failed, {bench.exit_cause(-9)}", tail)
    assert "killed by signal 9" in failed.summary and "(out of memory?)" in failed.summary
    assert failed.summary.endswith("RuntimeError: boom")
    assert bench.exit_cause(1) == "returncode 1"


def test_grad_norms_are_compared_relative_to_their_size(bench):
    row = {"seconds": 1.0, "loss": 1e-8, "grad_norm": 2e-7}
    assert bench.compare("grpo_retail", row, {**row, "loss": 1.000001e-8})[1]  # the loss: absolute below 1e-6
    assert not bench.compare("grpo_retail", row, {**row, "grad_norm": 2.1e-7})[1]  # 5% apart: not below a floor
    sft = {"seconds": 1.0, "loss": 2.0, "grad_norm": 1.5}
    assert bench.compare("sft", sft, {**sft, "grad_norm": 1.5 * (1 + 5e-6)})[1]
    assert not bench.compare("sft", sft, {**sft, "grad_norm": 1.5 * (1 + 5e-5)})[1]
    assert not bench.compare("sft", sft, {**sft, "grad_norm": float("nan")})[1]


def test_grpo_groups_of_tool_calls_have_distinct_trajectories(bench, tmp_path):
    def call(name, arguments):
        return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}

    records = [
        {
            "task_id": f"t{i}",
            "messages": [
                {"role": "system", "content": "You are a retail agent."},
                {"role": "user", "content": f"Cancel order #W{i}."},
                {"role": "assistant", "content": "", "tool_calls": [call("get_order", {"order_id": f"#W{i}123"})]},
                {"role": "tool", "content": '{"status": "pending"}'},
                {"role": "assistant", "content": "", "tool_calls": [call("cancel", {"order_id": f"#W{i}123"})]},
            ],
        }
        for i in range(4)
    ]
    groups = bench.groups_from_sft(records, seed=0)
    assert len(groups) == 4 and all(len(g["trajectories"]) == 8 for g in groups)
    path = tmp_path / "groups.jsonl"
    _write_jsonl(path, groups)
    assert bench.distinct_groups(path)
    expert = groups[0]["trajectories"][0]["messages"]
    assert expert == records[0]["messages"][2:]
    for row in groups[0]["trajectories"][1:]:  # same lengths, the tool results untouched
        assert [len(json.dumps(m)) for m in row["messages"]] == [len(json.dumps(m)) for m in expert]
        assert row["messages"][1] == expert[1]
    _write_jsonl(path, [{**groups[0], "trajectories": [groups[0]["trajectories"][0]] * 8}])
    assert not bench.distinct_groups(path)
