"""The retail suite and ``knowlyr/retail``: the env protocol suite, the shop's business rules,
determinism, split disjointness, an expert that solves every task and policies that must not."""

import json
import re

import pytest
from sandbox_tasks import RETAIL_WORLD

from agentsandbox.retail import CANCEL_REASONS, RetailEnv
from agentsandbox.retail.db import open_shop, state_digest
from agentsandbox.suites import SuiteError, get_suite
from agentsandbox.suites import retail as retail_suite
from agentsandbox.suites.retail import SEEN_TEMPLATES, STATUSES, UNSEEN_TEMPLATES, VERIFIER_ONLY_TEMPLATES
from agentsandbox.suites.retail_phrasing import VERBS
from agentsandbox.testing import SuiteConformance
from knowlyrcore import make
from knowlyrcore.testing import EnvConformance

RETAIL = get_suite("retail")
TASK = RETAIL.generate("test", 2, seed=3)[1]  # a cancel_order task
USER = TASK["metadata"]["world"]["users"][0]


class TestRetailEnv(EnvConformance):
    task = TASK
    actions = [
        {"tool": "find_user_by_email", "params": {"email": USER["email"]}},
        {"tool": "get_user", "params": {"user_id": USER["user_id"]}},
        {"tool": "list_orders", "params": {"user_id": USER["user_id"]}},
    ]
    terminal_action = {"tool": "respond", "params": {"message": "Done."}}

    def make_env(self):
        return make("knowlyr/retail")


#: One constant answer naming every status, both cancellation reasons, every count from 0 to 9,
#: a refusal and a return, without the give-away "now cancelled" (the answer of issue #26 that
#: passed 38 of 270 test tasks without a tool call).
STUFFED = (
    f"Your order is {', '.join(STATUSES)}; it cannot be cancelled. Reasons: {' or '.join(CANCEL_REASONS)}. "
    + " ".join(f"You have {k} order{'' if k == 1 else 's'}." for k in range(10))
    + " The item is returned."
)


class TestRetailSuite(SuiteConformance):
    """The expert solves every task; doing nothing or answering ``STUFFED`` at once succeeds
    nowhere and earns 0, under outcome and partial-credit rewards, on every split."""

    suite = "retail"
    seed = 7
    stuffed_answer = STUFFED
    env_variants = [{}, {"reward": "partial"}]


def play(task, actions):
    env = RetailEnv()
    ts = env.reset(task=task)
    for action in actions:
        ts = env.step(action)
        if ts.done:
            break
    env.close()
    return ts


def test_same_call_gives_same_tasks_and_seeds_differ():
    assert RETAIL.generate("train", 30, seed=1) == RETAIL.generate("train", 30, seed=1)
    assert json.dumps(RETAIL.generate("test", 5, seed=0)) == json.dumps(RETAIL.generate("test", 5, seed=0))
    a = {json.dumps(t["metadata"]["world"]) for t in RETAIL.generate("train", 30, seed=1)}
    b = {json.dumps(t["metadata"]["world"]) for t in RETAIL.generate("train", 30, seed=2)}
    assert len(a) == 30 and not a & b


def test_train_and_test_share_no_entity_no_id_and_unseen_templates_are_held_out():
    train = RETAIL.generate("train", 300, seed=0) + RETAIL.generate("train-verifier-only", 300, seed=0)
    held_out = [t for split in ("test", "test-verifier-only", "test-unseen") for t in RETAIL.generate(split, 300, 0)]
    train_entities = {e for t in train for e in t["metadata"]["entities"]}
    held_entities = {e for t in held_out for e in t["metadata"]["entities"]}
    assert train_entities and held_entities and not train_entities & held_entities
    assert not {t["id"] for t in train} & {t["id"] for t in held_out}
    train_templates = {t["metadata"]["template"] for t in train}
    assert train_templates == set(SEEN_TEMPLATES) | set(VERIFIER_ONLY_TEMPLATES)
    assert {t["metadata"]["template"] for t in RETAIL.generate("train", 50, 0)} == set(SEEN_TEMPLATES)
    assert {t["metadata"]["template"] for t in RETAIL.generate("test", 50, 0)} == set(SEEN_TEMPLATES)
    for split in ("train-verifier-only", "test-verifier-only"):
        assert {t["metadata"]["template"] for t in RETAIL.generate(split, 30, 0)} == set(VERIFIER_ONLY_TEMPLATES)
    assert {t["metadata"]["template"] for t in RETAIL.generate("test-unseen", 50, 0)} == set(UNSEEN_TEMPLATES)
    assert not train_templates & set(UNSEEN_TEMPLATES)
    # unseen templates combine tools that train demonstrates: generalisation, not a new tool
    unseen_tools = {a["tool"] for t in RETAIL.generate("test-unseen", 50, 0) for a in t["metadata"]["solution"]}
    assert unseen_tools <= {a["tool"] for t in train for a in t["metadata"]["solution"]}
    # solutions span 2 to 6 tool calls: every task needs a tool before its answer
    lengths = {len(t["metadata"]["solution"]) for t in train}
    assert min(lengths) == 2 and max(lengths) == 6


