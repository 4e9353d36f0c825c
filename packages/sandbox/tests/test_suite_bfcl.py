"""The bfcl suite and ``knowlyr/bfcl``: the env protocol, the expert solving every task of every
category, splits sharing no function, sampling, rewards, and one-line errors without bfcl-eval or
with malformed BFCL files.

The data tests need bfcl-eval (``needs_bfcl``); the error tests need nothing.
"""

import functools
import json

import pytest
from bfcl_shared import RESPOND, BFCLEnvConformance, hub_tasks_without_bfcl_eval, needs_bfcl, run_python

from agentsandbox.bfcl import BFCLEnv
from agentsandbox.bfcl.data import (
    CATEGORIES,
    INSTALL_STEP,
    IRRELEVANCE_CATEGORIES,
    LIVE_CATEGORIES,
    NON_LIVE_CATEGORIES,
    load_entries,
)
from agentsandbox.suites import SuiteError
from agentsandbox.suites import bfcl as bfcl_suite
from agentsandbox.suites.bfcl import BFCL
from knowlyrcore.domain import tool_schemas


@functools.cache
def split_tasks(split):
    needs_bfcl()
    return BFCL.generate(split, 10**6, 0)


def task_of(bfcl_id):
    split = "train" if bfcl_id.startswith("live_") else "test"
    return next(t for t in split_tasks(split) if t["metadata"]["bfcl_id"] == bfcl_id)


def play(task, actions, reward="outcome"):
    env = BFCLEnv(reward=reward)
    steps = [env.reset(task=task)]
    for action in actions:
        steps.append(env.step(action))
        if steps[-1].done:
            break
    env.close()
    return steps


class TestBFCLEnv(BFCLEnvConformance):
    @property
    def task(self):
        return task_of("parallel_0")

    def make_env(self):
        needs_bfcl()
        return BFCLEnv()


def test_expert_solves_every_task_of_every_category():
    tasks = split_tasks("train") + split_tasks("test")
    assert {t["metadata"]["category"] for t in tasks} == set(CATEGORIES)
    for reward in ("outcome", "partial"):
        env = BFCLEnv(reward=reward)
        for task in tasks:
            task = json.loads(json.dumps(task))  # tasks survive a JSONL round trip
            expert = BFCL.expert()
            expert.reset(task)
            ts, total = env.reset(task=task), 0.0
            for _ in range(task["max_steps"]):
                ts = env.step(expert(ts.observation))
                total += ts.reward
                assert not ts.info.get("error"), (reward, task["id"], ts.observation)
                if ts.done:
                    break
            assert ts.info["success"] is True and total == pytest.approx(1.0), (reward, task["id"], ts.info)


def test_train_and_test_share_no_function_and_cover_their_categories():
    train, test = split_tasks("train"), split_tasks("test")
    assert {t["metadata"]["category"] for t in train} == set(LIVE_CATEGORIES)
    assert {t["metadata"]["category"] for t in test} == set(NON_LIVE_CATEGORIES)

    def functions(tasks):
        return {(f["name"], f["description"]) for t in tasks for f in t["metadata"]["functions"]}

    assert not functions(train) & functions(test)
    # every entry is a task or is left out with a reason
    excluded = bfcl_suite.excluded()
    for split, categories in (("train", LIVE_CATEGORIES), ("test", NON_LIVE_CATEGORIES)):
        ids = {e["id"] for c in categories for e in load_entries(c)}
        tasks = {t["metadata"]["bfcl_id"] for t in split_tasks(split)}
        assert tasks | (ids & excluded.keys()) == ids and not tasks & excluded.keys()
    assert "documents a function named 'finish'" in excluded["live_multiple_183-78-0"]
    assert "breaks BFCL's rules" in excluded["live_multiple_862-181-3"]
    assert len(excluded) < 0.01 * (len(train) + len(test))


def test_generate_is_deterministic_samples_without_replacement_and_takes_all_past_the_size():
    needs_bfcl()
    first = BFCL.generate("test", 50, seed=1)
    assert first == BFCL.generate("test", 50, seed=1)
    assert len({t["id"] for t in first}) == 50
    assert {t["id"] for t in first} != {t["id"] for t in BFCL.generate("test", 50, seed=2)}
    order = [t["id"] for t in split_tasks("test")]
    assert [t["id"] for t in first] == sorted((t["id"] for t in first), key=order.index)  # category order kept
    assert BFCL.generate("test", len(order) + 500, seed=3) == split_tasks("test")
    first[0]["metadata"]["functions"].clear()  # the caller's copy; the suite's tasks stay whole
    assert BFCL.generate("test", 50, seed=1)[0]["metadata"]["functions"]
    with pytest.raises(SuiteError, match="splits train and test"):
        BFCL.generate("test-unseen", 5)


