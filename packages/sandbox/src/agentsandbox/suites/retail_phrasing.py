"""How retail customers word their requests: a small grammar per template, split by side.

A request is ``[greeting] [identity] request-frame [chit-chat]``: the frame is a sentence pattern
of the template with its verb (``cancel`` / ``call off`` ...), the customer's identity (name,
email or both, as the template's solution needs), the order ids, items, addresses and the reason
in words. With a small probability one word of the frame carries a typo (two letters swapped).

Every part comes in two disjoint sets: ``train`` phrasings (``train``, ``train-verifier-only``),
and ``held_out`` phrasings for ``test``, ``test-verifier-only`` and ``test-unseen``. No frame, verb phrase, identity clause, greeting, reason wording or
chit-chat of one side occurs on the other, so a policy that only learned train's sentences meets
requests it has never read, while the intent and the entities' meaning are unchanged. Identity
is given the way the solution's first lookup needs it (an email for ``find_user_by_email``, only
the name for ``find_user_by_name``, which would otherwise be a give-away).

Phrasings are drawn from their own random stream (the task's seed string plus ``/phrasing``),
so a task's world, solution and answer check do not depend on how its request is worded.
"""

from __future__ import annotations

import random
import re
import string
from typing import Any

SIDES = ("train", "held_out")

GREETINGS = {
    "train": ["", "", "Hi, ", "Hello, ", "Hey there, "],
    "held_out": ["", "", "Good morning! ", "Hi team, ", "Greetings. "],
}
CHIT_CHAT = {
    "train": ["", "", "", " Thanks!", " Thank you so much."],
    "held_out": [
        "",
        "",
        "",
        " Appreciate the help.",
        " Have a nice day!",
        " Thanks in advance, it's been a long week.",
    ],
}
#: The customer's identity: by email, by name and email, or by name alone. ``{Me}`` in a frame is
#: the clause with its first letter capitalised (the clauses never begin with an email).
IDENTITY = {
    "email": {
        "train": ["my email is {email}", "this is {email}", "I'm {email}"],
        "held_out": ["the email on my account is {email}", "you'll find me under {email}", "my login is {email}"],
    },
    "both": {
        "train": ["I'm {name} ({email})", "{name} here, email {email}"],
        "held_out": ["my name is {name} and my email is {email}", "{name} writing, account {email}"],
    },
    "name": {
        "train": ["I'm {name}", "this is {name}"],
        "held_out": ["my name is {name}", "{name} speaking"],
    },
}
#: The two cancellation reasons in the customer's words (singular and plural object).
REASONS = {
    "no longer needed": {
        "train": ["I don't need {it} anymore", "I no longer need {it}"],
        "held_out": ["I have no use for {it} now", "{it_subject} {be}n't needed any more"],
    },
    "ordered by mistake": {
        "train": ["I ordered {it} by mistake", "it was a mistake to order {it}"],
        "held_out": ["I bought {it} by accident", "I placed {it} in error"],
    },
}
#: Verb phrases by intent.
VERBS = {
    "cancel": {"train": ["cancel"], "held_out": ["call off", "void", "scrap"]},
    "return": {"train": ["return"], "held_out": ["send back", "give back"]},
    "reship": {"train": ["ship {oid} to"], "held_out": ["redirect {oid} to", "have {oid} delivered to"]},
}