@pytest.mark.parametrize("split", RETAIL.splits)
def test_do_nothing_and_shortcut_policies_fail(split):
    tasks = RETAIL.generate(split, 120, seed=7)
    for task in tasks:
        # answering at once, even with the expert's own final words, changes nothing in the shop
        assert (
            play(task, [{"tool": "respond", "params": {"message": "I cannot help with that."}}]).info["success"]
            is False
        )
    needs_state = [
        t
        for t in tasks
        if any(a["tool"] in ("cancel_order", "change_address", "return_items") for a in t["metadata"]["solution"])
    ]
    for task in needs_state:
        final = task["metadata"]["solution"][-1]
        assert play(task, [final]).info["success"] is False, task["id"]


def _skeleton_sentences(task):
    """The request's sentences with every entity and id replaced: its wording, not its content."""
    text = task["description"]
    world = task["metadata"]["world"]
    names = [u["name"] for u in world["users"]] + [u["email"] for u in world["users"]]
    for entity in sorted({*task["metadata"]["entities"], *names}, key=len, reverse=True):
        text = text.replace(entity, "<e>")
    return {s.strip() for s in re.split(r"(?<=[.?!;])\s+", text) if s.strip()}


def test_held_out_requests_use_wordings_train_never_shows():
    """Read off the generated files: no sentence (entities masked), frame or verb phrase of a
    test-side request occurs in a train-side one, over several seeds."""
    train = [t for seed in range(3) for t in RETAIL.generate("train", 320, seed)]
    train += [t for seed in range(3) for t in RETAIL.generate("train-verifier-only", 120, seed)]
    held_splits = ("test", "test-verifier-only", "test-unseen")
    held = [t for seed in range(3) for split in held_splits for t in RETAIL.generate(split, 120, seed)]
    train_sentences = set().union(*map(_skeleton_sentences, train))
    for task in held:
        shared = _skeleton_sentences(task) & train_sentences
        assert not shared, (task["id"], task["description"], shared)
    assert {t["metadata"]["phrasing"]["frame"] for t in train}.isdisjoint(
        t["metadata"]["phrasing"]["frame"] for t in held
    )
    train_verbs = {t["metadata"]["phrasing"]["verb"] for t in train} - {None}
    held_verbs = {t["metadata"]["phrasing"]["verb"] for t in held} - {None}
    assert train_verbs and held_verbs and train_verbs.isdisjoint(held_verbs)
    train_text = " ".join(t["description"].lower() for t in train)
    for verb in (v for intent in VERBS.values() for v in intent["held_out"] if "{" not in v):
        assert not re.search(rf"\b{verb}\b", train_text), verb
    # the grammar is used: many distinct wordings per template, and the typos are there
    per_template = {}
    for t in held:
        per_template.setdefault(t["metadata"]["template"], set()).add(frozenset(_skeleton_sentences(t)))
    assert all(len(wordings) >= 5 for wordings in per_template.values()), {k: len(v) for k, v in per_template.items()}
    assert 0.03 < sum(t["metadata"]["phrasing"]["typo"] for t in held) / len(held) < 0.3


def test_unseen_templates_tool_sequences_never_occur_in_train():
    train = [t for seed in range(2) for t in RETAIL.generate("train", 320, seed)]
    train_sequences = {tuple(a["tool"] for a in t["metadata"]["solution"]) for t in train}
    unseen_sequences = {
        tuple(a["tool"] for a in t["metadata"]["solution"]) for t in RETAIL.generate("test-unseen", 60, 0)
    }
    assert len(unseen_sequences) == len(UNSEEN_TEMPLATES)
    assert unseen_sequences.isdisjoint(train_sequences)