def test_answering_at_once_succeeds_exactly_on_irrelevance():
    for task in split_tasks("test") + split_tasks("train")[:300] + split_tasks("train")[-300:]:
        for reward in ("outcome", "partial"):
            ts = play(task, [RESPOND], reward)[-1]
            irrelevant = task["metadata"]["category"] in IRRELEVANCE_CATEGORIES
            assert (ts.done, ts.info["success"], ts.reward) == (True, irrelevant, float(irrelevant)), task["id"]


def test_partial_reward_is_paid_as_it_accrues():
    """simple_python_0: calculate_triangle_area(base=10, height=5[, unit="units"]).

    A call with the wrong height matches base and the optional unit: name 1, parameters 2/3,
    potential (1 + 2/3) / 4 = 5/12, and nothing more at respond. Adding the right call makes two
    calls for one expected call: the best pair (the right call, parameters 1) over 2 calls gives
    name 1/2 and parameters 1/2, potential 1/4, so that step pays 1/4 - 5/12 = -1/6."""
    task = task_of("simple_python_0")
    wrong = {"tool": "calculate_triangle_area", "params": {"base": 10, "height": 6}}
    right = {"tool": "calculate_triangle_area", "params": {"base": 10, "height": 5}}
    steps = play(task, [wrong, RESPOND], "partial")
    assert [s.reward for s in steps[1:]] == pytest.approx([5 / 12, 0.0])
    assert steps[-1].info["partial_credit"] == pytest.approx(5 / 12) and steps[-1].info["success"] is False
    steps = play(task, [wrong, right, RESPOND], "partial")
    assert [s.reward for s in steps[1:]] == pytest.approx([5 / 12, -1 / 6, 0.0])
    steps = play(task, [right, RESPOND], "partial")
    assert [s.reward for s in steps[1:]] == pytest.approx([0.5, 0.5])
    outcome = play(task, [wrong, RESPOND])
    assert [s.reward for s in outcome[1:]] == [0.0, 0.0] and outcome[-1].info["reason"].startswith("call 1")


def test_episode_tools_are_the_tasks_functions_as_json_schema():
    task = task_of("simple_python_1")  # math.factorial
    env = BFCLEnv()
    assert env.available_tools == ["respond"]  # before a task, only the closing tool
    env.reset(task=task)
    schemas = {
        s["function"]["name"]: s["function"]["parameters"] for s in tool_schemas(env.available_tools, env.domain)
    }
    assert schemas == {
        "math.factorial": {
            "type": "object",
            "properties": {
                "number": {"type": "integer", "description": "The number for which factorial needs to be calculated."}
            },
            "required": ["number"],
        },
        "respond": {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
            "additionalProperties": False,
        },
    }
    # every BFCL type in the data became JSON Schema: dict -> object, float -> number, tuple -> array, any -> none
    seen = {}

    def walk(bfcl, converted):
        seen.setdefault(bfcl["type"], set()).add(converted.get("type"))
        for name, inner in bfcl.get("properties", {}).items():
            walk(inner, converted["properties"][name])
        if "items" in bfcl:
            walk(bfcl["items"], converted["items"])

    for t in split_tasks("test") + split_tasks("train"):
        env.reset(task=t)
        schemas = {s["function"]["name"]: s["function"] for s in tool_schemas(env.available_tools, env.domain)}
        for function in t["metadata"]["functions"]:
            assert schemas[function["name"]]["description"] == function["description"]
            walk(function["parameters"], schemas[function["name"]]["parameters"])
    assert seen == {
        "dict": {"object"},
        "float": {"number"},
        "tuple": {"array"},
        "any": {None},
        "array": {"array"},
        "string": {"string"},
        "integer": {"integer"},
        "boolean": {"boolean"},
    }


def test_made_up_and_unparsed_calls_are_recorded_and_fail():
    task = task_of("simple_python_1")
    steps = play(task, [{"tool": "math.fact", "params": {"number": 5}}, RESPOND])
    assert steps[1].info["error"].startswith("unknown function 'math.fact'") and not steps[1].done
    assert (
        steps[-1].info["success"] is False
        and steps[-1].info["reason"] == "no call left for expected call 1 (math.factorial)"
    )
    unparsed = {
        "tool": "math.factorial",
        "params": {},
        "format_error": "arguments of 'math.factorial' are not valid JSON",
    }
    steps = play(task, [unparsed, RESPOND])
    assert steps[-1].info["success"] is False and "did not parse" in steps[-1].info["reason"]
    steps = play(task, ["math.factorial(5)", RESPOND])  # not an action: refused, not recorded
    assert steps[1].observation.startswith("[error] an action must be a dict") and steps[-1].info["calls"] == 0