# Request frames per template and side. Slots: {Me}/{me} identity, {oid}/{oid2} order ids,
# {why} the reason, {new} an address, {item} a product, {v} the template's verb phrase.
FRAMES: dict[str, dict[str, list[str]]] = {
    "order_status": {
        "train": [
            "what is the status of my order {oid}?",
            "can you tell me where my order {oid} is?",
            "{Me}. Has order {oid} shipped yet? What's its status?",
        ],
        "held_out": [
            "could you check on order {oid} for me? I'd like to know where it stands.",
            "{Me}. Any news on {oid}? Is it on its way?",
            "I placed order {oid} a while ago; what state is it in right now?",
        ],
    },
    "cancel_order": {
        "train": ["{Me}. Please {v} order {oid}, {why}.", "{Me}. {V} my order {oid} because {why}."],
        "held_out": [
            "I need you to {v} {oid} since {why}. {Me}.",
            "{Me}. Order {oid} should be {vd}: {why}.",
            "{why}, so could you {v} order {oid}? {Me}.",
        ],
    },
    "change_address": {
        "train": ["{Me}. Please {v} {new} instead.", "{Me}. Change the address of order {oid} to {new}."],
        "held_out": [
            "I moved! {Me}. Could you {v} {new}?",
            "{Me}. Order {oid} needs to go to {new} now, not my old place.",
        ],
    },
    "return_item": {
        "train": ["{Me}. I want to {v} the {item} from order {oid}.", "{Me}. Please {v} the {item} in order {oid}."],
        "held_out": [
            "I'd like to {v} the {item} from {oid}, it didn't work out. {Me}.",
            "{Me}. Can I {v} the {item} that came with order {oid}?",
        ],
    },
    "count_orders": {
        "train": ["{Me}. How many orders do I have with you?", "how many orders are on my account? {Me}."],
        "held_out": [
            "{Me}. What's the total number of orders I've placed?",
            "I lost track of my purchases. {Me}; how many orders have I got?",
        ],
    },
    "cancel_two": {
        "train": ["{Me}. Please {v} orders {oid} and {oid2}, {why}."],
        "held_out": [
            "{Me}. Both {oid} and {oid2} should be {vd}, {why}.",
            "could you {v} {oid} as well as {oid2}? {why}. {Me}.",
        ],
    },
    "cancel_reasons": {
        "train": [
            "why was my order {oid} cancelled?",
            "{Me}. What reason was recorded when order {oid} was cancelled?",
        ],
        "held_out": [
            "{Me}. I see {oid} got cancelled; on what grounds?",
            "could you look up the cancellation reason on file for order {oid}?",
        ],
    },
    "email_on_file": {
        "train": ["{Me}. Which email address is on my account?", "{Me}. What email do you have for me?"],
        "held_out": [
            "{Me}. I forgot which address I signed up with; what's my email?",
            "{Me}. Could you remind me of the e-mail you have on record?",
        ],
    },
    "address_by_email": {
        "train": ["{Me}. What address do you have on file for me?", "{Me}. Which address is on my account?"],
        "held_out": [
            "{Me}. Where do you ship my stuff to by default?",
            "{Me}. Can you read me back the postal address you've got for me?",
        ],
    },
    "cancel_pending_by_name": {
        "train": ["{Me}. Please {v} my order that is still pending, {why}.", "{Me}. {V} my pending order, {why}."],
        "held_out": [
            "{Me}. I'd like to {v} the order that hasn't shipped yet; {why}.",
            "{Me}. The one pending order on my account should be {vd}, {why}.",
        ],
    },
    # verifier-only: compositions of skills the ten above teach, never demonstrated
    # (train-verifier-only and test-verifier-only)
    "change_address_by_name": {
        "train": [
            "{Me}. My pending order should go to {new}, please update it.",
            "{Me}. Please ship my pending order to {new} instead.",
        ],
        "held_out": [
            "{Me}. I've moved to {new}; could the order I'm still waiting on go there?",
            "{Me}. Whatever I ordered that hasn't shipped yet, send it to {new} please.",
        ],
    },
    "cancel_pending_by_email": {
        "train": ["{Me}. Please {v} my pending order, {why}.", "{Me}. {V} the order that is still pending, {why}."],
        "held_out": [
            "{why}, so I need you to {v} whichever order of mine hasn't gone out yet. {Me}.",
            "{Me}. The order I placed that is still waiting to ship should be {vd}: {why}.",
        ],
    },
    "cancel_and_return": {
        "train": ["{Me}. Please {v} order {oid} because {why}, and return the {item} from order {oid2}."],
        "held_out": [
            "{Me}. Two things: {v} {oid}, {why}; and I'd like to send back the {item} that came in {oid2}.",
            "could you {v} order {oid} since {why}, and also take back the {item} from {oid2}? {Me}.",
        ],
    },
    # test-unseen only
    "count_orders_by_name": {
        "held_out": [
            "{Me}. What's the total number of orders I've placed?",
            "I lost track of my purchases. {Me}; how many orders have I got?",
        ],
    },
    "address_on_file": {
        "held_out": [
            "{Me}. Where do you ship my stuff to by default?",
            "{Me}. Can you read me back the postal address you've got for me?",
        ],
    },
}