def test_wording_does_not_change_the_world_the_solution_or_the_answer_check(monkeypatch):
    """Requests are worded from a random stream of their own."""
    worded = RETAIL.generate("test", 30, 4)
    monkeypatch.setattr(retail_suite, "phrase", lambda template, split, rng, slots, identity: ("plain", {}))
    plain = RETAIL.generate("test", 30, 4)
    keys = ("world", "solution", "answer_contains", "answer_excludes", "template")
    assert [[t["metadata"][k] for k in keys] for t in worded] == [[t["metadata"][k] for k in keys] for t in plain]


def test_requests_name_what_the_solution_needs():
    """The lookup the solution starts with is possible from the request: an email when it finds
    by email, the name and never the email when it finds by name; every order id and item it
    touches is named, except where the request says "my pending order"."""
    env = RetailEnv()
    for split in RETAIL.splits:
        for task in RETAIL.generate(split, 90, 2):
            text, solution = task["description"], task["metadata"]["solution"]
            first = solution[0]
            if first["tool"] == "find_user_by_email":
                assert first["params"]["email"] in text, text
            if first["tool"] == "find_user_by_name":
                user = next(u for u in task["metadata"]["world"]["users"] if u["name"] == first["params"]["name"])
                assert user["name"] in text and user["email"] not in text, text
            named = [a["params"]["order_id"] for a in solution if a["tool"] == "get_order"]
            assert all(oid in text for oid in named), text
            assert env.reset(task=task).observation == text  # the policy reads the request
    env.close()


def test_listing_every_status_does_not_pass_the_answer_check():
    task = next(t for t in RETAIL.generate("test", 40, 0) if t["metadata"]["template"] == "order_status")
    stuffed = {"tool": "respond", "params": {"message": "It is pending, processed, delivered or cancelled."}}
    ts = play(task, [task["metadata"]["solution"][0], stuffed])
    assert ts.info["state_ok"] is True and ts.info["answer_ok"] is False and ts.info["success"] is False


#: The kind of fact each template's answer states: hedging over the values of that kind must fail.
ASKED = {
    "order_status": "status",
    "cancel_order": "status",
    "cancel_two": "status",
    "cancel_pending_by_name": "status",
    "cancel_pending_by_email": "status",
    "cancel_and_return": "status",
    "count_orders": "count",
    "cancel_reasons": "reason",
    "email_on_file": "email",
    "address_by_email": "address",
    "address_on_file": "address",
    "change_address": "address",
    "change_address_by_name": "address",
    "return_item": "item",
    "count_orders_by_name": "count",
}
#: Templates whose answer is about particular orders: naming another order is wrong too.
ABOUT_ORDERS = set(ASKED) - {
    "count_orders",
    "count_orders_by_name",
    "email_on_file",
    "address_by_email",
    "address_on_file",
}


def _candidates(task):
    """Every value of each kind the task's answer could hedge with, and the ones true in the
    episode: the reference answer's, and the start values of the orders the solution names."""
    world, solution = task["metadata"]["world"], task["metadata"]["solution"]
    named = {a["params"]["order_id"] for a in solution if "order_id" in a["params"]}
    touched = [o for o in world["orders"] if o["order_id"] in named]
    candidates = {
        "status": list(STATUSES),
        "reason": list(CANCEL_REASONS),
        "count": [f"{k} order{'' if k == 1 else 's'}" for k in range(10)],
        "email": [u["email"] for u in world["users"]],
        "address": [u["address"] for u in world["users"]],
        "item": [i["name"] for o in touched for i in o["items"]],
        "order": [o["order_id"] for o in world["orders"]],
    }
    reference = solution[-1]["params"]["message"]
    true = {reference, *named, *(o[k] for o in touched for k in ("status", "address"))}
    true = {t.casefold() for t in true}
    return candidates, lambda value: not any(value.casefold() in t for t in true)


def answer_ok(task, message):
    """Play the task's solution, then answer ``message``: (state_ok, answer_ok)."""
    ts = play(task, [*task["metadata"]["solution"][:-1], {"tool": "respond", "params": {"message": message}}])
    return ts.info["state_ok"], ts.info["answer_ok"]


