"""Seed 003's stage metrics and stage comparisons on hand-built trajectories."""

import doctest
import importlib

import pytest
from scipy import stats

from knowlyrcore import Trajectory
from trajectoryhub.evaluate import (
    ExpertReplay,
    compare_sampled,
    compare_stages,
    follows_plan,
    pass_at_k,
    stage_metrics,
    summarize_samples,
    summarize_stage,
    template_table,
    timing_precision,
    tool_selection_f1,
)


def episode(task_id, tools, *, solution=None, success=None, durations=None, reward=None, agent="a"):
    durations = durations or [None] * len(tools)
    metadata = {} if solution is None else {"solution": [{"tool": t, "params": {}} for t in solution]}
    return Trajectory.model_validate(
        {
            "id": f"{agent}-{task_id}",
            "agent": agent,
            "task": {"id": task_id, "description": f"task {task_id}", "metadata": metadata},
            "steps": [
                {"index": i, "tool_call": {"name": tool, "parameters": {}}, "duration_s": d}
                for i, (tool, d) in enumerate(zip(tools, durations))
            ],
            "outcome": {"success": success},
            "reward": reward,
        }
    )


def test_tool_selection_f1_uses_multisets():
    """Agent [find, find, get], expert [find, get, cancel]: matched = min counts = find 1 + get 1 = 2,
    precision 2/3, recall 2/3, F1 = 2/3. As sets the agent would score the same as calling find once."""
    assert tool_selection_f1(["find", "find", "get"], ["find", "get", "cancel"]) == pytest.approx(2 / 3)
    assert tool_selection_f1(["find", "get"], ["find", "get", "cancel"]) == pytest.approx(0.8)  # 2PR/(P+R), P=1, R=2/3
    assert tool_selection_f1([], []) == 1.0
    assert tool_selection_f1(["x"], []) == 0.0 and tool_selection_f1([], ["x"]) == 0.0


def test_follows_plan_is_an_ordered_subsequence():
    assert follows_plan(["find", "look", "get", "cancel"], ["find", "get", "cancel"])
    assert not follows_plan(["get", "find", "cancel"], ["find", "get", "cancel"])
    assert not follows_plan(["find", "get"], ["find", "get", "get"])
    assert follows_plan(["anything"], [])


def test_stage_metrics_hand_computed():
    """e1: expert [find, get, cancel, respond], agent [find, find, get, cancel, respond], solved,
        steps of 0.5 s. F1: matched 4, P = 4/5, R = 1, F1 = 1.6/1.8 = 0.8889; plan followed;
        efficiency 4/5 = 0.8; 2.5 s.
    e2: expert [get, respond], agent [respond, get], failed, no timings: F1 = 1, plan not
        followed (wrong order), no efficiency (failed), no time.
    e3: no solution, agent [x], solved in 1.0 s: only time and end-to-end success.
    So tool selection mean (0.8889 + 1)/2 = 0.9444, std 0.0556 over 2; plan 0.5 over 2;
    efficiency 0.8 over 1; time (2.5 + 1.0)/2 = 1.75 over 2; end-to-end 2/3 over 3."""
    run = [
        episode(
            "e1",
            ["find", "find", "get", "cancel", "respond"],
            solution=["find", "get", "cancel", "respond"],
            success=True,
            durations=[0.5] * 5,
        ),
        episode("e2", ["respond", "get"], solution=["get", "respond"], success=False),
        episode("e3", ["x"], success=True, durations=[1.0]),
    ]
    m = stage_metrics(run)
    assert m["tool_selection_accuracy"] == pytest.approx({"mean": (8 / 9 + 1) / 2, "std": (1 - 8 / 9) / 2, "count": 2})
    assert m["plan_success_rate"] == {"mean": 0.5, "std": 0.5, "count": 2}
    assert m["step_efficiency"] == pytest.approx({"mean": 0.8, "std": 0.0, "count": 1})
    assert m["timing"] == pytest.approx({"mean": 1.75, "std": 0.75, "count": 2})
    assert m["end_to_end_success"] == pytest.approx({"mean": 2 / 3, "std": (2 / 9) ** 0.5, "count": 3})


