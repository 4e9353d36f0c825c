"""The reward model's LLM judge against real models served by `knowlyr-trainer serve`.

1. A tiny model trained (here, to convergence on the judge's own prompts) to answer with a
   rubric JSON: the judge's scores come from the model over HTTP and land in the reward.
2. SmolLM2-135M-Instruct, the embedded model: whatever it answers, the judge either parses
   scores in range or abstains with a recorded reason; it never corrupts the reward.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from knowlyrcore.testing import require_module

# `make test` installs every package with its dev extras: nothing here is legitimately absent
require_module("agentreward", "the judge is knowlyr-reward's")
require_module("agenttrainer", "the served model is knowlyr-trainer's `serve`")
require_module("openai", "the judge needs the openai SDK (knowlyr-reward[llm])")

from agentreward import Judge, RewardEngine  # noqa: E402
from agentreward.judge import SYSTEM_PROMPT, build_prompt  # noqa: E402

pytestmark = pytest.mark.integration

TRAJ = {
    "task": {"description": "Find the status of order-17", "domain": "conversation"},
    "steps": [
        {
            "tool_call": {"name": "query_stats", "parameters": {"query": "order-17"}},
            "observation": {"output": "shipped"},
        },
        {"tool_call": {"name": "respond", "parameters": {"message": "It shipped."}}, "observation": {"output": "ok"}},
    ],
    "outcome": {"success": True},
}
ANSWERS = [
    '{"goal_progress": 0.6, "tool_selection": 0.9, "param_correctness": 0.7}',
    '{"goal_progress": 1.0, "tool_selection": 0.8, "param_correctness": 1.0}',
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`knowlyr-trainer serve CHECKPOINT` as a subprocess, ready when /v1/models answers."""

    def __init__(self, checkpoint: str, name: str):
        self.port = free_port()
        self.name = name
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agenttrainer.cli",
                "serve",
                checkpoint,
                "--port",
                str(self.port),
                "--model-name",
                name,
                "--max-tokens",
                "64",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stdout.read()}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2) as r:
                    if json.load(r)["data"]:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("server did not become ready in 180 s")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.mark.slow  # fitting the tiny judge to its prompts takes a few minutes on 2 cores
def test_judge_scores_come_from_a_served_model(tmp_path):
    from agenttrainer import save_model
    from agenttrainer.models import build_tiny_model, overfit_tiny_model

    model, tokenizer = build_tiny_model(hidden_size=64, num_layers=2, seed=0)
    examples = [
        {
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": build_prompt(TRAJ, i)},
            ],
            "answer": ANSWERS[i],
        }
        for i in range(2)
    ]
    overfit_tiny_model(model, tokenizer, examples, max_optimizer_steps=400)
    save_model(model, tokenizer, tmp_path / "judge")
    server = Served(str(tmp_path / "judge"), "tiny-judge")
    try:
        judge = Judge(model="tiny-judge", base_url=server.url, max_tokens=64, max_retries=0)
        scored = RewardEngine(judge=judge).score_record(TRAJ)
    finally:
        server.close()
    assert judge.failures == [] and judge.calls == 2
    assert scored["steps"][0]["rubric_scores"]["goal_progress"] == 0.6
    assert scored["steps"][0]["rubric_scores"]["tool_selection"] == 0.9
    assert scored["steps"][1]["rubric_scores"]["param_correctness"] == 1.0
    # rule rubrics are untouched by the judge
    assert scored["steps"][1]["rubric_scores"]["non_redundancy"] == 1.0


def test_judge_with_smollm2_parses_or_abstains():
    server = Served("smollm2-135m", "smollm2-135m")
    try:
        judge = Judge(model="smollm2-135m", base_url=server.url, max_tokens=48, max_retries=0)
        rules_only = RewardEngine().score_record(TRAJ)
        scored = RewardEngine(judge=judge).score_record(TRAJ)
        # the Yes/No verdict read from the served model's top_logprobs: graded, never unusable here
        verdict = Judge(model="smollm2-135m", base_url=server.url, mode="both", verdict="logprobs")
        by_verdict = RewardEngine(judge=verdict).score_record(TRAJ)
    finally:
        server.close()
    assert verdict.calls == 3 and verdict.failures == []
    for step in by_verdict["steps"]:
        p_yes = {step["rubric_scores"][name] for name in ("goal_progress", "tool_selection", "param_correctness")}
        assert len(p_yes) == 1 and 0.0 < p_yes.pop() < 1.0
    assert 0.0 < by_verdict["metadata"]["judge_task_success"] < 1.0
    assert judge.calls == 2
    for i, step in enumerate(scored["steps"]):
        assert all(0.0 <= v <= 1.0 for v in step["rubric_scores"].values())
        if any(f.startswith(f"step {i}:") for f in judge.failures):
            assert step["rubric_scores"] == rules_only["steps"][i]["rubric_scores"]