@pytest.mark.parametrize("split", RETAIL.splits)
def test_an_answer_naming_any_wrong_value_of_the_asked_kind_fails(split):
    """The reference answer plus one wrong status, count, reason, email, address, item or order id
    fails; so does the reference followed by every candidate of every kind at once."""
    for task in RETAIL.generate(split, 60, seed=11):
        template, reference = task["metadata"]["template"], task["metadata"]["solution"][-1]["params"]["message"]
        candidates, wrong = _candidates(task)
        kinds = [ASKED[template], *(["order"] if template in ABOUT_ORDERS else [])]
        hedges = [value for kind in kinds for value in candidates[kind] if wrong(value)]
        assert hedges or template == "return_item", task["id"]  # a one-item order has no other item
        for value in hedges:
            assert answer_ok(task, f"{reference} (or maybe {value})") == (True, False), (task["id"], value)
        everything = " ".join(v for values in candidates.values() for v in values)
        assert answer_ok(task, f"{reference} {everything}") == (True, False), task["id"]


def _natural_answers(task):
    """Correct answers worded as an agent might: the reference, politely wrapped, and a rewording."""
    meta = task["metadata"]
    reference, facts = meta["solution"][-1]["params"]["message"], meta["answer_contains"]
    calls = {a["tool"]: a["params"] for a in meta["solution"]}
    oid = next((a["params"]["order_id"] for a in meta["solution"] if "order_id" in a["params"]), None)
    order = next((o for o in meta["world"]["orders"] if o["order_id"] == oid), None)
    reworded = {
        "order_status": lambda: f"I checked order {oid} for you: it's currently {facts[0]}. Anything else?",
        "cancel_order": lambda: (
            f"I'm sorry, order {oid} is already {facts[1]}, so I cannot cancel it."
            if facts[0] == "cannot"
            else f"Done! Your pending order {oid} is cancelled."
        ),
        "change_address": lambda: f"I've changed order {oid}'s address from {order['address']} to {facts[0]}.",
        "return_item": lambda: f"Your return is done: the item from order {oid} is marked as returned.",
        "count_orders": lambda: f"I can see {facts[0]} on your account.",
        "count_orders_by_name": lambda: f"You have placed {facts[0]} with us.",
        "cancel_two": lambda: f"Both of those pending orders are cancelled now ({oid} included).",
        "cancel_reasons": lambda: f"Order {oid} was cancelled because it was {facts[0]}.",
        "email_on_file": lambda: f"The email address we have for you is {facts[0]}.",
        "address_by_email": lambda: f"We ship to {facts[0]} by default.",
        "address_on_file": lambda: f"We ship to {facts[0]} by default.",
        "cancel_pending_by_name": lambda: f"Your pending order {calls['cancel_order']['order_id']} is now cancelled.",
        "cancel_pending_by_email": lambda: f"I cancelled the pending order {calls['cancel_order']['order_id']}.",
        "change_address_by_name": lambda: f"Your pending order will now ship to {facts[0]}.",
        "cancel_and_return": lambda: f"I cancelled order {oid}, and the item you sent back is returned.",
    }[meta["template"]]()
    return [
        reference,
        reference.upper(),
        f"Hi there! {reference} Is there anything else I can help you with?",
        f"Thanks for waiting. {reworded} Have a great day!",
    ]


@pytest.mark.parametrize("split", RETAIL.splits)
def test_correct_answers_as_an_agent_words_them_still_pass(split):
    for task in RETAIL.generate(split, 60, seed=11):
        for message in _natural_answers(task):
            assert answer_ok(task, message) == (True, True), (task["id"], message, task["metadata"]["answer_excludes"])


def test_every_task_needs_a_tool_the_answer_is_never_in_the_request():
    """A question's answer is read from the database: none of its facts is in the request or the
    system prompt (the old cancel_reasons task asked for the reasons the tool list names)."""
    for split in RETAIL.splits:
        for task in RETAIL.generate(split, 60, seed=11):
            solution = task["metadata"]["solution"]
            assert solution[0]["tool"] != "respond", task["id"]
            writes = {"cancel_order", "change_address", "return_items"} & {a["tool"] for a in solution}
            if not writes:  # a write is checked on the database; a question only by its answer
                prompt = (task["description"] + RETAIL.system_prompt).casefold()
                assert not any(f.casefold() in prompt for f in task["metadata"]["answer_contains"]), task["id"]


