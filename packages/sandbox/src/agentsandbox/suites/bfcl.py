"""The ``bfcl`` task suite: BFCL's single-turn entries as tasks of ``knowlyr/bfcl``.

Splits (BFCL's own line between curated and user-contributed functions):

* ``train``: the live categories (``live_simple``, ``live_multiple``, ``live_parallel``,
  ``live_parallel_multiple``, ``live_irrelevance``: functions contributed by users), less every
  entry that documents a function (same name and description) found in any ``test`` entry;
* ``test``: the non-live categories (``simple_python``, ``multiple``, ``parallel``,
  ``parallel_multiple``, ``irrelevance``: expert-curated functions).

No function is shared between the two, so ``test`` is unseen in the strongest sense and there
is no ``test-unseen`` split. Left out as well (``excluded()`` lists each with its reason): entries
documenting a function named ``finish``, ``submit`` or ``respond`` (the tool a reply in plain
text becomes), and entries whose ground truth does not pass BFCL's own rules (a ground-truth
parameter the function does not document).

Each task's description is the question (a single user message as it is; a conversation with
system or assistant messages as ``Role: text`` paragraphs). Its metadata holds the ``category``,
the BFCL ``bfcl_id``, the ``functions``, the ``possible_answer`` (``[]`` for irrelevance) and the
expert's ``solution``: one call per ground-truth call with the first allowed value of each
parameter (parameters whose allowed values include ``""`` are optional and left out unless the
function requires them), then
``respond``. The suite checks that every solution passes the checker.

``generate(split, n, seed)`` draws ``n`` tasks without replacement, the same ones for the same
arguments, kept in category order; ``n`` at least the split's size gives the whole split (the
hub's ``tasks`` command prints how many). bfcl-eval must be installed (docs/bfcl.md).

Examples:
    >>> task = BFCL.generate("test", 1, seed=0)[0]
    >>> sorted(task["metadata"])
    ['bfcl_id', 'category', 'functions', 'possible_answer', 'solution', 'split', 'suite']
"""

from __future__ import annotations

import copy
import functools
import random
from collections.abc import Callable
from typing import Any

from agentsandbox.bfcl.checker import check
from agentsandbox.bfcl.data import LIVE_CATEGORIES, NON_LIVE_CATEGORIES, load_answers, load_entries
from agentsandbox.bfcl.env import SYSTEM_PROMPT
from agentsandbox.suites import SuiteError, TaskSuite
from knowlyrcore.tool_parsing import CLOSING_TOOLS

SPLIT_CATEGORIES = {"train": LIVE_CATEGORIES, "test": NON_LIVE_CATEGORIES}


def render_question(messages: list[dict[str, str]]) -> str:
    """The task description of a BFCL question (one turn's messages)."""
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages)


def _first(allowed: list[Any]) -> Any:
    """The first allowed value that is not the optional marker ``""`` (``""`` itself when a
    required parameter allows nothing else: BFCL accepts the empty string there)."""
    return next((a for a in allowed if a != ""), "" if "" in allowed else None)


def _expert_dict(allowed: dict[str, list[Any]]) -> dict[str, Any]:
    return {key: _first(options) for key, options in allowed.items() if "" not in options}


def _expert_value(allowed: list[Any], schema: dict[str, Any]) -> Any:
    """A concrete value from allowed values: a dict's allowed values are per key, one level deep."""
    value = _first(allowed)
    if schema.get("type") == "dict" and isinstance(value, dict):
        return _expert_dict(value)
    if (schema.get("items") or {}).get("type") == "dict" and isinstance(value, list):
        return [_expert_dict(d) if isinstance(d, dict) else d for d in value]
    return value


def solution(ground_truth: list[dict[str, dict[str, list[Any]]]], functions: list[dict[str, Any]]) -> list[dict]:
    """The expert's actions: each ground-truth call with its first allowed values, then ``respond``.

    A required parameter is given even when ``""`` is among its allowed values (BFCL's ground truth
    marks a few required parameters optional; its checker still wants them).
    """
    docs = {f["name"]: f["parameters"] for f in functions}
    actions = []
    for call in ground_truth:
        ((name, allowed),) = call.items()
        properties, required = docs[name].get("properties", {}), docs[name].get("required", [])
        params = {
            key: _expert_value(options, properties.get(key, {}))
            for key, options in allowed.items()
            if "" not in options or key in required
        }
        actions.append({"tool": name, "params": params})
    message = "Done." if ground_truth else "None of the functions fits this request."
    return [*actions, {"tool": "respond", "params": {"message": message}}]


