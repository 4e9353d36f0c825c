"""BFCL's functions as a tool library for retrieval, and its questions as (query, gold tool) pairs.

``bfcl_library()`` holds every function documented in the single-turn categories the ``bfcl``
suite reads (live and non-live, irrelevance included: their functions are real distractors),
one tool per distinct (name, description), in category then file order (the curated non-live
categories first). bfcl-eval 2026.3.23 documents 8,532 functions there: 2,573 distinct, under
1,702 names.

Name rule: a library needs unique names, and 328 names are shared by distinct functions (four
``math.gcd`` with four descriptions, say). The first function of a name keeps it; the k-th
distinct one met later is named ``<name>#<k>`` (``math.gcd#2``). All stay retrievable, and a
question's gold is exactly the function its entry documents. The same name and description
with other parameters is one function: its first document is kept.

``bfcl_query_pairs(split)`` pairs each question (``render_question``) with each function its ground
truth calls, by library name; irrelevance entries (no call) are left out, and so is a pair
seen before (``multiple`` repeats questions of ``simple_python``). The splits are the suite's,
exclusions included: ``train`` the live categories (1,353 pairs over 284 functions), ``test``
the non-live ones (1,196 pairs over 715 functions). No train entry documents a test function,
so test pairs are about functions no train pair names. Without bfcl-eval every entry point
fails with one line naming the install step (``BFCLError``).
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

from agentsandbox.bfcl.data import CATEGORIES, BFCLError, load_answers, load_entries
from agentsandbox.bfcl.env import tool_specs
from agentsandbox.suites.bfcl import SPLIT_CATEGORIES, excluded, render_question
from knowlyrcore.domain import ToolSpec


def _key(function: dict[str, Any]) -> tuple[str, str]:
    return function["name"], function.get("description", "")


@functools.cache
def _library_names() -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    """``{(name, description): (library name, first document)}``, in library order."""
    found: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    seen = Counter[str]()
    for category in CATEGORIES:
        for entry in load_entries(category):
            for function in entry["function"]:
                key = _key(function)
                if key not in found:
                    seen[key[0]] += 1
                    found[key] = (key[0] if seen[key[0]] == 1 else f"{key[0]}#{seen[key[0]]}", function)
    return found


def bfcl_library() -> list[ToolSpec]:
    """Every distinct BFCL single-turn function as a ``ToolSpec`` (module docstring: names, order)."""
    return tool_specs([{**function, "name": name} for name, function in _library_names().values()])


def bfcl_query_pairs(split: str) -> list[tuple[str, str]]:
    """``(question, library name of a function its ground truth calls)`` of ``split``, in the
    suite's category and file order; each pair once."""
    if split not in SPLIT_CATEGORIES:
        raise BFCLError(f"BFCL's query pairs have splits {' and '.join(SPLIT_CATEGORIES)}, not {split!r}")
    names, left_out = _library_names(), excluded()
    pairs: dict[tuple[str, str], None] = {}
    for category in SPLIT_CATEGORIES[split]:
        answers = load_answers(category)
        for entry in load_entries(category):
            if entry["id"] in left_out:
                continue
            documents = {f["name"]: f for f in entry["function"]}
            query = render_question(entry["question"][0])
            for call in answers.get(entry["id"], []):
                (called,) = call
                pairs[query, names[_key(documents[called])][0]] = None
    return list(pairs)