def test_business_rules_are_enforced_as_error_observations():
    world = RETAIL_WORLD
    task = {"id": "rules", "description": "help", "metadata": {"world": world}}
    env = RetailEnv()
    env.reset(task=task)

    def step(tool, **params):
        return env.step({"tool": tool, "params": params})

    assert "only pending" in step("cancel_order", order_id="#W1", reason="no longer needed").observation
    assert "reason" in step("cancel_order", order_id="#W2", reason="too slow").observation  # schema enum
    assert "only delivered" in step("return_items", order_id="#W2", item_ids=["I2"]).observation
    assert "has no item" in step("return_items", order_id="#W1", item_ids=["I2"]).observation
    assert step("return_items", order_id="#W1", item_ids=["I1"]).info["error"] is None
    assert "already returned" in step("return_items", order_id="#W1", item_ids=["I1"]).observation
    assert "only pending" in step("change_address", order_id="#W1", address="2 Y St").observation
    assert "no user with email" in step("find_user_by_email", email="nobody@x.y").observation
    assert "no order" in step("get_order", order_id="#W9").observation
    assert "[error]" in step("drop_tables").observation  # unknown tool: an observation, not a crash
    assert "[error]" in env.step("not an action").observation
    listed = json.loads(step("list_orders", user_id="u1").observation)
    assert listed == [
        {"order_id": "#W1", "status": "delivered", "total": 10.0},
        {"order_id": "#W2", "status": "pending", "total": 5.5},
    ]
    # with no solution to compare against, any end state counts; the answer check still applies
    assert env.step({"tool": "respond", "params": {"message": "ok"}}).info["success"] is True
    assert "episode is over" in step("get_order", order_id="#W1").observation


def test_each_episode_starts_from_the_task_world_not_the_last_episode():
    task = next(t for t in RETAIL.generate("train", 20, 0) if t["metadata"]["template"] == "cancel_order")
    expert = RETAIL.expert()
    expert.reset(task)
    first = play(task, [expert(None) for _ in task["metadata"]["solution"]])
    again = play(task, list(task["metadata"]["solution"]))
    assert first.info["success"] and again.info["success"]
    assert state_digest(open_shop(task["metadata"]["world"])) != ""


def test_bad_tasks_and_splits_give_clear_errors():
    with pytest.raises(ValueError, match="metadata.world"):
        RetailEnv().reset(task={"id": "x", "description": "no world"})
    with pytest.raises(ValueError, match="malformed retail world"):
        RetailEnv().reset(task={"id": "x", "metadata": {"world": {"users": [{"name": "missing fields"}]}}})
    with pytest.raises(SuiteError, match="unknown split"):
        RETAIL.generate("validation", 3)
    with pytest.raises(SuiteError, match="unknown task suite"):
        get_suite("nope")
    with pytest.raises(ValueError, match="metadata.solution"):
        RETAIL.expert().reset({"id": "x"})


def test_docstring_examples_run():
    import doctest

    import agentsandbox.retail.env
    import agentsandbox.suites.coding

    for module in (agentsandbox.retail.env, agentsandbox.suites.coding):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


# -- partial credit (reward="partial") ----------------------------------------------------------

PARTIAL_WORLD = {
    "users": [{"user_id": "u1", "name": "A B", "email": "a@b.c", "address": "1 X St"}],
    "orders": [
        {
            "order_id": f"#W{k}",
            "user_id": "u1",
            "status": status,
            "address": "1 X St",
            "items": [{"item_id": f"I{k}", "name": f"thing {k}", "price": 10.0}],
        }
        for k, status in ((1, "pending"), (2, "pending"), (3, "pending"), (4, "delivered"))
    ],
}
CANCEL_1_AND_2 = {
    "id": "partial",
    "description": "Cancel #W1 and #W2, ordered by mistake.",
    "metadata": {
        "world": PARTIAL_WORLD,
        "solution": [
            {"tool": "cancel_order", "params": {"order_id": "#W1", "reason": "ordered by mistake"}},
            {"tool": "cancel_order", "params": {"order_id": "#W2", "reason": "ordered by mistake"}},
            {"tool": "respond", "params": {"message": "Orders #W1 and #W2 are now cancelled."}},
        ],
        "answer_contains": ["#W1", "#W2", "cancelled"],
        "answer_excludes": ["processed"],
    },
}


def partial_episode(actions):
    """Play ``actions`` under partial credit; returns each step's reward and the last info."""
    env = RetailEnv(reward="partial")
    env.reset(task=CANCEL_1_AND_2)
    rewards, ts = [], None
    for tool, params in actions:
        ts = env.step({"tool": tool, "params": params})
        rewards.append(ts.reward)
    env.close()
    return rewards, ts.info


