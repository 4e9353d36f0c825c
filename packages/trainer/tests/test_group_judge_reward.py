"""Online RL with the group-relative judge as a reward term (``rewards.group_judge_url``).

A tiny random model plays a one-step environment whose every episode earns 0.25; the judge is a
``knowlyrcore.testing.ScriptedChatServer`` (a real loopback HTTP server replying from a script).
With ``group_judge_coef`` 2 and no process reward or format penalty, an episode's reward is
``0.25 + 2 x its judge score``: the group the judge scores [0.1, 0.5, 0.9] gets 0.45, 1.25 and
2.05 (in the order its trajectories were shown), a group whose judge abstains (three unusable
replies: the first and two retries) keeps 0.25 each, and a task without a rubric is never sent.

    pytest packages/trainer/tests/test_group_judge_reward.py
"""

from __future__ import annotations

import json
import re

import pytest
from small_online import small_online_config

from agenttrainer.config import ConfigError
from agenttrainer.online import OnlineRLTrainer
from knowlyrcore import AgentEnv, TimeStep, read_jsonl, register, unregister
from knowlyrcore.testing import ScriptedChatServer, require_module

# knowlyr-reward is a sibling: absent from the trainer's isolated install ([dev] brings no sibling)
pytest.importorskip("agentreward", reason="the group judge is knowlyr-reward's (knowlyr-trainer[online])")
require_module("openai", "the judge needs the openai SDK (knowlyr-reward[llm])")

from agentreward.relative import transcript  # noqa: E402

RUBRIC = "Answers the question in one short sentence."
TASKS = [
    {"id": "a", "description": "What colour is the sky?", "metadata": {"rubric": RUBRIC}},
    {"id": "b", "description": "How many legs has a cat?", "metadata": {"rubric": RUBRIC}},
    {"id": "c", "description": "Name a prime number.", "metadata": {}},
]
ENV_REWARD = 0.25


class OneAnswer(AgentEnv):
    """Any action ends the episode with reward 0.25."""

    domain = "generic"

    def reset(self, *, task=None, seed=None):
        return TimeStep(observation=task.description)

    def step(self, action):
        return TimeStep(observation="noted", reward=ENV_REWARD, terminated=True, info={"success": False})

    @property
    def available_tools(self):
        return ["respond"]


@pytest.fixture(autouse=True)
def one_answer_env():
    register("test/one-answer", OneAnswer)
    yield
    unregister("test/one-answer")


def run_config(tmp_path, judge_url: str, tasks=TASKS, **overrides):
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    values = {
        "env_id": "test/one-answer",
        "group_size": 3,
        "tasks_per_iteration": 3,
        "num_iterations": 1,
        "batch_size": 9,
        "max_steps": 1,
        "max_new_tokens": 6,
        "max_episode_tokens": 256,
        "format_penalty": 0.0,
        "group_judge_url": judge_url,
        "group_judge_model": "judge-m",
        "group_judge_coef": 2.0,
    }
    return small_online_config(tmp_path, tasks_file, **{**values, **overrides})


def test_the_group_judges_scores_are_added_to_the_rewards_of_its_group(tiny, tmp_path):
    model, tokenizer = tiny
    with ScriptedChatServer() as server:
        server.replies += [
            {"content": '{"scores": [0.1, 0.5, 0.9]}'},
            {"content": "They all look fine."},
            {"content": '{"scores": [0.5, 0.5]}'},
            {"content": '{"scores": [0.5, NaN, 0.5]}'},
        ]
        config = run_config(tmp_path, server.base_url)
        result = OnlineRLTrainer(config, model=model, tokenizer=tokenizer).train()
    assert result["iterations"] == 1 and result["optimizer_steps"] == 1
    assert len(server.requests) == 4  # two groups judged (one retried twice), the task without a rubric not
    prompts = [r["body"]["messages"][1]["content"] for r in server.requests]
    first_task = next(t for t in TASKS if prompts[0].startswith(f"TASK: {t['description']}"))
    second_task = next(t for t in TASKS[:2] if t is not first_task)
    assert all(p.startswith(f"TASK: {second_task['description']}") for p in prompts[1:])

    runs = list(read_jsonl(tmp_path / "out" / "rollouts" / "iteration-00001.jsonl"))
    by_task: dict[str, list[dict]] = {}
    for run in runs:
        by_task.setdefault(run["task"]["id"], []).append(run)
    assert sorted(by_task) == ["a", "b", "c"] and all(len(g) == 3 for g in by_task.values())
    for run in runs:  # every episode earned 0.25 from the environment
        assert sum(s["metadata"]["env_reward"] for s in run["steps"]) == ENV_REWARD

    # the judged group: the trajectory shown at position p gets 0.25 + 2 x [0.1, 0.5, 0.9][p]
    sections = re.split(r"^TRAJECTORY \d+:\n", prompts[0], flags=re.MULTILINE)[1:]
    shown = [section.split("\n\n")[0] for section in sections]
    judged = by_task[first_task["id"]]
    for run in judged:
        positions = [p for p, text in enumerate(shown) if text == transcript(run)]
        assert run["metadata"]["group_judge"] in [[0.1, 0.5, 0.9][p] for p in positions]
        assert run["reward"] == pytest.approx(ENV_REWARD + 2.0 * run["metadata"]["group_judge"])
    assert sorted(run["reward"] for run in judged) == pytest.approx([0.45, 1.25, 2.05])
    # the abstaining group adds nothing; the task without a rubric is not judged at all
    for run in by_task[second_task["id"]]:
        assert run["metadata"]["group_judge"] is None and run["reward"] == ENV_REWARD
    for run in by_task["c"]:
        assert "group_judge" not in run["metadata"] and run["reward"] == ENV_REWARD

    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["judge/episodes"] == 6 and metrics[0]["judge/abstained"] == 3
    assert metrics[0]["judge/score_mean"] == pytest.approx(0.5)
    assert metrics[0]["rollout/reward_mean"] == pytest.approx((0.45 + 1.25 + 2.05 + 6 * ENV_REWARD) / 9)


def test_ppo_gets_the_judges_score_with_the_outcome_on_the_last_token(tiny, tmp_path):
    model, tokenizer = tiny
    with ScriptedChatServer() as server:
        server.replies.append({"content": '{"scores": [0.0, 1.0]}'})
        config = run_config(tmp_path, server.base_url, TASKS[:1], algorithm="ppo", group_size=2, tasks_per_iteration=1)
        trainer = OnlineRLTrainer(config, model=model, tokenizer=tokenizer)
        rollouts = trainer.rollout(0)
        trainer.score(rollouts)
    assert len(server.requests) == 1
    # 0.25 + 2 x 0 and 0.25 + 2 x 1, in the whole reward and in PPO's last-token reward alike
    assert sorted(r.reward for r in rollouts) == [0.25, 2.25]
    assert sorted(trainer.token_rewards(r)[-1] for r in rollouts) == [0.25, 2.25]


def test_the_judge_settings_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="group_judge_url and group_judge_model go together"):
        run_config(tmp_path, "http://127.0.0.1:9/v1", group_judge_model=None)
    with pytest.raises(ConfigError, match="group_judge_coef must be a finite number"):
        run_config(tmp_path, "http://127.0.0.1:9/v1", group_judge_coef=float("nan"))
