"""BFCL's AST rules: are a model's function calls the ones a BFCL entry asks for?

Written from BFCL's documented rules (its evaluation README and blog posts), with the corner
cases settled as its Python checker settles them so the verdicts agree:

* **Calls.** There must be exactly as many calls as ground-truth calls, and each ground-truth
  call must be matched by a distinct call, in any order (parallel categories). Simple and
  multiple categories are the case of one call. An irrelevance entry (no ground truth) is right
  when the model calls nothing. (BFCL pairs parallel calls greedily, first come first served;
  here any perfect pairing counts, which differs only when one call could fill two slots.)
* **Name.** The call names the function as the entry documents it (``math.factorial`` with its
  dot: the environment offers the name as given).
* **Parameters.** Every parameter the document marks ``required`` is given; no parameter is given
  that the document or the ground truth does not know; a ground-truth parameter left out must
  list ``""`` among its allowed values (that marks it optional).
* **Types.** A value must have the documented type (``string``, ``integer``, ``float``,
  ``boolean``, ``array``/``tuple`` (a list), ``dict``; ``any`` is checked as a string, as BFCL
  does). An integer is accepted for a ``float`` (converted), never a float for an ``integer``,
  and ``true`` is no integer. A value of the ground truth's own type is accepted even when the
  document says otherwise (BFCL stores some values as "variables", e.g. ``"dontcare"`` for an
  integer) and is then compared as it is. A list's items must have the documented item type, or
  the type of an allowed list's items (no int-for-float here, as in BFCL).
* **Values.** The value must be one of the allowed values. Strings compare after BFCL's
  normalisation: lower-cased, without spaces and ``, . / - _ * ^``, single quotes as double
  (``"April 1, 2024"`` = ``"april 1 2024"``); so do the strings of a list (top level) and of a
  dict's values. A dict matches an allowed dict when each of its keys is allowed with an allowed
  value and each allowed key it leaves out is optional; a list of dicts matches element-wise.
  An empty list stands for an omitted optional list (BFCL reads ``""`` as an empty list).

``check`` returns a ``Verdict``: success, the first reason a call failed, and partial-credit
components for RL rewards: ``name_score``, the share of ground-truth calls paired with a call of
the same name, and ``param_score``, the share of their parameters that check out (pairs chosen
best first; both over ``max(calls made, calls expected)``, so an extra call costs credit).

Examples:
    >>> doc = [{"name": "math.factorial", "description": "n!", "parameters": {"type": "dict",
    ...         "properties": {"number": {"type": "integer"}}, "required": ["number"]}}]
    >>> truth = [{"math.factorial": {"number": [5]}}]
    >>> check([{"tool": "math.factorial", "params": {"number": 5}}], truth, doc).success
    True
    >>> verdict = check([{"tool": "math.factorial", "params": {"number": 5.0}}], truth, doc)
    >>> verdict.success, verdict.reason, verdict.partial_credit
    (False, "call 1 (math.factorial): parameter 'number': 5.0 is a float, expected integer", 0.25)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: BFCL's types as Python types; ``any`` is checked as a string, as BFCL's checker does.
PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a float",
    bool: "a boolean",
    list: "a list",
    dict: "a dict",
    type(None): "null",
}
_IGNORED = re.compile(r"[ ,./\-_*^]")
_SHOW_CHARS = 60


def normalize(text: str) -> str:
    """BFCL's string normalisation: ``"April 1, 2024"`` and ``"april 1 2024"`` compare equal.

    >>> normalize("New York, NY") == normalize("new-york ny")
    True
    """
    return _IGNORED.sub("", text).lower().replace("'", '"')


def show_value(value: Any) -> str:
    """A short, always printable rendering of a policy's value (huge ints and deep nesting too)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} too large to print"
    return text if len(text) <= _SHOW_CHARS else text[: _SHOW_CHARS - 3] + "..."