CANCEL = "cancel_order"
MISTAKE = "ordered by mistake"


@pytest.mark.parametrize(
    ("actions", "expected_rewards", "total"),
    [
        # the solution: 4 required changes (two statuses, two reasons), then all 3 facts -> success, 1.0
        (
            [
                (CANCEL, {"order_id": "#W1", "reason": MISTAKE}),
                (CANCEL, {"order_id": "#W2", "reason": MISTAKE}),
                ("respond", {"message": "#W1 and #W2 are cancelled"}),
            ],
            [2 / 4 / 4, 2 / 4 / 4, 0.75],
            1.0,
        ),
        # half the changes (2 * 2/4 / 8 = 0.125); the answer claims what was not done: it counts nothing
        (
            [(CANCEL, {"order_id": "#W1", "reason": MISTAKE}), ("respond", {"message": "#W1 and #W2 are cancelled"})],
            [0.125, 0.0],
            0.125,
        ),
        # the right order with the wrong reason: the status is 1 of 4 changes, the reason a wrong one: (2/4 - 1) / 8 -> 0
        ([(CANCEL, {"order_id": "#W1", "reason": "no longer needed"})], [0.0], 0.0),
        # a right change, then a wrong write: the credit is given back
        (
            [(CANCEL, {"order_id": "#W1", "reason": MISTAKE}), (CANCEL, {"order_id": "#W3", "reason": MISTAKE})],
            [0.125, -0.125],
            0.0,
        ),
        # an answer naming an excluded fact counts no facts; cut off before respond keeps the state credit
        (
            [
                (CANCEL, {"order_id": "#W1", "reason": MISTAKE}),
                (CANCEL, {"order_id": "#W2", "reason": MISTAKE}),
                ("respond", {"message": "#W1, #W2 cancelled, or processed"}),
            ],
            [0.125, 0.125, 0.0],
            0.25,
        ),
        ([(CANCEL, {"order_id": "#W1", "reason": MISTAKE}), ("get_order", {"order_id": "#W2"})], [0.125, 0.0], 0.125),
        # reading only, then a bare answer: nothing changed, no fact
        ([("list_orders", {"user_id": "u1"}), ("respond", {"message": "Done."})], [0.0, 0.0], 0.0),
    ],
)
def test_partial_credit_on_hand_built_episodes(actions, expected_rewards, total):
    rewards, info = partial_episode(actions)
    assert rewards == pytest.approx(expected_rewards)
    assert sum(rewards) == pytest.approx(total)
    if actions[-1][0] == "respond":
        assert info["partial_credit"] == pytest.approx(total)
        assert info["success"] is (total == 1.0)


def test_partial_credit_cannot_be_farmed_by_undoing_and_redoing():
    """Writes that cancel out earn nothing net: change an address away and back, repeatedly."""
    task = {
        "id": "addr",
        "description": "Ship #W1 to 2 Y St.",
        "metadata": {
            "world": PARTIAL_WORLD,
            "answer_contains": ["2 Y St"],
            "solution": [
                {"tool": "change_address", "params": {"order_id": "#W1", "address": "2 Y St"}},
                {"tool": "respond", "params": {"message": "It ships to 2 Y St."}},
            ],
        },
    }
    env = RetailEnv(reward="partial")
    env.reset(task=task)
    rewards = []
    for _ in range(5):
        for address in ("2 Y St", "1 X St"):
            rewards.append(
                env.step({"tool": "change_address", "params": {"order_id": "#W1", "address": address}}).reward
            )
    rewards.append(env.step({"tool": "respond", "params": {"message": "It ships to 2 Y St."}}).reward)
    assert sum(rewards) == pytest.approx(0.0)  # the address is back at the start: the answer's fact claims a lie
    assert max(rewards) == pytest.approx(0.25)


LOOKUP_THEN_CANCEL = {
    "id": "lookup",
    "description": "I'm a@b.c; cancel my pending order #W1, ordered by mistake.",
    "metadata": {
        "world": PARTIAL_WORLD,
        "solution": [
            {"tool": "find_user_by_email", "params": {"email": "a@b.c"}},
            {"tool": "list_orders", "params": {"user_id": "u1"}},
            {"tool": CANCEL, "params": {"order_id": "#W1", "reason": MISTAKE}},
            {"tool": "respond", "params": {"message": "Order #W1 is now cancelled."}},
        ],
        "answer_contains": ["#W1", "cancelled"],
        "answer_excludes": ["#W2"],
    },
}


