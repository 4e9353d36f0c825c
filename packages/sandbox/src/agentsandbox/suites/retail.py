"""The ``retail`` task suite: customer-service tasks on a generated shop (``knowlyr/retail``).

Every task carries its own small shop (``metadata.world``: 3-5 users with 1-3 orders each),
the customer's request as its description, the ground-truth tool calls
(``metadata.solution``, 2-6 calls) and the answer check: the facts the final answer must state
(``metadata.answer_contains``) and every value of their kind that is wrong in this episode
(``metadata.answer_excludes``: the statuses the order never had, the other counts and
cancellation reason, the other users' emails and addresses, the order's other items, the other
order ids, "cannot" when the request succeeds). An answer that hedges by listing candidates
names a wrong one and fails. Every task needs a tool call: no answer is in the prompt (a change
of address names the new address, but needs the write).

Templates (the number of tool calls in brackets):

========================  ==========================================================  =====  =============
template                  the customer asks to ...                                    calls  role
========================  ==========================================================  =====  =============
order_status              know an order's status                                      2      demonstrated
cancel_order              cancel an order (refused when it is no longer pending)      3-4    demonstrated
change_address            ship a pending order elsewhere                              4      demonstrated
return_item               return one item of a delivered order                        4      demonstrated
count_orders              know how many orders they have                              3      demonstrated
cancel_two                cancel two pending orders                                   6      demonstrated
cancel_reasons            know why a cancelled order was cancelled                    2      demonstrated
email_on_file             know the email on their account, giving their name          2      demonstrated
address_by_email          know the address on file, giving their email                3      demonstrated
cancel_pending_by_name    cancel their pending order, giving only their name          4      demonstrated
change_address_by_name    ship their pending order elsewhere, giving only their name  4      verifier_only
cancel_pending_by_email   cancel their pending order, giving their email              4      verifier_only
cancel_and_return         cancel one order and return an item of another              6      verifier_only
address_on_file           know the address on file, giving only their name            3      held_out
count_orders_by_name      know how many orders they have, giving only their name      3      held_out
========================  ==========================================================  =====  =============

The roles (``RETAIL.roles``; what each allows is in ``agentsandbox.suites``): the ten
*demonstrated* templates are in ``train`` and ``test``, and the expert's trajectories of them are
the SFT data. They teach three skills in some of their combinations: who the customer is (by
email, by name), which order (the id in the request, or the pending one on their order list)
and what to do with it (read, cancel, change the address, return an item). The three
*verifier-only* templates are combinations of those skills no demonstration shows: a lookup by
name with the pending order's new address, a lookup by email with the pending order's
cancellation, a cancellation and a return on two orders. They are in ``train-verifier-only`` and
``test-verifier-only`` only, checked with partial credit but never demonstrated, so they measure
what RL on a verifier teaches beyond imitation. The two *held-out* templates (``test-unseen``)
are never trained on.

Why ``cancel_pending_by_name`` is demonstrated: with no demonstrated template that picks the
pending order from the order list, two of the three compositions needed a skill nobody had shown,
and the SFT policy solved none of them in 8 samples of each of 24 tasks (pass@8 = 0, so RL had
nothing to sharpen). Demonstrating the skill once makes every verifier-only template a new
combination of demonstrated skills, which is the question: does RL on a verifier compose what
imitation learned separately?

Requests are worded by ``retail_phrasing``: ``train`` and the held-out splits use disjoint
sentence frames, verb phrases, identity clauses, reason wordings, greetings and chit-chat, with
occasional typos, so ``test`` measures the task rather than the sentences train showed.

The unseen templates use no tool that the seen ones do not also use; they combine them in
ways train never shows (look a customer up by name, then read or change their account), so
``test-unseen`` measures compositional generalisation rather than knowledge of a new tool.

``train`` and ``test`` draw names, streets, cities and products from disjoint halves of each
pool and ids of opposite parity, and seed their generators from different strings, so they
share no entity and no seed; ``train-verifier-only`` uses the train side's pools and phrasings,
``test-verifier-only`` and ``test-unseen`` the test side's.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable
from typing import Any

from agentsandbox.retail.db import CANCEL_REASONS
from agentsandbox.retail.env import SYSTEM_PROMPT
from agentsandbox.suites import SPLIT_ROLES, TaskSuite
from agentsandbox.suites.retail_phrasing import phrase

_FIRST = [
    "Ava",
    "Liam",
    "Mia",
    "Noah",
    "Zoe",
    "Ethan",
    "Ivy",
    "Lucas",
    "Chloe",
    "Mason",
    "Nora",
    "Owen",
    "Ruby",
    "Caleb",
    "Lily",
    "Felix",
    "Hazel",
    "Jonah",
    "Iris",
    "Miles",
    "Stella",
    "Hugo",
    "Alice",
    "Theo",
    "Clara",
    "Jasper",
    "Maya",
    "Rowan",
    "Elena",
    "Silas",
    "Freya",
    "Arlo",
    "Lena",
    "Ezra",
    "Naomi",
    "Milo",
    "Greta",
    "Isaac",
    "Vera",
    "Leo",
]
_LAST = [
    "Smith",
    "Garcia",
    "Chen",
    "Patel",
    "Novak",
    "Kim",
    "Rossi",
    "Muller",
    "Silva",
    "Khan",
    "Dubois",
    "Jensen",
    "Sato",
    "Lopez",
    "Ivanova",
    "Brown",
    "Okafor",
    "Nakamura",
    "Fischer",
    "Moreau",
    "Larsen",
    "Costa",
    "Singh",
    "Walsh",
    "Berg",
    "Romero",
    "Haddad",
    "Kowalski",
    "Ortiz",
    "Fontaine",
    "Weber",
    "Lund",
    "Reyes",
    "Shah",
    "Quinn",
    "Ferrari",
    "Andersen",
    "Tanaka",
    "Hughes",
    "Varga",
]
_STREETS = [
    "Oak",
    "Maple",
    "Pine",
    "Cedar",
    "Elm",
    "Birch",
    "Willow",
    "Lake",
    "Hill",
    "River",
    "Park",
    "Main",
    "Sunset",
    "Meadow",
    "Forest",
    "Spring",
    "Valley",
    "Harbor",
    "Church",
    "Mill",
]
_CITIES = [
    "Austin",
    "Denver",
    "Boston",
    "Portland",
    "Seattle",
    "Chicago",
    "Phoenix",
    "Atlanta",
    "Dallas",
    "Miami",
    "Tampa",
    "Omaha",
    "Tucson",
    "Fresno",
    "Reno",
    "Boise",
    "Mesa",
    "Akron",
    "Salem",
    "Provo",
]
_PRODUCTS = [
    "desk lamp",
    "water bottle",
    "backpack",
    "yoga mat",
    "coffee grinder",
    "bluetooth speaker",
    "office chair",
    "hiking boots",
    "wall clock",
    "tea kettle",
    "phone case",
    "wireless mouse",
    "sleeping bag",
    "cutting board",
    "rain jacket",
    "table fan",
    "bike helmet",
    "notebook set",
    "air purifier",
    "garden hose",
    "frying pan",
    "laptop stand",
    "running shoes",
    "picture frame",
]

SEEN_TEMPLATES = (
    "order_status",
    "cancel_order",
    "change_address",
    "return_item",
    "count_orders",
    "cancel_two",
    "cancel_reasons",
    "email_on_file",
    "address_by_email",
    "cancel_pending_by_name",
)
UNSEEN_TEMPLATES = ("address_on_file", "count_orders_by_name")
#: Compositions of skills the seen templates teach: checked, never demonstrated.
VERIFIER_ONLY_TEMPLATES = ("change_address_by_name", "cancel_pending_by_email", "cancel_and_return")
ROLES = {"demonstrated": SEEN_TEMPLATES, "verifier_only": VERIFIER_ONLY_TEMPLATES, "held_out": UNSEEN_TEMPLATES}


class _Pools:
    """The entity pools and id parity of one side (train, or test and test-unseen)."""

    def __init__(self, side: int):
        def half(pool: list[str]) -> list[str]:
            return pool[side::2]

        self.first, self.last = half(_FIRST), half(_LAST)
        self.streets, self.cities, self.products = half(_STREETS), half(_CITIES), half(_PRODUCTS)
        self.parity = side
        self.used: set[str] = set()  # numbers given out in the current task's world

    def number(self, rng: random.Random, digits: int) -> str:
        """A fresh id number whose parity marks the side, so train and test ids never collide."""
        low = 10 ** (digits - 1)
        while True:
            value = rng.randrange(low, 10 * low - 1)
            number = str(value - value % 2 + self.parity)
            if number not in self.used:
                self.used.add(number)
                return number

    def address(self, rng: random.Random) -> str:
        """A fresh address: its three-digit number is unique in the world, so no address equals or
        contains another and the answer check can forbid every other one."""
        return f"{self.number(rng, 3)} {rng.choice(self.streets)} St, {rng.choice(self.cities)}"


_STATUSES = ("pending", "pending", "processed", "delivered", "delivered", "cancelled")


def _world(rng: random.Random, pools: _Pools) -> dict[str, Any]:
    """A shop with 3-5 users (distinct names) and 1-3 orders each."""
    names = rng.sample([(f, last) for f in pools.first for last in pools.last], rng.randint(3, 5))
    users, orders = [], []
    for first, last in names:
        user_id = f"{first.lower()}_{last.lower()}_{pools.number(rng, 4)}"
        address = pools.address(rng)
        users.append(
            {
                "user_id": user_id,
                "name": f"{first} {last}",
                "address": address,
                "email": f"{first.lower()}.{last.lower()}{pools.number(rng, 2)}@example.com",
            }
        )
        user = users[-1]
        orders.extend(_new_order(rng, pools, user, rng.choice(_STATUSES)) for _ in range(rng.randint(1, 3)))
    return {"users": users, "orders": orders}


def _call(tool: str, **params: Any) -> dict[str, Any]:
    return {"tool": tool, "params": params}


def _request(user: dict[str, Any], identity: str | None, **slots: Any) -> dict[str, Any]:
    """What the customer's request must say (worded later by ``retail_phrasing.phrase``):
    ``identity`` is how they identify themselves (``"email_or_both"``, ``"name"``, or None when
    the task needs no lookup), ``slots`` the order ids, items, addresses and reason."""
    return {"identity": identity, "name": user["name"], "email": user["email"], **slots}


def _orders_of(world: dict[str, Any], user: dict[str, Any], status: str | None = None) -> list[dict[str, Any]]:
    return [o for o in world["orders"] if o["user_id"] == user["user_id"] and (status is None or o["status"] == status)]


def _new_order(rng: random.Random, pools: _Pools, user: dict[str, Any], status: str) -> dict[str, Any]:
    items = [
        {"item_id": f"I{pools.number(rng, 6)}", "name": p, "price": round(rng.uniform(5, 300), 2)}
        for p in rng.sample(pools.products, rng.randint(1, 3))
    ]
    order = {
        "order_id": f"#W{pools.number(rng, 7)}",
        "user_id": user["user_id"],
        "status": status,
        "address": user["address"],
        "items": items,
    }
    if status == "cancelled":
        order["cancel_reason"] = rng.choice(CANCEL_REASONS)
    return order


def _ensure_order(rng: random.Random, pools: _Pools, world: dict[str, Any], user: dict[str, Any], status: str):
    """An order of ``user`` with ``status``, adding one to the world if the user has none."""
    existing = _orders_of(world, user, status)
    if existing:
        return rng.choice(existing)
    order = _new_order(rng, pools, user, status)
    world["orders"].append(order)
    return order


#: Order statuses. An answer that names a status the order never had is wrong even if it also
#: names the true one, so listing every status cannot game the answer check.
STATUSES = ("pending", "processed", "delivered", "cancelled")
#: How the expert refuses; an answer to a request that succeeded must not say it.
REFUSAL = "cannot"


def _check(answer: str, required: list[str], *wrong: Iterable[str]) -> tuple[list[str], list[str]]:
    """The answer check of a task whose reference answer is ``answer``: the ``required`` facts,
    and as forbidden every ``wrong`` value, i.e. one the asked fact never takes in the episode
    (a value true before the request, like a cancelled order's "pending" or a moved order's old
    address, is not wrong), except one the reference itself contains (a refusal's "cannot be
    cancelled" contains "cancelled"), so the reference answer always passes."""
    text = answer.casefold()
    return required, list(dict.fromkeys(w for group in wrong for w in group if w.casefold() not in text))


def _other_statuses(*true: str) -> list[str]:
    return [s for s in STATUSES if s not in true]


def _other_orders(world: dict[str, Any], *keep: str) -> list[str]:
    """Every other order id of the world, without its "#" so "W1234567" is caught too."""
    return [o["order_id"].lstrip("#") for o in world["orders"] if o["order_id"] not in keep]


def _other_addresses(world: dict[str, Any], *right: str) -> list[str]:
    found = [u["address"] for u in world["users"]] + [o["address"] for o in world["orders"]]
    return [a for a in dict.fromkeys(found) if a not in right]


def _cancelled_check(answer: str, world: dict[str, Any], *oids: str) -> tuple[list[str], list[str]]:
    """Pending orders cancelled: "cancelled", and no status they never had, refusal or other order."""
    wrong = _other_statuses("pending", "cancelled")
    return _check(answer, ["cancelled"], wrong, [REFUSAL], _other_orders(world, *oids))


def _other_items(order: dict[str, Any], right: dict[str, Any]) -> list[str]:
    return [i["name"] for i in order["items"] if i["name"] != right["name"]]


# Each template fills (request, solution, answer_contains, answer_excludes) from the world and
# the customer; the request (see ``_request``) is worded by ``retail_phrasing``.
Template = Callable[
    [random.Random, _Pools, dict[str, Any], dict[str, Any]], tuple[dict[str, Any], list[dict], list[str], list[str]]
]


def _order_status(rng, pools, world, user):
    order = rng.choice(_orders_of(world, user))
    oid = order["order_id"]
    request = _request(user, None, oid=oid)
    answer = f"Your order {oid} is {order['status']}."
    check = _check(answer, [order["status"]], _other_statuses(order["status"]), _other_orders(world, oid))
    return request, [_call("get_order", order_id=oid), _call("respond", message=answer)], *check


def _cancel_order(rng, pools, world, user):
    pending = rng.random() < 0.7
    order = (
        _ensure_order(rng, pools, world, user, "pending")
        if pending
        else rng.choice(
            [o for o in _orders_of(world, user) if o["status"] != "pending"]
            or [_ensure_order(rng, pools, world, user, "delivered")]
        )
    )
    oid, reason = order["order_id"], rng.choice(CANCEL_REASONS)
    request = _request(user, "email_or_both", oid=oid, reason=reason)
    solution = [_call("find_user_by_email", email=user["email"]), _call("get_order", order_id=oid)]
    if order["status"] == "pending":
        solution.append(_call("cancel_order", order_id=oid, reason=reason))
        answer = f"Order {oid} is now cancelled."
        return request, [*solution, _call("respond", message=answer)], *_cancelled_check(answer, world, oid)
    answer = f"Order {oid} is {order['status']}, so it cannot be cancelled."
    wrong = _other_statuses(order["status"])
    check = _check(answer, [REFUSAL, order["status"]], wrong, ["now cancelled"], _other_orders(world, oid))
    return request, [*solution, _call("respond", message=answer)], *check


def _change_address(rng, pools, world, user):
    order = _ensure_order(rng, pools, world, user, "pending")
    oid, new = order["order_id"], pools.address(rng)
    request = _request(user, "email_or_both", oid=oid, new=new)
    answer = f"Order {oid} will now ship to {new}."
    solution = [
        _call("find_user_by_email", email=user["email"]),
        _call("get_order", order_id=oid),
        _call("change_address", order_id=oid, address=new),
        _call("respond", message=answer),
    ]
    wrong = _other_addresses(world, new, order["address"])
    return request, solution, *_check(answer, [new], wrong, [REFUSAL], _other_orders(world, oid))


def _return_item(rng, pools, world, user):
    order = _ensure_order(rng, pools, world, user, "delivered")
    item = rng.choice(order["items"])
    oid = order["order_id"]
    request = _request(user, "email_or_both", oid=oid, item=item["name"])
    answer = f"The {item['name']} from order {oid} is returned."
    solution = [
        _call("find_user_by_email", email=user["email"]),
        _call("get_order", order_id=oid),
        _call("return_items", order_id=oid, item_ids=[item["item_id"]]),
        _call("respond", message=answer),
    ]
    return (
        request,
        solution,
        *_check(answer, ["returned"], _other_items(order, item), [REFUSAL], _other_orders(world, oid)),
    )


def _count_orders(rng, pools, world, user, lookup="email"):
    found = _find_user(user, lookup)
    count = len(_orders_of(world, user))
    request = _request(user, "email_or_both" if lookup == "email" else "name")
    noun = "order" if count == 1 else "orders"
    answer = f"You have {count} {noun}."
    solution = [found, _call("list_orders", user_id=user["user_id"]), _call("respond", message=answer)]
    wrong = [f"{k} order" for k in range(21) if k != count] + ["no order"]  # "2 order" catches "2 orders" too
    return request, solution, *_check(answer, [f"{count} {noun}"], wrong)


def _cancel_two(rng, pools, world, user):
    first = _ensure_order(rng, pools, world, user, "pending")
    others = [o for o in _orders_of(world, user, "pending") if o is not first]
    second = others[0] if others else _new_order(rng, pools, user, "pending")
    if not others:
        world["orders"].append(second)
    a, b = first["order_id"], second["order_id"]
    reason = rng.choice(CANCEL_REASONS)
    request = _request(user, "email_or_both", oid=a, oid2=b, reason=reason, plural=True)
    solution = [
        _call("find_user_by_email", email=user["email"]),
        _call("get_order", order_id=a),
        _call("cancel_order", order_id=a, reason=reason),
        _call("get_order", order_id=b),
        _call("cancel_order", order_id=b, reason=reason),
        _call("respond", message=f"Orders {a} and {b} are now cancelled."),
    ]
    return request, solution, *_cancelled_check(solution[-1]["params"]["message"], world, a, b)


def _cancel_reasons(rng, pools, world, user):
    """Why a cancelled order was cancelled: the reason is in the database, not in the prompt (the
    tool list names both reasons, so the task once needed no tool at all)."""
    order = _ensure_order(rng, pools, world, user, "cancelled")
    oid, reason = order["order_id"], order["cancel_reason"]
    answer = f"Order {oid} was cancelled with the reason {reason!r}."
    wrong = [r for r in CANCEL_REASONS if r != reason]
    check = _check(answer, [reason], wrong, _other_statuses("cancelled"), _other_orders(world, oid))
    return _request(user, None, oid=oid), [_call("get_order", order_id=oid), _call("respond", message=answer)], *check


def _email_on_file(rng, pools, world, user):
    request = _request(user, "name")
    answer = f"The email on your account is {user['email']}."
    solution = [_call("find_user_by_name", name=user["name"]), _call("respond", message=answer)]
    return request, solution, *_check(answer, [user["email"]], [u["email"] for u in world["users"] if u is not user])


def _count_orders_by_name(rng, pools, world, user):
    return _count_orders(rng, pools, world, user, lookup="name")


def _find_user(user, lookup):
    """The call finding the customer by ``lookup``: "name" or "email"."""
    if lookup == "name":
        return _call("find_user_by_name", name=user["name"])
    return _call("find_user_by_email", email=user["email"])


def _address_of(world, user, lookup, identity):
    """The address on file of a customer found by ``lookup`` (the request names them by ``identity``)."""
    answer = f"Your address on file is {user['address']}."
    solution = [_find_user(user, lookup), _call("get_user", user_id=user["user_id"]), _call("respond", message=answer)]
    check = _check(answer, [user["address"]], _other_addresses(world, user["address"]))
    return _request(user, identity), solution, *check


def _address_by_email(rng, pools, world, user):
    return _address_of(world, user, "email", "email_or_both")


def _address_on_file(rng, pools, world, user):
    return _address_of(world, user, "name", "name")


def _only_pending_order(rng, pools, world, user):
    """The customer's one pending order: any other pending order of theirs becomes processed, so
    "my pending order" names exactly one."""
    for order in _orders_of(world, user, "pending")[1:]:
        order["status"] = "processed"
    return _ensure_order(rng, pools, world, user, "pending")


def _via_order_list(user, lookup, action, answer):
    """The solution of a request naming no order id: find the customer (``lookup``: "name" or
    "email"), list their orders, then ``action``, then the answer."""
    return [
        _find_user(user, lookup),
        _call("list_orders", user_id=user["user_id"]),
        action,
        _call("respond", message=answer),
    ]


def _cancel_pending_by_name(rng, pools, world, user):
    order = _only_pending_order(rng, pools, world, user)
    oid, reason = order["order_id"], rng.choice(CANCEL_REASONS)
    answer = f"Order {oid} is now cancelled."
    solution = _via_order_list(user, "name", _call("cancel_order", order_id=oid, reason=reason), answer)
    return _request(user, "name", reason=reason), solution, *_cancelled_check(answer, world, oid)


def _change_address_by_name(rng, pools, world, user):
    order = _only_pending_order(rng, pools, world, user)
    oid, new = order["order_id"], pools.address(rng)
    answer = f"Order {oid} will now ship to {new}."
    solution = _via_order_list(user, "name", _call("change_address", order_id=oid, address=new), answer)
    check = _check(answer, [new], _other_addresses(world, new, order["address"]), [REFUSAL], _other_orders(world, oid))
    return _request(user, "name", new=new), solution, *check


def _cancel_pending_by_email(rng, pools, world, user):
    order = _only_pending_order(rng, pools, world, user)
    oid, reason = order["order_id"], rng.choice(CANCEL_REASONS)
    answer = f"Order {oid} is now cancelled."
    solution = _via_order_list(user, "email", _call("cancel_order", order_id=oid, reason=reason), answer)
    return _request(user, "email_or_both", reason=reason), solution, *_cancelled_check(answer, world, oid)


def _cancel_and_return(rng, pools, world, user):
    pending = _ensure_order(rng, pools, world, user, "pending")
    delivered = _ensure_order(rng, pools, world, user, "delivered")
    item, reason = rng.choice(delivered["items"]), rng.choice(CANCEL_REASONS)
    a, b = pending["order_id"], delivered["order_id"]
    solution = [
        _call("find_user_by_email", email=user["email"]),
        _call("get_order", order_id=a),
        _call("cancel_order", order_id=a, reason=reason),
        _call("get_order", order_id=b),
        _call("return_items", order_id=b, item_ids=[item["item_id"]]),
        _call("respond", message=f"Order {a} is now cancelled and the {item['name']} from order {b} is returned."),
    ]
    request = _request(user, "email_or_both", oid=a, oid2=b, item=item["name"], reason=reason)
    wrong = _other_statuses("pending", "cancelled", "delivered")  # only "processed": neither order ever was
    check = _check(
        solution[-1]["params"]["message"],
        ["cancelled", "returned"],
        wrong,
        [REFUSAL],
        _other_items(delivered, item),
        _other_orders(world, a, b),
    )
    return request, solution, *check


TEMPLATES: dict[str, Template] = {
    "order_status": _order_status,
    "cancel_order": _cancel_order,
    "change_address": _change_address,
    "return_item": _return_item,
    "count_orders": _count_orders,
    "cancel_two": _cancel_two,
    "cancel_reasons": _cancel_reasons,
    "email_on_file": _email_on_file,
    "address_by_email": _address_by_email,
    "address_on_file": _address_on_file,
    "cancel_pending_by_name": _cancel_pending_by_name,
    "count_orders_by_name": _count_orders_by_name,
    "change_address_by_name": _change_address_by_name,
    "cancel_pending_by_email": _cancel_pending_by_email,
    "cancel_and_return": _cancel_and_return,
}


def _entities(world: dict[str, Any]) -> list[str]:
    """Every name, email, address, id and product of a world (for split-disjointness checks)."""
    found = set()
    for user in world["users"]:
        found.update((user["user_id"], user["name"], user["email"], user["address"]))
    for order in world["orders"]:
        found.update((order["order_id"], order["address"]))
        found.update(part for item in order["items"] for part in (item["item_id"], item["name"]))
    return sorted(found)


def generate(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` retail tasks of ``split``; the same arguments always give the same tasks."""
    pools = _Pools(side=0 if split.startswith("train") else 1)
    role = SPLIT_ROLES[split]
    templates = ROLES[role]
    tasks = []
    for index in range(n):
        rng = random.Random(f"retail/{split}/{seed}/{index}")
        pools.used.clear()
        template = templates[index % len(templates)]  # round robin: every template equally often
        world = _world(rng, pools)
        user = rng.choice(world["users"])
        request, solution, answer_contains, answer_excludes = TEMPLATES[template](rng, pools, world, user)
        # worded from a stream of its own: the world and solution do not depend on the wording
        wording = random.Random(f"retail/{split}/{seed}/{index}/phrasing")
        description, phrasing = phrase(template, split, wording, request, request.pop("identity"))
        digest = hashlib.sha256(json.dumps([description, world], sort_keys=True).encode()).hexdigest()[:8]
        tasks.append(
            {
                "id": f"retail-{split}-{seed}-{index:05d}-{digest}",
                "description": description,
                "domain": "retail",
                "max_steps": len(solution) + 2,
                "metadata": {
                    "suite": "retail",
                    "split": split,
                    "template": template,
                    "role": role,
                    "world": world,
                    "solution": solution,
                    "answer_contains": answer_contains,
                    "answer_excludes": answer_excludes,
                    "phrasing": phrasing,
                    "entities": _entities(world),
                },
            }
        )
    return tasks


RETAIL = TaskSuite(
    name="retail",
    env_id="knowlyr/retail",
    description="customer service on a generated shop database (SQLite), tau-bench style",
    generator=generate,
    max_steps=10,
    system_prompt=SYSTEM_PROMPT,
    roles=ROLES,
)