def _answer_type(allowed: list[Any]) -> type | None:
    """The type of the first allowed value that is not ``""`` (the optional marker)."""
    return next((type(a) for a in allowed if a != ""), None)


def _norm(value: Any) -> Any:
    return normalize(value) if type(value) is str else value


def _dict_matches(value: dict[str, Any], allowed: dict[str, list[Any]]) -> bool:
    for key, item in value.items():
        if key not in allowed or _norm(item) not in [_norm(a) for a in allowed[key]]:
            return False
    return all(key in value or "" in options for key, options in allowed.items())


def _items_typed(value: list[Any], item_type: type, allowed: list[Any]) -> bool:
    """BFCL's one-level item check: every item has the documented item type or the type of one
    allowed list's items; an allowed ``""`` (optional) lets any items through."""
    for option in allowed:
        if type(option) is not list:
            return True
        option_type = _answer_type(option)
        if all(type(item) is item_type or type(item) is option_type for item in value):
            return True
    return False


def _value_problem(value: Any, allowed: list[Any], schema: dict[str, Any]) -> str | None:
    """Why ``value`` is not an allowed value of a parameter documented by ``schema``, or None."""
    kind = schema.get("type")
    expected = PYTHON_TYPES.get(kind)
    if kind == "float" and type(value) is int:
        try:
            value = float(value)
        except OverflowError:  # an integer past 1e308, from a JSON decoder
            return f"{show_value(value)} is too large for a float"
    answer_type = _answer_type(allowed)
    if type(value) is expected:
        as_variable = answer_type is not None and answer_type is not expected
    elif answer_type is not None and type(value) is answer_type:
        as_variable = True
    else:
        return f"{show_value(value)} is {_TYPE_NAMES.get(type(value), type(value).__name__)}, expected {kind}"
    if as_variable:
        return None if value in allowed else f"{show_value(value)} is not one of the allowed values"
    item_type = PYTHON_TYPES.get((schema.get("items") or {}).get("type"))
    if expected is list and item_type is not None and not _items_typed(value, item_type, allowed):
        return f"{show_value(value)}: an item is not {_TYPE_NAMES.get(item_type, item_type.__name__)}"
    if expected is dict:
        ok = any(type(a) is dict and _dict_matches(value, a) for a in allowed)
    elif expected is list and item_type is dict:
        lists = [[] if a == "" else a for a in allowed if type(a) is list or a == ""]
        ok = any(
            len(value) == len(a)
            and all(type(v) is dict and type(d) is dict and _dict_matches(v, d) for v, d in zip(value, a))
            for a in lists
        )
    elif expected is str:
        ok = normalize(value) in [normalize(a) for a in allowed if type(a) is str]
    elif expected is list:
        lists = [[] if a == "" else a for a in allowed if type(a) is list or a == ""]
        ok = [_norm(v) for v in value] in [[_norm(v) for v in a] for a in lists]
    else:
        ok = value in allowed
    return None if ok else f"{show_value(value)} is not one of the allowed values"


def compare_call(
    call: dict[str, Any], name: str, allowed: dict[str, list[Any]], function: dict[str, Any]
) -> tuple[list[str], float]:
    """Compare one call ``{"tool", "params"}`` with one ground-truth call (``name``: ``allowed``
    values per parameter) of the function documented by ``function``: the problems (none when
    it matches) and the share of parameters that check out (0 for another function)."""
    if call.get("tool") != name:
        return [f"calls {show_value(call.get('tool'))}, expected {name}"], 0.0
    if call.get("format_error"):
        return [f"its arguments did not parse ({call['format_error'][:_SHOW_CHARS]})"], 0.0
    params = call.get("params") or {}
    documented = function["parameters"].get("properties", {})
    required = function["parameters"].get("required", [])
    missing = [f"missing required parameter {p!r}" for p in required if p not in params]
    wrong, left_out, matched = [], [], 0
    for key, value in params.items():
        if key not in documented or key not in allowed:
            wrong.append(f"unexpected parameter {show_value(key)}")
        elif problem := _value_problem(value, allowed[key], documented[key]):
            wrong.append(f"parameter {key!r}: {problem}")
        else:
            matched += 1
    for key, options in allowed.items():
        if key not in params and key not in required:
            if "" in options:
                matched += 1
            else:
                left_out.append(f"parameter {key!r} left out but not optional")
    keys = {*allowed, *required, *params}
    problems = missing + wrong + left_out  # in the order BFCL reports them
    return problems, matched / len(keys) if keys else 1.0


