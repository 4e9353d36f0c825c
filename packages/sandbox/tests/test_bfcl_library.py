"""BFCL's functions as a retrieval library (``agentsandbox.bfcl.library``): one tool per distinct
(name, description), the numbering of distinct functions sharing a name, query pairs following
the bfcl suite's split and exclusions, determinism, and one-line errors.

Expected values are computed here from ``load_entries`` / ``load_answers`` and the suite's tasks.
The data tests need bfcl-eval (``needs_bfcl``); the error tests need nothing.
"""

import functools
import hashlib
import json
import os

import pytest
from bfcl_shared import needs_bfcl, run_python

from agentsandbox.bfcl.data import (
    CATEGORIES,
    LIVE_CATEGORIES,
    NON_LIVE_CATEGORIES,
    BFCLError,
    load_answers,
    load_entries,
)
from agentsandbox.bfcl.env import json_schema
from agentsandbox.bfcl.library import bfcl_library, bfcl_query_pairs
from agentsandbox.suites.bfcl import BFCL, excluded, render_question

SPLITS = {"train": LIVE_CATEGORIES, "test": NON_LIVE_CATEGORIES}


@functools.cache
def library():
    needs_bfcl()
    return {tool.name: tool for tool in bfcl_library()}


@functools.cache
def pairs(split):
    needs_bfcl()
    return bfcl_query_pairs(split)


def key(function):
    return function["name"], function.get("description", "")


def documented():
    """Every function document of the suite's categories, in category, file and entry order."""
    return [f for category in CATEGORIES for entry in load_entries(category) for f in entry["function"]]


def function_of(tool_name):
    """The (name, description) of a library tool: its name without the ``#k`` suffix."""
    return tool_name.split("#")[0], library()[tool_name].description


def digest(value):
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def test_library_holds_each_distinct_function_once_in_order_of_appearance():
    tools = library()
    first_seen = list(dict.fromkeys(key(f) for f in documented()))
    assert not any("#" in name for name, _ in first_seen)  # so a suffixed name cannot clash with a real one
    assert [function_of(name) for name in tools] == first_seen
    # a few thousand functions: fewer than documented (many are documented again), more than names
    assert len({name for name, _ in first_seen}) < len(tools) < len(documented())


def test_a_function_documented_again_with_other_parameters_keeps_its_first_document():
    first = {}
    for function in documented():
        first.setdefault(key(function), function)
    assert any(f["parameters"] != first[key(f)]["parameters"] for f in documented())  # the rule is needed
    for name, tool in library().items():
        assert tool.parameters == json_schema(first[function_of(name)]["parameters"]), name


def test_distinct_functions_sharing_a_name_are_numbered_in_order_of_appearance():
    descriptions = {}
    for name, description in dict.fromkeys(key(f) for f in documented()):
        descriptions.setdefault(name, []).append(description)
    assert any(len(d) > 1 for d in descriptions.values())
    tools = library()
    for name, described in descriptions.items():
        names = [name] + [f"{name}#{k}" for k in range(2, len(described) + 1)]
        assert [tools[n].description for n in names] == described, name


def test_pairs_are_each_question_with_each_function_its_ground_truth_calls_once():
    left_out = excluded()
    for split, categories in SPLITS.items():
        expected, calls = {}, 0
        for category in categories:
            answers = load_answers(category)
            for entry in load_entries(category):
                if entry["id"] in left_out:
                    continue
                described = dict(key(f) for f in entry["function"])
                for call in answers.get(entry["id"], []):
                    ((name, _),) = call.items()
                    expected[render_question(entry["question"][0]), name, described[name]] = None
                    calls += 1
        got = pairs(split)
        assert all(gold in library() for _, gold in got)
        assert [(query, *function_of(gold)) for query, gold in got] == list(expected)
        assert len(set(got)) == len(got) < calls  # parallel calls of one function and repeated questions


def test_pairs_follow_the_suites_split_and_exclusions():
    """The questions are those of the suite's tasks that call something (irrelevance is left out)."""
    for split, categories in SPLITS.items():
        tasks = BFCL.generate(split, 10**6, seed=0)
        assert {t["metadata"]["category"] for t in tasks} == set(categories)
        answered = {t["description"] for t in tasks if t["metadata"]["possible_answer"]}
        assert {query for query, _ in pairs(split)} == answered


def test_no_test_function_is_gold_in_any_train_pair():
    train_gold = {gold for _, gold in pairs("train")}
    assert not train_gold & {gold for _, gold in pairs("test")}
    # stronger: no train gold is any function a test entry documents, called or not
    test_functions = {key(f) for c in NON_LIVE_CATEGORIES for e in load_entries(c) for f in e["function"]}
    assert not {function_of(gold) for gold in train_gold} & test_functions


def test_library_and_pairs_are_the_same_in_another_process():
    """Another hash seed too: nothing depends on the iteration order of a set."""
    assert [t.name for t in bfcl_library()] == list(library()) and bfcl_query_pairs("test") == pairs("test")
    expected = digest([list(library()), pairs("train"), pairs("test")])
    lines = run_python(
        """
        import hashlib, json
        from agentsandbox.bfcl.library import bfcl_library, bfcl_query_pairs
        value = [[t.name for t in bfcl_library()], bfcl_query_pairs("train"), bfcl_query_pairs("test")]
        print(hashlib.sha256(json.dumps(value).encode()).hexdigest())
    """,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        timeout=300,
    )
    assert lines == [expected]


def test_an_unknown_split_is_a_one_line_error():
    with pytest.raises(BFCLError, match="^BFCL's query pairs have splits train and test, not 'test-unseen'$"):
        bfcl_query_pairs("test-unseen")


def test_without_bfcl_eval_every_entry_point_says_how_to_install():
    lines = run_python(
        """
        import sys
        sys.modules["bfcl_eval"] = None  # as if bfcl-eval were not installed
        from agentsandbox.bfcl.library import bfcl_library, bfcl_query_pairs
        for entry_point in (bfcl_library, lambda: bfcl_query_pairs("train")):
            try:
                entry_point()
            except Exception as exc:
                print(type(exc).__name__, getattr(exc, "exit_code", None), repr(str(exc)))
    """,
        timeout=300,
    )
    expected = "BFCL tasks need the bfcl-eval package: pip install --no-deps bfcl-eval==2026.3.23 (docs/bfcl.md)"
    assert lines == [f"BFCLError 2 {expected!r}"] * 2