#: Which verb each template's ``{v}`` slot takes.
TEMPLATE_VERB = {
    "cancel_order": "cancel",
    "cancel_two": "cancel",
    "cancel_pending_by_email": "cancel",
    "cancel_and_return": "cancel",
    "cancel_pending_by_name": "cancel",
    "return_item": "return",
    "change_address": "reship",
}
#: The participle of a verb phrase ("cancelled", "called off"), for frames like "should be {vd}".
PARTICIPLES = {"cancel": "cancelled", "call off": "called off", "void": "voided", "scrap": "scrapped"}

TYPO_RATE = 0.15


def side_of(split: str) -> str:
    """``train`` for the train-side splits (``train``, ``train-verifier-only``), else ``held_out``."""
    return "train" if split.startswith("train") else "held_out"


def _typo(rng: random.Random, frame: str) -> tuple[str, bool]:
    """Swap two inner letters of one literal word of ``frame`` (never inside a slot)."""
    literals = [m for m in re.finditer(r"(?<![{\w])[a-z]{5,}(?![}\w])", frame)]
    if not literals or rng.random() >= TYPO_RATE:
        return frame, False
    word = rng.choice(literals)
    i = rng.randrange(1, len(word.group()) - 2)
    text = word.group()
    swapped = text[:i] + text[i + 1] + text[i] + text[i + 2 :]
    return frame[: word.start()] + swapped + frame[word.end() :], True


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


def phrase(
    template: str, split: str, rng: random.Random, slots: dict[str, Any], identity: str | None
) -> tuple[str, dict]:
    """The request of one task, and what it was built from (``metadata.phrasing``).

    ``slots`` holds the entities (``name``, ``email``, ``oid``, ``oid2``, ``new``, ``item``) and
    ``reason`` (one of the cancellation reasons) and ``plural`` where the template uses them;
    ``identity`` is ``"email"``, ``"name"``, ``"email_or_both"`` or None (not needed)."""
    side = side_of(split)
    frames = FRAMES[template].get(side)
    if not frames:
        raise ValueError(f"template {template!r} has no {side} phrasings")
    index = rng.randrange(len(frames))
    frame, typo = _typo(rng, frames[index])
    values: dict[str, str] = {k: str(v) for k, v in slots.items() if k in ("oid", "oid2", "new", "item")}
    kind = {"email_or_both": rng.choice(["email", "both"]), None: rng.choice(["name", "both", "email"])}.get(
        identity, identity
    )
    me = rng.choice(IDENTITY[kind][side]).format(name=slots.get("name", ""), email=slots.get("email", ""))
    values["me"], values["Me"] = me, _capitalise(me)
    verb = ""
    if template in TEMPLATE_VERB:
        verb = rng.choice(VERBS[TEMPLATE_VERB[template]][side]).format(oid=slots.get("oid", ""))
        values["v"], values["V"], values["vd"] = verb, _capitalise(verb), PARTICIPLES.get(verb, verb)
    if "reason" in slots:
        plural = slots.get("plural", False)
        why = rng.choice(REASONS[slots["reason"]][side])
        values["why"] = why.format(
            it="them" if plural else "it", it_subject="they" if plural else "it", be="are" if plural else "is"
        )
    used = {name for _, name, _, _ in string.Formatter().parse(frame) if name}
    request = frame.format(**{k: values.get(k, "") for k in used})
    greeting = rng.choice(GREETINGS[side])
    if greeting.endswith(", "):  # the request goes on the greeting's sentence: lower-case, but not "I" or a name
        first = request.split(" ", 1)[0].rstrip(",.;")
        if first not in ("I", "I'm", "I'd", "I've") and first not in str(slots.get("name", "")).split():
            request = request[:1].lower() + request[1:]
    else:
        request = _capitalise(request)
    text = greeting + request + rng.choice(CHIT_CHAT[side])
    info = {
        "side": side,
        "frame": f"{template}/{side}/{index}",
        "identity": kind if "me" in used or "Me" in used else None,
        "verb": verb or None,
        "typo": typo,
    }
    return text, info
