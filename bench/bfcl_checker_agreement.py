"""Does our BFCL checker judge real model outputs as bfcl-eval's own checker does? Prints one JSON line.

The embedded SmolLM2-135M-Instruct answers BFCL test tasks of the single-turn categories
(``simple_python``, ``multiple``, ``parallel``, ``parallel_multiple``, ``irrelevance``; the suite
``bfcl``), with the task's functions offered as tools in the chat template and the suite's system
prompt, as ``knowlyr/bfcl`` episodes see them. Per task and per mode, one greedy answer and
``--samples`` answers sampled at temperature 1.0:

* ``free``: the assistant turn as the template opens it (a 135M model mostly answers in prose);
* ``named``: the assistant turn prefilled with ``<tool_call>\\n{"name": "<f>", "arguments": ``
  for one of the task's functions ``f`` (drawn per task), so the model writes a call's arguments
  itself (wrong, missing, extra, mistyped values; more calls after it). Left to choose the name
  too, SmolLM2-135M writes mostly names that are no function at all.

A reply becomes calls by knowlyr's shared parser (``knowlyrcore.tool_parsing.parse_reply``; an
endpoint's message: every ``tool_calls`` entry, else its text), keeping ALL the calls of the
reply, as BFCL reads them. Each output is then judged twice:

* ours: ``agentsandbox.bfcl.checker.check(calls, possible_answer, functions)``; on a seeded sample
  (``--replay``) the calls are also replayed through ``knowlyr/bfcl`` (each call a step, then
  ``respond``) and the episode's ``success`` must equal the checker's verdict;
* BFCL's: the calls decoded into BFCL's ``[{name: {param: value}}]``, then
  ``bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker(functions, decoded, possible_answer,
  Language.PYTHON, category, model_name)``; irrelevance as BFCL's relevance runner judges it:
  right when the output decodes to no call or fails to decode. A call whose arguments did not
  parse (or a ``<tool_call>`` block that is not JSON) makes the whole output fail to decode, as
  BFCL's decoders raise on it.

bfcl-eval's checker module imports its model registry, which needs every provider SDK; when that
import fails the registry is replaced by one where no model renames dotted functions (this
project offers names as documented, dots included), the only thing the checker reads from it.

Also judged, reported apart: a perturbation set built from every test task's expert answer (as
is, a wrong name, a parameter dropped, an unknown parameter added, a wrong value, a parallel
answer reversed, a call repeated; irrelevance: no call, and a made-up call of its first function).

    OMP_NUM_THREADS=1 python bench/bfcl_checker_agreement.py [--per-category 8] [--samples 6]
        [--max-new-tokens 48] [--outputs FILE | --endpoint URL --model NAME] [--save-outputs FILE]
        [--report runs/bfcl/checker_agreement.json]

``--outputs FILE`` scores precomputed outputs instead of generating: JSONL records
``{"task_id": "<bfcl id>", "text": "..."}`` or ``{"task_id", "message": {OpenAI assistant message}}``
(``kind`` optional). The report lists every disagreement (id, our reason, BFCL's error).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
import types
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from agentsandbox.bfcl import SYSTEM_PROMPT, BFCLEnv, check, tool_specs
from agentsandbox.suites import get_suite
from knowlyrcore import read_jsonl, write_jsonl
from knowlyrcore.jsonl import write_bytes_atomic
from knowlyrcore.tool_parsing import call_from_json, parse_reply
from trajectoryhub import wilson_interval

MODEL = "smollm2-135m"
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
NAMED = '<tool_call>\n{{"name": "{}", "arguments": '
CHECKER_MODEL_NAME = "knowlyr"  # any name: the stand-in registry renames nothing


def bfcl_checker() -> tuple[Any, Any]:
    """bfcl-eval's ``ast_checker`` and its ``Language`` enum (see the module docstring on the registry)."""
    try:
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    except ModuleNotFoundError:  # the model registry imports provider SDKs bfcl-eval was installed without
        registry = types.ModuleType("bfcl_eval.constants.model_config")
        registry.MODEL_CONFIG_MAPPING = defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
        sys.modules[registry.__name__] = registry
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.constants.enums import Language

    return ast_checker, Language.PYTHON


# -- replies -> calls ------------------------------------------------------------------------------