def _function_keys(entry: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["name"], f.get("description", "")) for f in entry["function"]}


@functools.lru_cache(maxsize=1)
def _pools() -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """Every usable task of each split, and ``{bfcl id: why it was left out}``."""
    test_functions = {key for c in NON_LIVE_CATEGORIES for e in load_entries(c) for key in _function_keys(e)}
    pools: dict[str, list[dict[str, Any]]] = {}
    excluded: dict[str, str] = {}
    for split, categories in SPLIT_CATEGORIES.items():
        pools[split] = []
        for category in categories:
            answers = load_answers(category)
            for entry in load_entries(category):
                truth = answers.get(entry["id"], [])
                names = {f["name"] for f in entry["function"]}
                if clash := sorted(names & CLOSING_TOOLS.keys()):
                    excluded[entry["id"]] = f"documents a function named {clash[0]!r}, the tool a text reply becomes"
                    continue
                if split == "train" and (shared := sorted(_function_keys(entry) & test_functions)):
                    excluded[entry["id"]] = f"shares function {shared[0][0]!r} with the test split"
                    continue
                expert = solution(truth, entry["function"])
                verdict = check(expert[:-1], truth, entry["function"])
                if not verdict.success:
                    excluded[entry["id"]] = f"its ground truth breaks BFCL's rules: {verdict.reason}"
                    continue
                pools[split].append(
                    {
                        "id": f"bfcl-{entry['id']}",
                        "description": render_question(entry["question"][0]),
                        "domain": "bfcl",
                        "max_steps": len(expert) + 1,
                        "metadata": {
                            "suite": "bfcl",
                            "split": split,
                            "category": category,
                            "bfcl_id": entry["id"],
                            "functions": entry["function"],
                            "possible_answer": truth,
                            "solution": expert,
                        },
                    }
                )
    return pools, excluded


def excluded() -> dict[str, str]:
    """``{BFCL entry id: why the suite leaves it out}``."""
    return dict(_pools()[1])


def draw(pool: list[dict[str, Any]], n: int, key: str) -> list[dict[str, Any]]:
    """``n`` tasks of ``pool`` drawn without replacement by ``random.Random(key)``, in pool order
    (the whole pool when ``n`` is at least its size); copies, as callers may edit their tasks and
    the cached pool must not change."""
    chosen = pool if n >= len(pool) else [pool[i] for i in sorted(random.Random(key).sample(range(len(pool)), n))]
    return copy.deepcopy(chosen)


def pooled_suite(
    pools: Callable[[], tuple[dict[str, list[dict[str, Any]]], dict[str, str]]],
    *,
    name: str,
    splits: tuple[str, ...],
    split_rule: str,
    **fields: Any,
) -> TaskSuite:
    """A suite whose ``generate(split, n, seed)`` draws ``n`` tasks of the split's pool (all of them
    when ``n`` is at least its size), the same ones for the same arguments.

    Args:
        pools: Every usable task of each split and ``{bfcl id: why it was left out}``, cached.
        name: The suite's name, also the first part of each draw's random key.
        splits: The splits ``pools`` holds, checked before it is called (it loads bfcl-eval's data).
        split_rule: How the splits are told apart, said when an unknown split is asked for.
        **fields: The other ``TaskSuite`` fields (``env_id``, ``description``, ...).
    """

    def generate(split: str, n: int, seed: int) -> list[dict[str, Any]]:
        if split not in splits:
            raise SuiteError(f"the {name} suite has splits {' and '.join(splits)} ({split_rule}), not {split!r}")
        return draw(pools()[0][split], n, f"{name}/{split}/{seed}")

    return TaskSuite(name=name, generator=generate, **fields)


BFCL = pooled_suite(
    _pools,
    name="bfcl",
    splits=tuple(SPLIT_CATEGORIES),
    split_rule="no function of test is in train",
    env_id="knowlyr/bfcl",
    description="BFCL single-turn function calling (bfcl-eval's data), judged by BFCL's AST rules",
    max_steps=10,
    system_prompt=SYSTEM_PROMPT,
)
