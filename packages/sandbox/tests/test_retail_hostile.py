"""Hostile tool arguments in ``knowlyr/retail``: whatever a policy passes, ``step`` returns an error
observation the policy can read (the episode goes on, the shop unchanged) and never raises.

A lone surrogate (JSON ``"\\ud800"``) once raised ``UnicodeEncodeError`` from SQLite out of
``step``; an int of over 4300 digits or a value nested deeper than Python's stack raised while
the schema check printed it."""

import json
import math

import pytest
from sandbox_tasks import RETAIL_WORLD

from agentsandbox.retail import RETAIL_PROFILE, RetailEnv
from agentsandbox.retail.db import MAX_ERROR_CHARS, state_digest

WORLD = RETAIL_WORLD
TASK = {"id": "hostile", "description": "help", "metadata": {"world": WORLD}}

#: Arguments that reach the shop's business rules, so a bad value in one of them is the only fault.
VALID = {
    "find_user_by_email": {"email": "a@b.c"},
    "find_user_by_name": {"name": "A B"},
    "get_user": {"user_id": "u1"},
    "list_orders": {"user_id": "u1"},
    "get_order": {"order_id": "#W2"},
    "cancel_order": {"order_id": "#W2", "reason": "no longer needed"},
    "change_address": {"order_id": "#W2", "address": "2 Y St"},
    "return_items": {"order_id": "#W1", "item_ids": ["I1"]},
    "respond": {"message": "Done."},
}


def _deep(depth=100_000):
    value = []
    for _ in range(depth):
        value = [value]
    return value


BAD_TEXT = {"lone high surrogate": "\ud800", "lone low surrogate in text": "ok \udfff ok"}
BAD_VALUES = {
    **BAD_TEXT,
    "int of 401 digits": 10**400,
    "negative int of 401 digits": -(10**400),
    "int past the 4300-digit print limit": 10**5000,
    "NaN": math.nan,
    "infinity": math.inf,
    "nested object": {"order_id": {"$ne": None}},
    "nested 100000 deep": _deep(),
    "null": None,
    "bool": True,
    "bytes": b"#W2",
}
#: Every string parameter of every tool: (tool, parameter, whether it is an item of a list).
TEXT_PARAMETERS = [
    (tool.name, name, schema.get("type") == "array")
    for tool in RETAIL_PROFILE.tools
    for name, schema in tool.parameters["properties"].items()
]


def test_every_tool_has_a_valid_call_and_every_parameter_is_covered():
    assert set(VALID) == set(RETAIL_PROFILE.tool_names)
    assert {(t, p) for t, p, _ in TEXT_PARAMETERS} == {(t, p) for t, params in VALID.items() for p in params}


def assert_refused(env, action, start):
    ts = env.step(action)  # must not raise
    assert ts.observation.startswith("[error]") and ts.info["error"], ts.observation
    assert not ts.terminated and not ts.truncated and ts.reward == 0.0
    assert len(ts.observation) < MAX_ERROR_CHARS + 100, len(ts.observation)  # a 10 MB argument is not echoed
    json.dumps(ts.info, ensure_ascii=False).encode()  # no lone surrogate in what gets recorded
    ts.observation.encode()
    assert state_digest(env._db) == start  # nothing changed
    return ts


def assert_episode_goes_on(env):
    ts = env.step({"tool": "get_order", "params": {"order_id": "#W2"}})
    assert json.loads(ts.observation)["status"] == "pending"


@pytest.mark.parametrize(("tool", "parameter", "in_list"), TEXT_PARAMETERS)
@pytest.mark.parametrize("bad", list(BAD_VALUES), ids=list(BAD_VALUES))
def test_a_bad_value_in_any_parameter_is_an_error_observation(tool, parameter, in_list, bad):
    env = RetailEnv(reward="partial")
    env.reset(task=TASK)
    start = state_digest(env._db)
    value = BAD_VALUES[bad]
    variants = [value, [value], ["I1", value]] if in_list else [value]
    for variant in variants:
        ts = assert_refused(env, {"tool": tool, "params": {**VALID[tool], parameter: variant}}, start)
        well_typed = isinstance(variant, list) == in_list and parameter != "reason"  # a bad reason is off its enum
        if bad in BAD_TEXT and well_typed:  # the refusal names the parameter
            assert f"'{parameter}'" in ts.observation and "not Unicode text" in ts.observation, ts.observation
    assert_episode_goes_on(env)
    env.close()


@pytest.mark.parametrize("tool", list(VALID))
def test_bad_keys_are_error_observations(tool):
    env = RetailEnv()
    env.reset(task=TASK)
    start = state_digest(env._db)
    for key in (1, None, ("t",), 10**5000, "\ud800", "x" * 1_000_000):
        assert_refused(env, {"tool": tool, "params": {**VALID[tool], key: "x"}}, start)
    assert_refused(env, {"tool": tool, "params": {"\ud800": "#W2"}}, start)
    assert_episode_goes_on(env)
    env.close()


def test_bad_tool_names_and_actions_are_error_observations():
    env = RetailEnv()
    env.reset(task=TASK)
    start = state_digest(env._db)
    for tool in ("\ud800", "x" * 10_000_000, 10**5000, _deep(), math.nan, {"a": "b"}, ""):
        assert_refused(env, {"tool": tool, "params": {}}, start)
    for action in (None, "get_order", [1, 2], {"tool": "get_order", "params": _deep()}, _deep()):
        assert_refused(env, action, start)
    assert_episode_goes_on(env)
    env.close()


def test_a_huge_argument_is_not_echoed_back_whole():
    env = RetailEnv()
    env.reset(task=TASK)
    start = state_digest(env._db)
    huge = "#W" + "9" * 10_000_000
    ts = assert_refused(env, {"tool": "get_order", "params": {"order_id": huge}}, start)
    assert "characters cut" in ts.observation
    assert_episode_goes_on(env)


def test_a_final_answer_that_is_not_text_is_refused_and_the_episode_goes_on():
    env = RetailEnv()
    env.reset(task=TASK)
    start = state_digest(env._db)
    for bad in ("I'm done \ud800", 10**400, {"text": "Done."}, ["Done."], None):
        assert_refused(env, {"tool": "respond", "params": {"message": bad}}, start)
    done = env.step({"tool": "respond", "params": {"message": "Done."}})
    assert done.terminated and done.info["success"] is True  # no solution: any end state, the answer counts
    env.close()


def test_a_surrogate_that_reaches_the_database_directly_is_an_error_result():
    """``call_tool`` itself (the env checks text first) turns a value SQLite cannot bind into an
    error result and leaves the shop as it was."""
    from agentsandbox.retail.db import call_tool, open_shop

    db = open_shop(WORLD)
    start = state_digest(db)
    for name, params in (
        ("change_address", {"order_id": "#W2", "address": "2 \ud800 St"}),
        ("get_order", {"order_id": "\ud800"}),
        ("find_user_by_email", {"email": "\udfff"}),
    ):
        result = call_tool(db, name, params)
        assert result.error and "cannot be stored" in result.error, (name, result)
        result.error.encode()
    assert state_digest(db) == start
    db.close()