@pytest.mark.parametrize(
    ("actions", "expected_rewards"),
    [
        # each of the truth's two reads is half the lookups term: 1/16; the same read again earns nothing
        (
            [
                ("find_user_by_email", {"email": "A@B.C "}),
                ("find_user_by_email", {"email": "a@b.c"}),
                ("list_orders", {"user_id": "u1"}),
                (CANCEL, {"order_id": "#W1", "reason": MISTAKE}),
                ("respond", {"message": "#W1 is cancelled."}),
            ],
            [1 / 16, 0.0, 1 / 16, 2 / 8, 1 - 3 / 8],
        ),
        # a read of something else, or a read that fails, reaches no sub-goal
        (
            [
                ("get_order", {"order_id": "#W2"}),
                ("find_user_by_email", {"email": "x@y.z"}),
                ("list_orders", {"user_id": "u1"}),
            ],
            [0.0, 0.0, 1 / 16],
        ),
        # the lie: "cancelled" without the cancellation earns nothing, however well it names the facts
        (
            [("find_user_by_email", {"email": "a@b.c"}), ("respond", {"message": "Order #W1 is now cancelled."})],
            [1 / 16, 0.0],
        ),
        # all but the answer's second fact: the state is right, so the answer counts 1/2: (1 + 2 + 1/2) / 8
        (
            [
                ("find_user_by_email", {"email": "a@b.c"}),
                ("list_orders", {"user_id": "u1"}),
                (CANCEL, {"order_id": "#W1", "reason": MISTAKE}),
                ("respond", {"message": "Done with #W1."}),
            ],
            [1 / 16, 1 / 16, 2 / 8, 0.5 / 8],
        ),
    ],
)
def test_partial_credit_pays_each_sub_goal_of_the_truth_once(actions, expected_rewards):
    env = RetailEnv(reward="partial")
    env.reset(task=LOOKUP_THEN_CANCEL)
    rewards = [env.step({"tool": tool, "params": params}).reward for tool, params in actions]
    env.close()
    assert rewards == pytest.approx(expected_rewards)


@pytest.mark.parametrize("split", RETAIL.splits)
def test_partial_credit_pays_one_to_the_expert_and_less_to_every_shortcut(split):
    for task in RETAIL.generate(split, 40, seed=5):
        env = make("knowlyr/retail", reward="partial")
        env.reset(task=task)
        total = sum(env.step(a).reward for a in task["metadata"]["solution"])
        assert total == pytest.approx(1.0), task["id"]
        env.reset(task=task)
        shortcut = env.step(task["metadata"]["solution"][-1])  # the expert's words without its work
        assert shortcut.info["success"] is False or not any(
            a["tool"] in ("cancel_order", "change_address", "return_items") for a in task["metadata"]["solution"]
        )
        assert 0.0 <= shortcut.reward < 0.5 or shortcut.info["success"]


def test_an_unknown_reward_mode_is_refused():
    with pytest.raises(ValueError, match="reward must be one of outcome, partial"):
        RetailEnv(reward="dense")


def test_every_template_has_one_role_and_each_split_draws_from_its_role():
    """The roles are the suite's: demonstrated in train and test, verifier-only in the two
    ``-verifier-only`` splits, held-out in test-unseen; every task names its role."""
    roles = RETAIL.roles
    assert set(roles) == {"demonstrated", "verifier_only", "held_out"}
    named = [t for templates in roles.values() for t in templates]
    assert len(named) == len(set(named)) == len(retail_suite.TEMPLATES)
    expected = {
        "train": "demonstrated",
        "test": "demonstrated",
        "train-verifier-only": "verifier_only",
        "test-verifier-only": "verifier_only",
        "test-unseen": "held_out",
    }
    assert set(RETAIL.splits) == set(expected)
    for split, role in expected.items():
        for task in RETAIL.generate(split, 40, 3):
            assert task["metadata"]["role"] == role == RETAIL.role_of(task["metadata"]["template"]), task["id"]


def test_a_suite_without_roles_has_no_verifier_only_splits():
    coding = get_suite("coding")
    assert coding.roles == {} and "train-verifier-only" not in coding.splits
    with pytest.raises(SuiteError, match="unknown split 'train-verifier-only'"):
        coding.generate("train-verifier-only", 2, 0)
