"""The conversation rules on hand-built customer-service trajectories where the right flag is obvious."""

from agentreward import RewardEngine
from agentreward.rules import analyse, penalty_counts


def chat(*steps, description="Hi, I want to cancel my order #W1234567."):
    return {"task": {"description": description, "domain": "conversation"}, "steps": list(steps)}


def say(make_step, message, user_reply):
    return make_step("respond", {"message": message}, user_reply)


def flags(trajectory):
    return [s.flags for s in analyse(trajectory)]


def test_a_confirmed_grounded_action_raises_no_flag(make_step):
    trajectory = chat(
        make_step("get_order", {"order_id": "#W1234567"}, '{"order_id": "#W1234567", "status": "pending"}'),
        say(make_step, "Cancel order #W1234567 (pending)? Please confirm.", "Yes, go ahead."),
        make_step("cancel_order", {"order_id": "#W1234567", "reason": "no longer needed"}, '{"status": "cancelled"}'),
        say(make_step, "Done: the order is cancelled.", "Thanks, that's all. ###STOP###"),
    )
    assert flags(trajectory) == [[], [], [], []]


def test_acting_before_the_user_said_yes_is_unconfirmed(make_step):
    trajectory = chat(
        make_step("get_order", {"order_id": "#W1234567"}, '{"order_id": "#W1234567"}'),
        say(make_step, "Which reason should I record?", "Hmm, I am not sure I want that."),
        make_step("cancel_order", {"order_id": "#W1234567"}, '{"status": "cancelled"}'),
    )
    assert analyse(trajectory)[2].unconfirmed
    assert penalty_counts(analyse(trajectory))["unconfirmed_action"] == 1


def test_an_id_nobody_showed_is_ungrounded(make_step):
    # the order id the user gave is known; the payment id appears nowhere before the call
    trajectory = chat(
        say(make_step, "Shall I refund it to your card?", "Yes please."),
        make_step("refund_order", {"order_id": "#W1234567", "payment_id": "credit_card_9999999"}, "ok"),
    )
    assert analyse(trajectory)[1].ungrounded
    grounded = chat(
        make_step("get_user", {"user_id": "ann_1"}, '{"payments": ["credit_card_9999999"]}'),
        say(make_step, "Shall I refund it to your card?", "Yes please."),
        make_step("refund_order", {"order_id": "#W1234567", "payment_id": "credit_card_9999999"}, "ok"),
    )
    assert not analyse(grounded)[2].ungrounded


def test_redoing_a_successful_action_is_a_repeat_but_a_retry_after_an_error_is_not(make_step):
    cancel = make_step("cancel_order", {"order_id": "#W1234567", "reason": "x"}, '{"status": "cancelled"}')
    failed = make_step("cancel_order", {"order_id": "#W1234567", "reason": "x"}, "Error: order not found")
    yes = say(make_step, "Cancel it?", "yes")
    assert [s.repeated_action for s in analyse(chat(yes, cancel, cancel))] == [False, False, True]
    assert [s.repeated_action for s in analyse(chat(yes, failed, cancel))] == [False, False, False]


def test_acting_after_the_user_closed_the_conversation(make_step):
    trajectory = chat(
        say(make_step, "Anything else?", "No, that's all, goodbye!"),
        make_step("cancel_order", {"order_id": "#W1234567"}, "ok"),
    )
    assert analyse(trajectory)[1].after_done


def test_a_transfer_nobody_asked_for_is_needless(make_step):
    transfer = make_step("transfer_to_human_agents", {"summary": "user wants a cancel"}, "Transfer successful")
    assert analyse(chat(say(make_step, "Let me check.", "ok"), transfer))[1].needless_transfer
    asked = chat(say(make_step, "Let me check.", "I want to talk to a human representative."), transfer)
    assert not analyse(asked)[1].needless_transfer


def test_ending_on_i_cannot_help_without_doing_anything_is_giving_up(make_step):
    trajectory = chat(say(make_step, "Sorry, I am unable to help with that request.", "###STOP###"))
    assert analyse(trajectory)[0].gave_up
    helped = chat(
        say(make_step, "Cancel #W1234567?", "yes"),
        make_step("cancel_order", {"order_id": "#W1234567"}, "ok"),
        say(make_step, "Unfortunately I cannot refund the shipping, but the order is cancelled.", "ok"),
    )
    assert not analyse(helped)[2].gave_up


def test_code_and_file_tools_need_no_confirmation(make_step):
    # a coding agent that also talks to a user: running tests is not a consequential action
    trajectory = chat(
        say(make_step, "I will run the tests.", "hmm"),
        make_step("bash", {"command": "pytest -q tests/test_9999.py"}, "1 passed", exit_code=0),
        make_step("edit_file", {"path": "src/a_123.py", "old_str": "a", "new_str": "b"}, "edited"),
    )
    assert flags(trajectory)[1:] == [[], []]


def test_without_a_user_in_the_loop_the_rules_stay_silent(make_step):
    trajectory = {"task": {"description": "book it"}, "steps": [make_step("book_flight", {"flight": "HAT999"}, "ok")]}
    assert analyse(trajectory)[0].flags == []


def test_each_violation_lowers_the_step_and_the_total(make_step):
    good = chat(
        say(make_step, "Cancel #W1234567?", "yes"),
        make_step("cancel_order", {"order_id": "#W1234567"}, "ok"),
    )
    bad = chat(
        say(make_step, "Cancel #W1234567?", "what would that cost?"),
        make_step("cancel_order", {"order_id": "#W7654321"}, "ok"),
    )
    engine = RewardEngine(conversation_rules=True)
    good_scored, bad_scored = engine.score_record(good), engine.score_record(bad)
    assert bad_scored["steps"][1]["metadata"]["reward_flags"] == ["unconfirmed", "ungrounded"]
    assert bad_scored["steps"][1]["reward"] < good_scored["steps"][1]["reward"]
    # conversation weights; goal 0.1, tool 1, param 0.3, info 0, non-redundancy 1
    assert bad_scored["steps"][1]["reward"] == round(0.35 * 0.1 + 0.20 * 1 + 0.15 * 0.3 + 0.20 * 0 + 0.10 * 1, 6)
    # total: mean of the two steps plus (-0.3 unconfirmed - 0.3 ungrounded) / 2 steps
    mean = (bad_scored["steps"][0]["reward"] + bad_scored["steps"][1]["reward"]) / 2
    assert bad_scored["reward"] == round(max(0.0, mean - 0.6 / 2), 6)


def test_conversation_rules_only_flag_unless_enabled(make_step):
    bad = chat(
        say(make_step, "Cancel #W1234567?", "what would that cost?"),
        make_step("cancel_order", {"order_id": "#W7654321"}, "ok"),
    )
    scored, enabled = RewardEngine().score_record(bad), RewardEngine(conversation_rules=True).score_record(bad)
    assert scored["steps"][1]["metadata"]["reward_flags"] == ["unconfirmed", "ungrounded"]
    assert scored["steps"][1]["rubric_scores"]["goal_progress"] > 0.1
    assert scored["steps"][1]["reward"] > enabled["steps"][1]["reward"]
    mean = (scored["steps"][0]["reward"] + scored["steps"][1]["reward"]) / 2
    assert scored["reward"] == round(mean, 6)  # no conversation penalty in the total
