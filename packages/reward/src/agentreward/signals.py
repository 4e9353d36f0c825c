"""Process signals: a few numbers about a trajectory prefix that a learned scorer reads beside
the text model's state.

A frozen text model summarises a prefix by what it is about (which request, which tools), which
is what differs between task templates; whether a run is on track rests on relations between its
parts that a mean-pooled state hardly keeps: did the agent's arguments come from the request and
the results it saw, or did it make them up; did its calls fail; does its final message say
something the results never said ("your order is cancelled" when no call cancelled it). These
relations hold for any tool-use task, so a head that learns their weight on some templates can
use them on templates it never saw.

``prefix_signals(text)`` reads a text ``knowlyrcore.prefix_text.step_prefixes`` rendered (the text
the scorer reads, parsed back by ``parse_prefix``) and gives ``SIGNALS``, each in [0, 1]:

* ``grounded_last`` / ``grounded_min`` / ``grounded_mean``: of the words and ids in a call's
  arguments (alphabetic words of 4+ letters that are not function words, and tokens with a digit
  or an ``@``), the share found in the request or in an earlier result (as a substring, so that
  "orders" finds "order" and an id finds itself inside JSON); for the last step, the lowest over
  the steps, and their mean. A call with no such token counts as grounded.
* ``error_last`` / ``error_rate``: the last result is an error; the share of results that are.
* ``repeated``: some call repeats an earlier one exactly (same tool, same arguments).
* ``markup``: a call's arguments hold tool-call markup (``<tool_call>``): a model that wrote a
  call inside a message instead of making it.
* ``new_facts``: how many tokens of the last call's arguments come from a result and not from
  the request (what the agent learned and passes on), over 4, at most 1.
* ``any_result``: some call so far returned without an error.
* ``length``: the steps so far over 10, at most 1.

Text cut short by the renderer is read as it is: a token cut in half is rarely found, which
makes long arguments look a little less grounded, the same way in training and in scoring.
"""

from __future__ import annotations

import json
import re
from typing import Any

from knowlyrcore.prefix_text import parse_prefix

#: the signals, in the order ``prefix_signals`` gives them (a checkpoint records this list)
SIGNALS = (
    "grounded_last",
    "grounded_min",
    "grounded_mean",
    "error_last",
    "error_rate",
    "repeated",
    "markup",
    "new_facts",
    "any_result",
    "length",
)

_TOKEN = re.compile(r"[a-z0-9][a-z0-9_.@#'-]*[a-z0-9]|[a-z0-9]")
#: English function words and courtesies of 4+ letters: said without any evidence, so they say
#: nothing about grounding
_FUNCTION_WORDS = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "against",
        "also",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "could",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "from",
        "further",
        "have",
        "having",
        "here",
        "into",
        "just",
        "more",
        "most",
        "much",
        "must",
        "need",
        "needs",
        "only",
        "other",
        "over",
        "same",
        "should",
        "some",
        "such",
        "than",
        "that",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "under",
        "until",
        "very",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "will",
        "with",
        "would",
        "your",
        "yours",
        "yourself",
        "thank",
        "thanks",
        "please",
        "sorry",
        "hello",
        "today",
    ]
)
#: how many passed-on facts make ``new_facts`` 1; how many steps make ``length`` 1
NEW_FACTS_SCALE, LENGTH_SCALE = 4, 10


def claim_tokens(text: str) -> list[str]:
    """The tokens of ``text`` whose presence elsewhere says something: ids, numbers, emails and
    content words (lowercased)."""
    tokens = []
    for token in _TOKEN.findall(text.lower()):
        token = token.strip("#.@'_-")
        identifier = "@" in token or any(c.isdigit() for c in token)  # an id, a number, an email
        if (identifier and len(token) >= 2) or (len(token) >= 4 and token.isalpha() and token not in _FUNCTION_WORDS):
            tokens.append(token)
    return tokens


def argument_text(arguments: str) -> str:
    """The values of a call's JSON arguments joined by spaces (the keys are the tool's schema,
    not the agent's claims); the raw text when it is not JSON (cut short by the renderer)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    values: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif value is not None:
            values.append(str(value))

    walk(parsed)
    return " ".join(values)


def prefix_signals(text: str) -> list[float]:
    """``SIGNALS`` of one prefix text (all 0 for a text with no step)."""
    request, steps = parse_prefix(text)
    if not steps:
        return [0.0] * len(SIGNALS)
    request = request.lower()
    seen = request  # what the agent had read before each call
    results = ""  # what calls returned without an error
    grounded, calls = [], set()
    repeated = markup = False
    new_facts = 0
    for step in steps:
        tokens = claim_tokens(argument_text(step.arguments))
        grounded.append(sum(t in seen for t in tokens) / len(tokens) if tokens else 1.0)
        new_facts = sum(t in results and t not in request for t in tokens)
        repeated = repeated or (step.name, step.arguments) in calls
        calls.add((step.name, step.arguments))
        markup = markup or "tool_call>" in step.arguments
        seen += " " + step.result.lower()
        if not step.error:
            results += " " + step.result.lower()
    errors = [step.error for step in steps]
    return [
        grounded[-1],
        min(grounded),
        sum(grounded) / len(grounded),
        float(errors[-1]),
        sum(errors) / len(errors),
        float(repeated),
        float(markup),
        min(new_facts, NEW_FACTS_SCALE) / NEW_FACTS_SCALE,
        float(bool(results)),
        min(len(steps), LENGTH_SCALE) / LENGTH_SCALE,
    ]
