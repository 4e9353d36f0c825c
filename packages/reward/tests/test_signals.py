"""Process signals (``agentreward.signals``) of rendered prefixes, against values counted by hand."""

import pytest

from agentreward.signals import SIGNALS, argument_text, claim_tokens, prefix_signals
from knowlyrcore.prefix_text import step_prefixes


def step(name, parameters, output, **observation):
    return {"tool_call": {"name": name, "parameters": parameters}, "observation": {"output": output, **observation}}


RUN = {
    "task": {"description": "Cancel #W123 for ann@example.com."},
    "steps": [
        step("find_user_by_email", {"email": "ann@example.com"}, '{"user_id": "ann_1"}'),
        step("cancel_order", {"order_id": "#W999"}, "[error] no order '#W999'"),
        step("respond", {"message": "Order #W123 is cancelled."}, "Conversation ended."),
    ],
}


def signals(text):
    return dict(zip(SIGNALS, prefix_signals(text)))


def test_signals_of_each_prefix_counted_by_hand():
    first, second, third = (signals(text) for text in step_prefixes(RUN))
    # step 1: the email is the request's -> grounded; a result came back
    assert first == {
        **dict.fromkeys(SIGNALS, 0.0),
        "grounded_last": 1.0,
        "grounded_min": 1.0,
        "grounded_mean": 1.0,
        "any_result": 1.0,
        "length": 0.1,
    }
    # step 2: w999 was never shown -> 0 grounded; its result is an error
    assert second["grounded_last"] == 0.0 and second["grounded_min"] == 0.0 and second["grounded_mean"] == 0.5
    assert second["error_last"] == 1.0 and second["error_rate"] == 0.5
    # step 3: "order" (the error said "no order"), "w123" (the request) found; "cancelled" never said
    assert third["grounded_last"] == pytest.approx(2 / 3)
    assert third["grounded_mean"] == pytest.approx((1 + 0 + 2 / 3) / 3)
    assert third["error_last"] == 0.0 and third["error_rate"] == pytest.approx(1 / 3)
    assert third["new_facts"] == 0.0  # nothing of the message came from a result that was not an error
    assert third["length"] == pytest.approx(0.3) and third["repeated"] == 0.0 and third["markup"] == 0.0


def test_passing_on_what_a_result_said_repeats_and_markup():
    run = {
        "task": {"description": "Where does my order W5 go? I am bo@example.com"},
        "steps": [
            step("get_order", {"order_id": "W5"}, '{"address": "12 Elm St, Boise", "status": "pending"}'),
            step("get_order", {"order_id": "W5"}, '{"address": "12 Elm St, Boise", "status": "pending"}'),
            step("respond", {"message": "It ships to 12 Elm St, Boise (pending)."}, "Conversation ended."),
        ],
    }
    last = signals(step_prefixes(run)[-1])
    # "ships" is not in what was seen; "12", "boise", "pending" are, and came from a result
    assert last["grounded_last"] == pytest.approx(3 / 4) and last["new_facts"] == pytest.approx(3 / 4)
    assert last["repeated"] == 1.0 and last["markup"] == 0.0
    chat = {"task": {"description": "hi"}, "steps": [step("respond", {"message": "<tool_call>{}</tool_call>"}, "ok")]}
    assert signals(step_prefixes(chat)[0])["markup"] == 1.0


def test_a_failed_command_is_an_error_by_its_exit_code():
    run = {"task": {"description": "fix it"}, "steps": [step("bash", {"command": "pytest"}, "1 failed", exit_code=1)]}
    assert signals(step_prefixes(run)[0])["error_last"] == 1.0
    run["steps"][0]["observation"]["exit_code"] = 0
    assert signals(step_prefixes(run)[0])["error_last"] == 0.0


def test_tokens_and_arguments():
    assert claim_tokens("Order #W123 is now cancelled for ann@example.com, thanks!") == [
        "order",
        "w123",
        "cancelled",
        "ann@example.com",
    ]
    assert argument_text('{"a": {"b": ["x", 2]}, "c": null}') == "x 2"
    assert argument_text('{"cut short…') == '{"cut short…'  # not JSON: read as it is


@pytest.mark.parametrize("text", ["", "Task: nothing done yet", "no header at all\nStep x: y"])
def test_a_text_with_no_step_gives_zeros(text):
    assert prefix_signals(text) == [0.0] * len(SIGNALS)