def test_timing_precision_hand_computed():
    """The expert answers (respond) at step 3 of [find, get, cancel, respond].
    [find, get, cancel, respond]: every step well timed, 4/4 = 1.
    [respond]: answers at step 0 where the expert gathers facts: 0/1.
    [find, get, cancel, get, respond]: steps 0-2 right; step 3 should answer but calls get
        (wrong); step 4 answers after the expert's answer step (right): 4/5 = 0.8.
    [find, respond, get, respond]: step 1 answers early (wrong), step 2 is right (i < 3),
        step 3 answers (right): 3/4 = 0.75."""
    expert = ["find", "get", "cancel", "respond"]
    assert timing_precision(expert, expert) == 1.0
    assert timing_precision(["respond"], expert) == 0.0
    assert timing_precision(["find", "get", "cancel", "get", "respond"], expert) == pytest.approx(0.8)
    assert timing_precision(["find", "respond", "get", "respond"], expert) == pytest.approx(0.75)
    assert timing_precision([], expert) is None and timing_precision(["x"], []) is None
    run = [
        episode("a", ["respond"], solution=expert, success=False),
        episode("b", expert, solution=expert, success=True),
    ]
    assert stage_metrics(run)["timing_precision"] == {"mean": 0.5, "std": 0.5, "count": 2}


def test_step_efficiency_is_capped_and_empty_metrics_are_none():
    shortcut = episode("s", ["respond"], solution=["get", "respond"], success=True)
    assert stage_metrics([shortcut])["step_efficiency"]["mean"] == 1.0  # fewer steps than the expert: capped
    failed = episode("f", ["respond"], success=False)
    assert stage_metrics([failed])["step_efficiency"] == {"mean": None, "std": None, "count": 0}


def test_summarize_stage():
    """3 of 4 solved. Wilson, p = 0.75, n = 4: 1 + z^2/n = 1.960365, centre = (0.75 + 0.480182)
    / 1.960365 = 0.627527, half = 1.959964 sqrt(0.046875 + 0.060023) / 1.960365 = 0.326885,
    so [0.300642, 0.954412]. Rewards 1, 0.5, 1 and none (counts 0): mean 0.625."""
    run = [
        episode(f"t{i}", ["a"], success=s, reward=r)
        for i, (s, r) in enumerate([(True, 1.0), (True, 0.5), (True, 1.0), (False, None)])
    ]
    summary = summarize_stage(run, name="sft", split="test")
    assert summary["name"] == "sft" and summary["split"] == "test" and summary["n"] == 4
    assert summary["success_rate"] == 0.75 and summary["mean_reward"] == 0.625  # the failed one counts 0
    assert summary["ci95"] == pytest.approx([0.300642, 0.954412], abs=2e-6)
    assert set(summary["metrics"]) == {
        "tool_selection_accuracy",
        "plan_success_rate",
        "step_efficiency",
        "timing_precision",
        "timing",
        "end_to_end_success",
    }
    with pytest.raises(ValueError, match="no trajectories"):
        summarize_stage([], name="empty")


def test_compare_stages_mcnemar_and_bonferroni():
    """Nine tasks. base solves t0..t7, sft only t8, grpo the same as base.
    base vs sft: a_only = 8, b_only = 1 -> exact McNemar p = 20/512 = 0.0390625 (see test_stats),
    Bonferroni over 3 pairs: 0.1171875 -> not significant at 0.05.
    Rewards 1/0: b - a = [-1]*8 + [1], mean -7/9, sample variance (8 (2/9)^2 + (16/9)^2)/8 = 4/9,
    se = (2/3)/3 = 2/9, t = -3.5 on 8 df. base vs grpo: identical, every p is 1."""
    base = [episode(f"t{i}", ["a"], success=i < 8, reward=float(i < 8), agent="base") for i in range(9)]
    sft = [episode(f"t{i}", ["a"], success=i == 8, reward=float(i == 8), agent="sft") for i in range(9)]
    grpo = [episode(f"t{i}", ["a"], success=i < 8, reward=float(i < 8), agent="grpo") for i in range(9)]
    rows = compare_stages({"base": base, "sft": sft, "grpo": list(reversed(grpo))}, split="test")
    assert [(r["a"], r["b"]) for r in rows] == [("base", "sft"), ("base", "grpo"), ("sft", "grpo")]
    first = rows[0]
    assert first["n_pairs"] == 9 and first["test"] == "mcnemar" and first["split"] == "test"
    assert (first["a_only"], first["b_only"]) == (8, 1)
    assert first["diff"] == pytest.approx(-7 / 9) and first["reward_diff"] == pytest.approx(-7 / 9)
    assert first["p_value"] == pytest.approx(20 / 512)
    assert first["p_value_bonferroni"] == pytest.approx(3 * 20 / 512) and not first["significant"]
    assert first["reward_p_ttest"] == pytest.approx(2 * stats.t.sf(3.5, df=8))
    assert 0 < first["reward_p_wilcoxon"] < 0.05
    same = rows[1]  # pairing is by task id, so grpo's reversed order does not matter
    assert same["p_value"] == same["reward_p_ttest"] == same["reward_p_wilcoxon"] == 1.0 and same["diff"] == 0
    assert all(r["n_comparisons"] == 3 for r in rows)