@dataclass(frozen=True)
class Verdict:
    """The checker's answer: ``success``, the first ``reason`` it failed (or why it passed), and
    the partial-credit components ``name_score`` and ``param_score`` (each in [0, 1])."""

    success: bool
    reason: str
    name_score: float = 0.0
    param_score: float = 0.0

    @property
    def partial_credit(self) -> float:
        """1 on success, else ``(name_score + param_score) / 4`` (at most 0.5: partial credit
        never pays as much as getting it right)."""
        return 1.0 if self.success else (self.name_score + self.param_score) / 4


def _perfect_pairing(fits: list[list[bool]]) -> list[int | None]:
    """For each ground-truth call, the call paired with it in a pairing that fills as many as
    possible (augmenting paths; calls are few)."""
    owner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for j, fit in enumerate(fits[i]):
            if fit and j not in seen:
                seen.add(j)
                if j not in owner or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(fits)):
        place(i, set())
    pairs: list[int | None] = [None] * len(fits)
    for j, i in owner.items():
        pairs[i] = j
    return pairs


def check(
    calls: list[dict[str, Any]], ground_truth: list[dict[str, dict[str, list[Any]]]], functions: list[dict[str, Any]]
) -> Verdict:
    """Judge ``calls`` (``{"tool", "params"}`` each, in the order made) against a BFCL entry's
    ``ground_truth`` (empty for irrelevance) and its ``functions`` (the documents)."""
    if not ground_truth:
        if any(call.get("format_error") for call in calls):
            # BFCL's relevance rule: an answer that does not decode into calls counts as no call
            return Verdict(True, "no call decodes (BFCL counts an undecodable answer as no call)")
        if calls:
            return Verdict(
                False, f"no call was expected, {len(calls)} made (first: {show_value(calls[0].get('tool'))})"
            )
        return Verdict(True, "no call, as expected")
    docs = {f["name"]: f for f in functions}
    expected = [next(iter(c.items())) for c in ground_truth]
    results = [[compare_call(call, name, allowed, docs[name]) for call in calls] for name, allowed in expected]
    scale = max(len(calls), len(expected))
    # partial credit: pair same-name calls best first
    candidates = sorted(
        (-fraction, i, j)
        for i, row in enumerate(results)
        for j, (_, fraction) in enumerate(row)
        if calls[j].get("tool") == expected[i][0]
    )
    used_i: set[int] = set()
    used_j: set[int] = set()
    param_total = 0.0
    for negative, i, j in candidates:
        if i not in used_i and j not in used_j:
            used_i.add(i)
            used_j.add(j)
            param_total -= negative
    name_score, param_score = len(used_i) / scale, param_total / scale
    if len(calls) != len(expected):
        reason = f"{len(calls)} calls made, {len(expected)} expected"
        return Verdict(False, reason, name_score, param_score)
    pairs = _perfect_pairing([[not problems for problems, _ in row] for row in results])
    for i, j in enumerate(pairs):
        if j is None:
            name = expected[i][0]
            wrong = [k for k, call in enumerate(calls) if call.get("tool") == name and results[i][k][0]]
            if wrong:
                reason = f"call {wrong[0] + 1} ({name}): {results[i][wrong[0]][0][0]}"
            else:  # no call to it, or only calls that another expected call needs
                reason = f"no call left for expected call {i + 1} ({name})"
            return Verdict(False, reason, name_score, param_score)
    return Verdict(True, "every call matches", name_score, param_score)