def reply_calls(output: dict[str, Any], tools: list[Any]) -> tuple[list[dict[str, Any]], str | None]:
    """All the calls of one reply (``{"tool", "params"}``, ``format_error`` when their arguments did
    not parse) and why BFCL could not decode it (a broken call anywhere), or None."""
    message = output.get("message")
    if message is not None and message.get("tool_calls"):
        calls = [call_from_json(c) for c in message["tool_calls"]]
        if any(c is None for c in calls):
            return [], "a tool call names no function"
        actions = [c.to_action() for c in calls]
        errors = [a["format_error"] for a in actions if "format_error" in a]
    else:
        text = output["text"] if message is None else message.get("content") or ""
        reply = parse_reply(text, tools)
        if reply.calls:
            actions = [c.to_action() for c in reply.calls]
        elif reply.style == "text":  # an Action: line or a bare JSON call: one call
            actions = [reply.action]
        else:
            actions = []
        errors = [*reply.errors, *(a["format_error"] for a in actions if "format_error" in a)]
    calls = [{k: a[k] for k in ("tool", "params", "format_error") if k in a} for a in actions]
    return calls, "; ".join(errors) or None


def bfcl_verdict(task: dict[str, Any], calls: list[dict[str, Any]], decode_error: str | None,
                 checker: tuple[Any, Any]) -> tuple[bool, str]:  # fmt: skip
    """BFCL's verdict and its error text, following its eval runner for the category."""
    meta = task["metadata"]
    if meta["category"] == "irrelevance":  # BFCL's relevance runner: right when nothing decodes to a call
        if decode_error is not None:
            return True, f"decode failed ({decode_error[:80]})"
        decoded = [{c["tool"]: c["params"]} for c in calls]
        has_call = bool(decoded) and not (len(decoded) == 1 and not decoded[0])
        return (False, "Valid syntax. Successfully decode AST when it should not.") if has_call else (True, "")
    if decode_error is not None:
        return False, f"Invalid syntax. Failed to decode AST. {decode_error[:80]}"
    ast_checker, language = checker
    decoded = [{c["tool"]: c["params"]} for c in calls]
    try:
        result = ast_checker(copy.deepcopy(meta["functions"]), decoded, meta["possible_answer"], language,
                             meta["category"], CHECKER_MODEL_NAME)  # fmt: skip
    except Exception as exc:  # its checker's own crash is a finding to list, not a stop
        return False, f"ast_checker raised {type(exc).__name__}: {exc}"
    return bool(result["valid"]), json.dumps(result.get("error", []), default=str)[:400]


# -- model outputs ---------------------------------------------------------------------------------


def sample_tasks(per_category: int, seed: int) -> list[dict[str, Any]]:
    tasks = get_suite("bfcl").generate("test", 10**6, 0)
    rng = random.Random(seed)
    chosen = []
    for category in CATEGORIES:
        pool = [t for t in tasks if t["metadata"]["category"] == category]
        chosen += rng.sample(pool, min(per_category, len(pool)))
    return chosen


def generate_local(tasks: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Greedy and sampled answers of SmolLM2 in both modes, one task at a time: every row of a task
    shares its prompt, so the prompt is prefilled once (``LocalGenerator``'s shared-prefix cache)
    and only the answers are decoded; prefill, not decoding, is what a 2-core CPU pays most for."""
    import torch

    from agenttrainer.acting.generators import LocalGenerator
    from agenttrainer.acting.inference import AgentInference

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    engine = AgentInference.from_pretrained(args.model or MODEL, max_new_tokens=args.max_new_tokens)
    generator = LocalGenerator(engine.model, engine.tokenizer, logprobs=False)
    outputs = []
    bar = tqdm(total=len(tasks) * 2 * (1 + args.samples), desc="generating", unit="output", file=sys.stderr)
    for task in tasks:
        chat = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task["description"]}]
        ids = engine.encode(chat, tool_specs(task["metadata"]["functions"]))[0].tolist()
        opener = NAMED.format(rng.choice(task["metadata"]["functions"])["name"])
        rows = [("free", "", ids), ("named", opener, ids + engine.tokenizer.encode(opener, add_special_tokens=False))]
        for decoding, temperature, batch in [("greedy", 0.0, rows), ("sampled", 1.0, rows * args.samples)]:
            if not batch:
                continue
            samples = generator.generate([p for _, _, p in batch], max_new_tokens=args.max_new_tokens,
                                         temperature=temperature)  # fmt: skip
            for (mode, prefill, _), sample in zip(batch, samples):
                text = engine.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
                outputs.append({"task_id": task["metadata"]["bfcl_id"], "kind": f"{decoding}/{mode}",
                                "text": prefill + text, "tokens": len(sample.token_ids)})  # fmt: skip
            bar.update(len(batch))
    bar.close()
    return outputs


def generate_endpoint(tasks: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Greedy and sampled answers of an OpenAI-compatible endpoint (its native tool calls)."""
    from agenttrainer.acting.chat import chat_template_tools
    from knowlyrcore.endpoint import ChatEndpoint

    endpoints = {
        decoding: ChatEndpoint(
            args.endpoint, args.model, temperature=temperature, max_tokens=args.max_new_tokens, timeout=120
        )
        for decoding, temperature in [("greedy", 0.0), ("sampled", 1.0)]
    }
    outputs = []
    for task in tqdm(tasks, desc="asking", unit="task", file=sys.stderr):
        chat = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task["description"]}]
        tools = chat_template_tools(tool_specs(task["metadata"]["functions"]))
        for decoding in ["greedy"] + ["sampled"] * args.samples:
            message = endpoints[decoding].complete(chat, tools)
            outputs.append({"task_id": task["metadata"]["bfcl_id"], "kind": decoding, "message": message})
    return outputs