def test_compare_stages_errors():
    with pytest.raises(ValueError, match="at least two"):
        compare_stages({"a": [episode("t", ["x"])]})
    with pytest.raises(ValueError, match="share no task id"):
        compare_stages({"a": [episode("t1", ["x"])], "b": [episode("t2", ["x"])]})


def test_pass_at_k_hand_computed():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(5, 5, 1) == 1.0
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(3, 4, 1)


def sampled(agent, outcomes_by_task):
    return [
        episode(task, ["respond"], success=ok, agent=agent)
        for task, outcomes in outcomes_by_task.items()
        for ok in outcomes
    ]


def test_summarize_samples_and_the_paired_test_on_task_rates():
    """Task rates a: x 1/4, y 0/4, z 2/4 -> pass@1 = 0.75/3 = 0.25, pass@4 = (1 + 0 + 1)/3.
    b: x 3/4, y 1/4, z 4/4 -> differences +0.5, +0.25, +0.5: all positive, Wilcoxon's exact
    two-sided p for 3 pairs with all ranks positive is 2/8 = 0.25."""
    a = summarize_samples(sampled("a", {"x": [1, 0, 0, 0], "y": [0, 0, 0, 0], "z": [1, 1, 0, 0]}), name="a", k=4)
    b = summarize_samples(sampled("b", {"x": [1, 1, 1, 0], "y": [0, 0, 1, 0], "z": [1, 1, 1, 1]}), name="b", k=4)
    assert a["pass@1"] == pytest.approx(0.25) and a["pass@k"] == pytest.approx(2 / 3)
    assert a["per_task"] == {"x": 0.25, "y": 0.0, "z": 0.5} and a["n_tasks"] == 3 and a["episodes"] == 12
    row = compare_sampled(a, b)
    assert row["diff"] == pytest.approx(5 / 12) and (row["better_tasks"], row["worse_tasks"]) == (3, 0)
    assert row["test"] == "wilcoxon" and row["p_value"] == pytest.approx(0.25)
    assert row["p_value"] == pytest.approx(stats.wilcoxon([0.5, 0.25, 0.5]).pvalue)
    with pytest.raises(ValueError, match="fewer than k=4"):
        summarize_samples(sampled("a", {"x": [1, 0]}), name="a", k=4)
    with pytest.raises(ValueError, match="share no task"):
        compare_sampled(a, summarize_samples(sampled("c", {"w": [1]}), name="c", k=1))


def test_template_table_counts_per_split_template_and_stage():
    def run(agent, split_outcomes):
        out = []
        for i, (template, ok) in enumerate(split_outcomes):
            t = episode(f"{template}{i}", ["respond"], success=ok, agent=agent)
            out.append(t.model_copy(update={"task": t.task.model_copy(update={"metadata": {"template": template}})}))
        return out

    runs = {
        "sft": {
            "test": run("sft", [("cancel", True), ("cancel", False), ("status", True)]),
            "test-unseen": run("sft", [("by_name", False)]),
        },
        "rl": {
            "test": run("rl", [("cancel", True), ("cancel", True), ("status", True)]),
            "test-unseen": run("rl", [("by_name", True)]),
        },
    }
    header, rows = template_table(runs, seen_templates=["cancel", "status"])
    assert header == ["split", "template", "template in train", "sft", "rl"]
    assert rows == [
        ["test", "cancel", "yes", "1/2", "2/2"],
        ["test", "status", "yes", "1/1", "1/1"],
        ["test-unseen", "by_name", "no", "0/1", "1/1"],
    ]
    header, rows = template_table(runs, roles={"cancel": "demonstrated", "status": "demonstrated"})
    assert header == ["split", "template", "role", "sft", "rl"]
    assert [row[2] for row in rows] == ["demonstrated", "demonstrated", "?"]


def test_expert_replay():
    expert = ExpertReplay()
    with pytest.raises(ValueError, match="no metadata.solution"):
        expert.reset({"id": "bare"})
    expert.reset(
        {"id": "t", "metadata": {"solution": [{"tool": "a", "params": {}}, {"tool": "b", "params": {"x": 1}}]}}
    )
    assert [expert("obs")["tool"], expert("obs")["tool"]] == ["a", "b"]
    with pytest.raises(ValueError, match="exhausted"):
        expert("obs")
    assert doctest.testmod(importlib.import_module("trajectoryhub.evaluate")).failed == 0
