"""Batched vs one-at-a-time acting: episodes/s and generated tokens/s of SmolLM2-135M in an env.

The embedded SmolLM2-135M-Instruct (fp32: the local policy has no autocast) plays the same
``retail`` suite tasks (``knowlyr/retail``: customer-service tool use, the suite's system prompt
and the domain's tools in the chat template) three times, greedy, same step and token budgets,
always through the local policy (``agenttrainer.acting.TokenPolicy``):

* one agent per episode (``AgentInference.create_agent``: the policy as a batch of one) through
  ``collect()``: one ``generate`` per episode per turn (what there was before batched acting);
* the policy with ``batch_size=1`` through ``collect_batched``: one row per prefill forward,
  the shared system/tools prefix from the engine's KV cache;
* the policy with ``--batch-size`` rows per forward (the live episodes of a chunk).

Greedy decoding makes the three runs take the same actions (the JSON line reports how many
trajectories came out identical). Timed: the rollouts, after a warm-up generate; tokens are the
generated tokens of every answer (padding excluded). Throughput is reported per wall second and
per CPU second of this process (the latter is steadier when other jobs share the machine; on a
shared machine run with ``OMP_NUM_THREADS=1``, as more threads than free cores stall on each other).

Then ``--online-iterations`` iterations of online RL (``OnlineRLTrainer``, GRPO, group size 4,
the same tasks and budgets, sampled at temperature 1) split each iteration's time into rollout
(batched generation + environment steps) and training (reference pass, forward/backward,
optimizer step), with tokens/s for each: where an online iteration's time goes on this machine.
Every group is trained on (``skip_uniform_groups`` off) so the training side is measured even
when the base model solves nothing.

    python bench/rollout.py [--episodes 32] [--batch-size 32] [--max-new-tokens 64] [--max-steps 6] \
        [--online-iterations 2] [--online-model smollm2-135m]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from pathlib import Path

import torch

from agentsandbox.suites import get_suite
from agenttrainer.acting import AgentInference, LocalGenerator, TokenPolicy
from agenttrainer.config import OnlineRLConfig
from agenttrainer.models import load_model_and_tokenizer
from agenttrainer.online import OnlineRLTrainer
from knowlyrcore import get_domain_profile, make, write_jsonl
from trajectoryhub import collect, collect_batched

MODEL = "smollm2-135m"


class TokenCounter:
    """Passes the local policy through, adding up the tokens it sampled (over every batch of episodes)."""

    def __init__(self, policy: TokenPolicy):
        self.policy = policy
        self.finished = 0  # sampled by the batches before this one

    def __getattr__(self, name):
        return getattr(self.policy, name)

    @property
    def generated(self) -> int:
        return self.finished + sum(record.sampled_tokens for record in self.policy.records)

    def reset_batch(self, tasks):
        self.finished = self.generated
        self.policy.reset_batch(tasks)

    def act_batch(self, observations):
        return self.policy.act_batch(observations)


class CountingAgents:
    """A factory of the seed API's agents (one episode each) that adds up the tokens they sampled."""

    def __init__(self, make_agent):
        self.make_agent = make_agent
        self.agents = []

    def __call__(self):
        self.agents.append(self.make_agent())
        return self.agents[-1]

    @property
    def generated(self) -> int:
        return sum(record.sampled_tokens for agent in self.agents for record in agent.records)


def timed(rollout, counter, n_episodes: int) -> tuple[dict, list]:
    wall, cpu = time.perf_counter(), time.process_time()
    trajectories = rollout()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    result = {
        "seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "episodes_per_s": round(n_episodes / wall, 4),
        "tokens_per_s": round(counter.generated / wall, 1),
        "tokens_per_cpu_s": round(counter.generated / cpu, 1),
        "generated_tokens": counter.generated,
        "steps": sum(len(t.steps) for t in trajectories),
        "success_rate": round(sum(bool(t.outcome.success) for t in trajectories) / len(trajectories), 3),
    }
    return result, trajectories


def actions_of(trajectory) -> list:
    return [(s.thought, s.tool_call.name, s.tool_call.parameters, s.observation.output) for s in trajectory.steps]


