"""Batched vs one-at-a-time acting: episodes/s and generated tokens/s of SmolLM2-135M in an env.

The embedded SmolLM2-135M-Instruct (fp32: ``AgentInference`` has no autocast) plays the same
``retail`` suite tasks (``knowlyr/retail``: customer-service tool use, the suite's system prompt
and the domain's tools in the chat template) three times, greedy, same step and token budgets:

* one ``Agent`` per episode through ``collect()``: one ``generate`` per episode per turn on the
  whole prompt (what there was before batched acting);
* ``LocalBatchPolicy`` with ``batch_size=1`` through ``collect_batched``: one row per
  ``generate``, but the shared system/tools prefix comes from its KV cache;
* ``LocalBatchPolicy`` with ``--batch-size`` rows per ``generate`` (the live episodes of a chunk).

Greedy decoding makes the three runs take the same actions (the JSON line reports how many
trajectories came out identical). Timed: the rollouts, after a warm-up generate; tokens are the
generated tokens of every answer (padding excluded). Throughput is reported per wall second and
per CPU second of this process (the latter is steadier when other jobs share the machine; on a
shared machine run with ``OMP_NUM_THREADS=1``, as more threads than free cores stall on each other).

    python bench/rollout.py [--episodes 32] [--batch-size 32] [--max-new-tokens 64] [--max-steps 6]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import torch

from agentsandbox.suites import get_suite
from agenttrainer.batch_policy import LocalBatchPolicy
from agenttrainer.inference import AgentInference
from agenttrainer.models import load_model_and_tokenizer
from knowlyrcore import get_domain_profile, make
from trajectoryhub import collect, collect_batched

MODEL = "smollm2-135m"


class TokenCounter:
    """Passes a BatchPolicy through, adding up the generated tokens its actions report."""

    def __init__(self, policy: LocalBatchPolicy):
        self.policy = policy
        self.generated = 0

    def reset_batch(self, tasks):
        self.policy.reset_batch(tasks)

    def act_batch(self, observations):
        actions = self.policy.act_batch(observations)
        self.generated += sum(a["usage"]["completion_tokens"] for a in actions if a is not None)
        return actions


class CountingInference(AgentInference):
    """``AgentInference`` that adds up the tokens it generates (what ``Agent`` calls per turn)."""

    generated = 0

    def complete(self, *args, **kwargs):
        completion = super().complete(*args, **kwargs)
        self.generated += completion.completion_tokens
        return completion


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    suite = get_suite("retail")
    tasks = suite.generate("test", args.episodes, args.seed)
    probe = make(suite.env_id, **suite.env_kwargs)
    tools = get_domain_profile(probe.domain).tools
    probe.close()
    model, tokenizer = load_model_and_tokenizer(MODEL)
    engine = CountingInference(model, tokenizer, max_new_tokens=args.max_new_tokens)
    engine.generate([{"role": "user", "content": "Hello"}], max_new_tokens=4)  # warm-up
    rollout = dict(max_steps=args.max_steps, env_kwargs=suite.env_kwargs, progress=False)

    def agents():
        engine.generated = 0
        make_agent = functools.partial(engine.create_agent, system_prompt=suite.system_prompt, tools=tools)
        return collect(suite.env_id, agent_factory=make_agent, n_episodes=len(tasks), tasks=tasks, **rollout)

    def lockstep(batch_size: int) -> TokenCounter:
        policy = LocalBatchPolicy(engine, system_prompt=suite.system_prompt, tools=tools, batch_size=batch_size)
        return TokenCounter(policy)

    per_agent, by_agents = timed(agents, engine, len(tasks))
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
    }))  # fmt: skip


if __name__ == "__main__":
    main()