def test_env_refuses_a_task_whose_function_is_a_closing_tool():
    needs_bfcl()
    entry = next(e for e in load_entries("live_multiple") if e["id"] == "live_multiple_183-78-0")
    task = {"id": "x", "description": "q", "metadata": {"functions": entry["function"], "possible_answer": []}}
    with pytest.raises(ValueError, match="function named 'finish', the tool a reply in plain text becomes"):
        BFCLEnv().reset(task=task)


def test_without_bfcl_eval_every_entry_point_says_how_to_install():
    lines = run_python("""
        import sys
        sys.modules["bfcl_eval"] = None  # as if bfcl-eval were not installed
        from agentsandbox.bfcl import BFCLEnv
        from agentsandbox.suites.bfcl import BFCL
        task = {"id": "t", "description": "q", "metadata": {"functions": [], "possible_answer": []}}
        for entry_point in (lambda: BFCL.generate("test", 5), lambda: BFCLEnv().reset(task=task)):
            try:
                entry_point()
            except Exception as exc:
                print(type(exc).__name__, getattr(exc, "exit_code", None), repr(str(exc)))
    """)
    expected = "BFCL tasks need the bfcl-eval package: pip install --no-deps bfcl-eval==2026.3.23 (docs/bfcl.md)"
    assert lines == [f"BFCLError 2 {expected!r}"] * 2


def test_hub_tasks_without_bfcl_eval_prints_one_line_and_exits_2(tmp_path):
    """``knowlyr-hub tasks bfcl`` on a bare install."""
    lines = hub_tasks_without_bfcl_eval(tmp_path, "bfcl", "agentsandbox.suites.bfcl:BFCL")
    assert lines[0] == "2" and len(lines) == 2, lines
    assert lines[1].startswith(f"error: BFCL tasks need the bfcl-eval package: {INSTALL_STEP} (docs/bfcl.md)")
    assert not (tmp_path / "t.jsonl").exists()


def test_malformed_bfcl_files_are_one_line_errors(tmp_path):
    data = tmp_path / "bfcl_eval" / "data"
    (data / "possible_answer").mkdir(parents=True)
    (tmp_path / "bfcl_eval" / "__init__.py").write_text("")
    good = {
        "id": "x_0",
        "question": [[{"role": "user", "content": "5!?"}]],
        "function": [
            {
                "name": "math.factorial",
                "description": "n!",
                "parameters": {"type": "dict", "properties": {"number": {"type": "integer"}}, "required": ["number"]},
            }
        ],
    }
    (data / "BFCL_v4_simple_python.json").write_text(json.dumps(good) + "\n" + json.dumps(good)[:40])  # truncated
    (data / "BFCL_v4_multiple.json").write_text(json.dumps({**good, "function": "math.factorial"}) + "\n")
    number = good["function"][0]["parameters"]["properties"]["number"]
    number["type"] = "int"
    (data / "BFCL_v4_parallel.json").write_text(json.dumps(good) + "\n")
    number["type"] = "integer"
    (data / "BFCL_v4_parallel_multiple.json").write_text(json.dumps(good) + "\n")
    (data / "possible_answer" / "BFCL_v4_parallel_multiple.json").write_text(
        json.dumps({"id": "x_0", "ground_truth": [{"math.fact": {"number": [5]}}]}) + "\n"
    )
    lines = run_python(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})  # this bfcl_eval, not an installed one
        from agentsandbox.bfcl import data
        for category in ("simple_python", "multiple", "parallel", "parallel_multiple", "live_relevance"):
            try:
                data.load_answers(category)
            except Exception as exc:
                print(type(exc).__name__, "|", str(exc).replace(str({str(data)!r}), "DATA"))
    """)
    assert lines[0].startswith("DataFormatError | DATA/BFCL_v4_simple_python.json:2: ")
    assert lines[1:] == [
        "DataFormatError | DATA/BFCL_v4_multiple.json:1: function: expected a list of function documents",
        "DataFormatError | DATA/BFCL_v4_parallel.json:1: function.0.parameters.properties.number.type: unknown type "
        "'int'; BFCL's types are string, integer, float, boolean, array, tuple, dict, any",
        "DataFormatError | DATA/possible_answer/BFCL_v4_parallel_multiple.json:1: ground_truth.0: function "
        "'math.fact' is not among the entry's functions",
        "BFCLError | unknown BFCL category 'live_relevance'; known: " + ", ".join(CATEGORIES),
    ]


def test_docstring_examples_run():
    needs_bfcl()
    import doctest

    import agentsandbox.bfcl.env

    for module in (agentsandbox.bfcl.env, bfcl_suite):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__