def online_iterations(suite, tasks, args) -> dict:
    """Time ``args.online_iterations`` online RL iterations: rollout vs training, tokens/s of each."""
    with tempfile.TemporaryDirectory() as tmp:
        write_jsonl(Path(tmp) / "tasks.jsonl", tasks)
        config = OnlineRLConfig.from_dict(dict(
            model_name_or_path=args.online_model, env_id=suite.env_id, env_kwargs=suite.env_kwargs or None,
            tasks_file=str(Path(tmp) / "tasks.jsonl"), output_dir=str(Path(tmp) / "rl"),
            system_prompt=suite.system_prompt, group_size=4, tasks_per_iteration=max(len(tasks) // 4, 1),
            num_iterations=args.online_iterations, max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
            learning_rate=1e-6, warmup_ratio=0.0, lr_scheduler="constant", batch_size=4,
            skip_uniform_groups=False, progress_bar=False,
        ))  # fmt: skip
        trainer = OnlineRLTrainer(config)
        trainer.train()
        history = [json.loads(line) for line in (Path(tmp) / "rl" / "metrics.jsonl").read_text().splitlines()]
    rollout_s = sum(h["rollout/seconds"] for h in history)
    train_s = sum(h.get("train/seconds", 0.0) for h in history)
    return {
        "model": args.online_model, "iterations": len(history), "episodes_per_iteration": int(history[0]["rollout/episodes"]),
        "seconds_per_iteration": round((rollout_s + train_s) / len(history), 1),
        "rollout_seconds_per_iteration": round(rollout_s / len(history), 1),
        "train_seconds_per_iteration": round(train_s / len(history), 1),
        "rollout_share": round(rollout_s / (rollout_s + train_s), 3),
        "rollout_tokens_per_s": round(sum(h["rollout/sampled_tokens"] for h in history) / rollout_s, 1),
        "train_tokens_per_s": round(sum(h.get("train/tokens", 0.0) for h in history) / max(train_s, 1e-9), 1),
        "logprob_mismatch": round(sum(h.get("train/logprob_mismatch", 0.0) for h in history) / len(history), 5),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--online-iterations", type=int, default=2, help="online RL iterations to time (0 skips)")
    parser.add_argument(
        "--online-model", default=MODEL, help="policy of the online iterations (e.g. an SFT checkpoint)"
    )
    args = parser.parse_args()

    suite = get_suite("retail")
    tasks = suite.generate("test", args.episodes, args.seed)
    probe = make(suite.env_id, **suite.env_kwargs)
    tools = get_domain_profile(probe.domain).tools
    probe.close()
    model, tokenizer = load_model_and_tokenizer(MODEL)
    engine = AgentInference(model, tokenizer, max_new_tokens=args.max_new_tokens)
    engine.generate([{"role": "user", "content": "Hello"}], max_new_tokens=4)  # warm-up
    rollout = dict(max_steps=args.max_steps, env_kwargs=suite.env_kwargs, progress=False)
    make_agent = CountingAgents(functools.partial(engine.create_agent, system_prompt=suite.system_prompt, tools=tools))

    def agents():
        return collect(suite.env_id, agent_factory=make_agent, n_episodes=len(tasks), tasks=tasks, **rollout)

    def lockstep(batch_size: int) -> TokenCounter:
        generator = LocalGenerator(model, tokenizer, batch_size=batch_size)
        settings = dict(system_prompt=suite.system_prompt, tools=tools, max_new_tokens=args.max_new_tokens)
        return TokenCounter(TokenPolicy(generator, tokenizer, temperature=0.0, **settings))

    per_agent, by_agents = timed(agents, make_agent, len(tasks))
    one = lockstep(1)
    one_at_a_time, by_one = timed(lambda: collect_batched(suite.env_id, one, tasks, batch_size=args.batch_size,
                                                          **rollout), one, len(tasks))  # fmt: skip
    many = lockstep(args.batch_size)
    batched, by_batch = timed(lambda: collect_batched(suite.env_id, many, tasks, batch_size=args.batch_size,
                                                      **rollout), many, len(tasks))  # fmt: skip

    def same(a, b) -> str:
        return f"{sum(actions_of(x) == actions_of(y) for x, y in zip(a, b))}/{len(tasks)}"

    speedup = batched["episodes_per_s"] / per_agent["episodes_per_s"]
    print(json.dumps({
        "bench": "rollout_batched_vs_one_at_a_time", "model": MODEL, "env": suite.env_id, "episodes": len(tasks),
        "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens, "max_steps": args.max_steps,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."), "threads": torch.get_num_threads(),
        "one_agent_per_episode": per_agent, "batch_policy_batch_size_1": one_at_a_time, "batched": batched,
        "speedup_vs_agents": round(speedup, 2),
        "speedup_vs_batch_size_1": round(batched["episodes_per_s"] / one_at_a_time["episodes_per_s"], 2),
        "identical_trajectories": {"batched_vs_agents": same(by_batch, by_agents),
                                   "batched_vs_batch_size_1": same(by_batch, by_one)},
        "target_speedup": 3.0, "meets_target": speedup >= 3.0,
        "online_iteration": online_iterations(suite, tasks, args) if args.online_iterations > 0 else None,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