# -- perturbations ---------------------------------------------------------------------------------


def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return value + " elsewhere"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return {"unknown_key": 1}


def _made_up_call(function: dict[str, Any]) -> dict[str, Any]:
    filler = {"string": "x", "integer": 1, "float": 1.0, "boolean": True, "array": [], "tuple": [], "dict": {}}
    props = function["parameters"].get("properties", {})
    params = {p: filler.get(props.get(p, {}).get("type"), "x") for p in function["parameters"].get("required", [])}
    return {"tool": function["name"], "params": params}


def perturbations(task: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(kind, calls) variants of the expert answer; each is judged by both checkers."""
    expert = [{"tool": a["tool"], "params": dict(a["params"])} for a in task["metadata"]["solution"][:-1]]
    if not expert:
        return [("expert", []), ("extra_call", [_made_up_call(task["metadata"]["functions"][0])])]
    variants = [("expert", expert), ("wrong_name", [{**expert[0], "tool": expert[0]["tool"] + "_v2"}, *expert[1:]]),
                ("extra_param", [{**expert[0], "params": {**expert[0]["params"], "unknown_param": 1}}, *expert[1:]]),
                ("extra_call", [*expert, expert[0]])]  # fmt: skip
    if expert[0]["params"]:
        first = next(iter(expert[0]["params"]))
        dropped = {k: v for k, v in expert[0]["params"].items() if k != first}
        changed = {**expert[0]["params"], first: _wrong(expert[0]["params"][first])}
        variants += [("drop_param", [{**expert[0], "params": dropped}, *expert[1:]]),
                     ("wrong_value", [{**expert[0], "params": changed}, *expert[1:]])]  # fmt: skip
    if len(expert) > 1:
        variants.append(("swap_order", expert[::-1]))
    return variants


# -- scoring ---------------------------------------------------------------------------------------


def replay_success(task: dict[str, Any], calls: list[dict[str, Any]]) -> bool:
    """The ``success`` of a ``knowlyr/bfcl`` episode that makes ``calls`` one per step, then responds."""
    env = BFCLEnv()
    env.reset(task=copy.deepcopy(task))
    for call in calls:
        env.step(dict(call))
    return env.step({"tool": "respond", "params": {"message": "done"}}).info["success"]


def summarise(rows: list[dict[str, Any]], group: str) -> dict[str, Any]:
    agree = sum(r["agree"] for r in rows)
    low, high = wilson_interval(agree, len(rows)) if rows else (0.0, 0.0)
    counts: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        counts[r[group]][f"ours={int(r['ours'])},bfcl={int(r['bfcl'])}"] += 1
    return {"n": len(rows), "agree": agree, "agreement": round(agree / len(rows), 4) if rows else None,
            "ci95": [round(low, 4), round(high, 4)], group: {k: dict(v) for k, v in sorted(counts.items())}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-category", type=int, default=8, help="test tasks drawn per category")
    parser.add_argument("--samples", type=int, default=6, help="sampled answers per task and mode (plus greedy)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model", default=None, help=f"local checkpoint or alias (default {MODEL}); with --endpoint its model name"
    )
    parser.add_argument("--endpoint", default=None, help="an OpenAI-compatible base URL instead of the local model")
    parser.add_argument("--outputs", type=Path, default=None, help="score this JSONL of outputs instead of generating")
    parser.add_argument("--save-outputs", type=Path, default=None, help="write the generated outputs here (JSONL)")
    parser.add_argument("--replay", type=int, default=100, help="outputs also replayed through knowlyr/bfcl")
    parser.add_argument("--report", type=Path, default=Path("runs/bfcl/checker_agreement.json"))
    args = parser.parse_args()
    if args.endpoint and not args.model:
        parser.error("--endpoint needs --model")

    checker = bfcl_checker()
    all_tasks = {t["metadata"]["bfcl_id"]: t for t in get_suite("bfcl").generate("test", 10**6, 0)}
    started = time.perf_counter()
    if args.outputs is not None:
        outputs = list(read_jsonl(args.outputs))
        source = str(args.outputs)
    else:
        tasks = sample_tasks(args.per_category, args.seed)
        outputs = generate_endpoint(tasks, args) if args.endpoint else generate_local(tasks, args)
        source = args.endpoint or args.model or MODEL
        if args.save_outputs:
            write_jsonl(args.save_outputs, outputs)
    generation_s = time.perf_counter() - started

    model_rows = []
    for i, output in enumerate(tqdm(outputs, desc="judging", unit="output", file=sys.stderr)):
        task = all_tasks.get(output.get("task_id"))
        if task is None:
            sys.exit(f"error: {source}: record {i + 1}: task_id {output.get('task_id')!r} is not a bfcl test task")
        tools = tool_specs(task["metadata"]["functions"])
        calls, decode_error = reply_calls(output, tools)
        verdict = check(calls, task["metadata"]["possible_answer"], task["metadata"]["functions"])
        theirs, error = bfcl_verdict(task, calls, decode_error, checker)
        model_rows.append({"id": output["task_id"], "kind": output.get("kind", ""), "category": task["metadata"]["category"],
                           "calls": len(calls), "decode_error": decode_error, "ours": verdict.success,
                           "bfcl": theirs, "agree": verdict.success == theirs, "our_reason": verdict.reason,
                           "bfcl_error": error, "call_list": calls, "text": output.get("text", output.get("message"))})  # fmt: skip

    rng = random.Random(args.seed)
    replayed = rng.sample(range(len(model_rows)), min(args.replay, len(model_rows)))
    replay_mismatch = [model_rows[i]["id"] for i in replayed
                       if replay_success(all_tasks[model_rows[i]["id"]], model_rows[i]["call_list"]) != model_rows[i]["ours"]]  # fmt: skip

    perturbed = []
    for task in all_tasks.values():
        for kind, calls in perturbations(task):
            verdict = check(calls, task["metadata"]["possible_answer"], task["metadata"]["functions"])
            theirs, error = bfcl_verdict(task, calls, None, checker)
            perturbed.append({"id": task["metadata"]["bfcl_id"], "kind": kind, "category": task["metadata"]["category"],
                              "ours": verdict.success, "bfcl": theirs, "agree": verdict.success == theirs,
                              "our_reason": verdict.reason, "bfcl_error": error, "call_list": calls})  # fmt: skip

    def listed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        keys = (
            "id",
            "kind",
            "category",
            "ours",
            "bfcl",
            "our_reason",
            "bfcl_error",
            "decode_error",
            "call_list",
            "text",
        )
        return [{k: r[k] for k in keys if k in r} for r in rows if not r["agree"]]

    with_calls = [r for r in model_rows if r["calls"]]
    result = {
        "bench": "bfcl_checker_agreement",
        "source": source,
        "outputs": len(model_rows),
        "outputs_with_calls": len(with_calls),
        "generation_s": round(generation_s, 1),
        "model_outputs": {**summarise(model_rows, "category"), "by_kind": summarise(model_rows, "kind")["kind"]},
        "model_outputs_with_calls": {k: v for k, v in summarise(with_calls, "category").items() if k != "category"},
        "ours_success": sum(r["ours"] for r in model_rows),
        "bfcl_success": sum(r["bfcl"] for r in model_rows),
        "env_replay": {"n": len(replayed), "mismatches": replay_mismatch},
        "perturbations": {**summarise(perturbed, "kind")},
        "disagreements": {"model_outputs": len(listed(model_rows)), "perturbations": len(listed(perturbed))},
        "seconds": round(time.perf_counter() - started, 1),
        "report": str(args.report),
    }
    report = {**result, "model_disagreements": listed(model_rows), "perturbation_disagreements": listed(perturbed),
              "settings": vars(args) | {"report": str(args.report), "outputs": str(args.outputs),
                                        "save_outputs": str(args.save_outputs)}}  # fmt: skip
    write_bytes_atomic(args.report, json.dumps(report, indent=1, default=str).encode())
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
