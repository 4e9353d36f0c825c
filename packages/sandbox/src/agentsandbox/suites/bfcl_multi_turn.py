"""The ``bfcl-multi-turn`` task suite: BFCL's multi-turn entries as tasks of ``knowlyr/bfcl-multi-turn``.

Categories: ``multi_turn_base``, ``multi_turn_miss_func`` (functions withheld until a later
turn), ``multi_turn_miss_param`` (a request lacking a parameter the next turn gives) and
``multi_turn_long_context`` (the backends load BFCL's long-context extras); they need nothing
beyond the eight backend classes.

Splits by scenario: the four categories are variants of the same 200 scenarios (entry ``N`` of
each shares its initial state and most of its requests), so an entry's split is drawn from its
scenario number ``N`` alone: ``test`` when the first 8 bytes of ``sha256("bfcl-multi-turn/N")``,
read as a big-endian integer, are divisible by 3 (about a third), ``train`` otherwise. No scenario is in both splits; there is no ``test-unseen``.

Left out, each with its reason (``excluded()``): entries whose ground truth the environment
would refuse, so no policy could match it: a call passing a value of another type than the
function documents (``close_ticket(ticket_id='ticket_001')`` where an integer is documented), a
call of a function before the turn that offers it.

Each task's description is the first user turn. Its metadata holds the ``category``, the BFCL
``bfcl_id``, the environment's inputs (``turns``: each user turn's text, BFCL's "I have updated
some more functions ..." for the turn that brings withheld functions; ``involved_classes``,
``initial_config``, ``missed_function``, ``long_context``, ``ground_truth``: each turn's call
strings as BFCL writes them) and the expert's ``solution``: each turn's ground-truth calls (positional
arguments named by the backend's signature), then ``respond``. ``max_steps`` is the solution's
length plus 5 a turn.

``generate(split, n, seed)`` draws ``n`` tasks without replacement, the same for the same
arguments, in category order; ``n`` at least the split's size gives it all. Needs bfcl-eval and
mpmath (MathAPI's) — docs/bfcl.md.

Examples:
    >>> task = BFCL_MULTI_TURN.generate("test", 1, seed=0)[0]
    >>> sorted(task["metadata"])  # doctest: +NORMALIZE_WHITESPACE
    ['bfcl_id', 'category', 'ground_truth', 'initial_config', 'involved_classes', 'long_context',
     'missed_function', 'solution', 'split', 'suite', 'turns']
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from agentsandbox.bfcl.env import tool_specs
from agentsandbox.bfcl.multi_turn import (
    ADDED_FUNCTIONS_PROMPT,
    LONG_CONTEXT_CATEGORIES,
    MULTI_TURN_CATEGORIES,
    bind_call,
    function_owners,
    load_multi_turn,
    offered_functions,
    parse_call,
    refusal,
)
from agentsandbox.bfcl.multi_turn_env import SYSTEM_PROMPT
from agentsandbox.suites.bfcl import pooled_suite, render_question

SPLITS = ("train", "test")
STEPS_PER_TURN = 5  # room beyond the expert's calls in each turn (BFCL allows a model 20 steps a turn)


def scenario(bfcl_id: str) -> int:
    """The scenario number of a multi-turn entry id (``multi_turn_miss_func_17`` -> 17)."""
    return int(bfcl_id.rsplit("_", 1)[1])


def split_of(bfcl_id: str) -> str:
    """``test`` for about a third of the scenarios, ``train`` for the others; every variant of a scenario alike."""
    digest = hashlib.sha256(f"bfcl-multi-turn/{scenario(bfcl_id)}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") % 3 == 0 else "train"


def _solution(entry: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The expert's actions for ``entry``, or why the environment would refuse its ground truth."""
    classes, missed = entry["involved_classes"], entry["missed_function"]
    owners, actions = function_owners(classes), []
    for turn, calls in enumerate(entry["ground_truth"]):
        offered = {spec.name: spec for spec in tool_specs(offered_functions(classes, missed, turn))}
        for text in calls:
            name, args, kwargs = parse_call(text)
            params = bind_call(owners[name], name, args, kwargs)
            if name not in offered:
                return [], f"its ground truth calls {name} in turn {turn}, before the turn that offers it"
            if problem := refusal(name, params, offered, owners):
                return [], f"its ground truth {text} would be refused: {problem}"
            actions.append({"tool": name, "params": params})
        message = "Done." if calls else "I cannot do that with what I have; please tell me more."
        actions.append({"tool": "respond", "params": {"message": message}})
    return actions, None


def _turn_text(entry: dict[str, Any], turn: int) -> str:
    messages = entry["question"][turn]
    return render_question(messages) if messages else ADDED_FUNCTIONS_PROMPT


@functools.lru_cache(maxsize=1)
def _pools() -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """Every usable task of each split, and ``{bfcl id: why it was left out}``."""
    pools: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS}
    excluded: dict[str, str] = {}
    for category in MULTI_TURN_CATEGORIES:
        for entry in load_multi_turn(category):
            solution, problem = _solution(entry)
            if problem:
                excluded[entry["id"]] = problem
                continue
            split = split_of(entry["id"])
            turns = [_turn_text(entry, t) for t in range(len(entry["question"]))]
            pools[split].append(
                {
                    "id": f"bfcl-{entry['id']}",
                    "description": turns[0],
                    "domain": "bfcl-multi-turn",
                    "max_steps": len(solution) + STEPS_PER_TURN * len(turns),
                    "metadata": {
                        "suite": "bfcl-multi-turn",
                        "split": split,
                        "category": category,
                        "bfcl_id": entry["id"],
                        "turns": turns,
                        "involved_classes": entry["involved_classes"],
                        "initial_config": entry["initial_config"],
                        "missed_function": entry["missed_function"],
                        "long_context": category in LONG_CONTEXT_CATEGORIES,
                        "ground_truth": entry["ground_truth"],
                        "solution": solution,
                    },
                }
            )
    return pools, excluded


def excluded() -> dict[str, str]:
    """``{BFCL entry id: why the suite leaves it out}``."""
    return dict(_pools()[1])


BFCL_MULTI_TURN = pooled_suite(
    _pools,
    name="bfcl-multi-turn",
    splits=SPLITS,
    split_rule="split by scenario",
    env_id="knowlyr/bfcl-multi-turn",
    description="BFCL multi-turn function calling on BFCL's own stateful backends, judged turn by turn as BFCL does",
    max_steps=60,
    system_prompt=SYSTEM_PROMPT,
)
