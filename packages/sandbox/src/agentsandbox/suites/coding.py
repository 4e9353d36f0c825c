"""The ``coding`` task suite: fix a planted bug in a small generated Python repository.

Every task carries its whole repository in ``metadata.files``: one module (``lib.py``,
``utils.py``, ...) and a plain-assert test script run by ``python3 test_<module>.py`` (no
pytest needed in the sandbox), which fails on the planted bug and passes once it is fixed.
The description reports the symptom, never the fix; ``metadata.solution`` is the expert's
read_file -> edit_file -> run_tests -> submit. ``SandboxEnv`` writes the files into a fresh
git repository (the setup command commits them, so the trajectory's patch is the fix).

Function families and the bug kinds each one can carry (the bugs themselves, as templates over
the names a family draws, are the data file ``coding_bugs.yaml``):

==============  ===========================================  ===============================================
family          the module                                   bug kinds
==============  ===========================================  ===============================================
clamp           clamp a value to [low, high]                 operator off_by_one missing_case wrong_call
mean            arithmetic mean, 0.0 when empty              operator off_by_one missing_case wrong_call
running_total   running sums of a list                       operator off_by_one wrong_constant missing_case
count_words     count words of at least N letters            operator wrong_constant missing_case wrong_call
is_sorted       non-decreasing check                         operator off_by_one
fizzbuzz        fizzbuzz with generated divisors and words   operator off_by_one wrong_constant missing_case
discount        discounted and member prices                 operator off_by_one wrong_constant missing_case
fahrenheit      Celsius -> Fahrenheit and a reading table    operator wrong_constant missing_case wrong_call
last_n          the last k elements of a list                operator off_by_one missing_case
largest_step    largest difference between neighbours        operator off_by_one missing_case wrong_call
==============  ===========================================  ===============================================

Splits: ``train`` and ``test`` use the first eight families and every bug kind but
``wrong_call``; they draw every name (module, functions, parameters, constants' names, words)
and every key constant from disjoint halves of each pool, and seed their generators from
``coding/<split>/<seed>/<index>``, so they share no entity and no seed. ``test-unseen`` uses
the test pools and only the templates (``family/bug_kind``) ``train`` never contains: any
``wrong_call`` bug, and the ``last_n`` and ``largest_step`` families.

Example:
    >>> from agentsandbox.suites import get_suite
    >>> tasks = get_suite("coding").generate("train", 50, seed=0)
    >>> tasks[0]["metadata"]["template"], tasks[0]["test_command"]
    ('fizzbuzz/operator', 'python3 test_mathlib.py')
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from agentsandbox.suites import TaskSuite
from knowlyrcore.domain import get_domain_profile

UNSEEN_KIND = "wrong_call"
UNSEEN_FAMILIES = ("last_n", "largest_step")
SETUP = "git init -q && git add -A && git commit -qm 'initial version'"

#: role -> (train pool, test pool); ``test-unseen`` draws from the test pool.
NAMES: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {
    "module": (("lib", "utils", "helpers", "mathlib"), ("core", "funcs", "common", "toolkit")),
    "values": (("values", "numbers", "items"), ("data", "samples", "entries")),
    "clamp": (("clamp", "clip", "bound_value"), ("limit", "confine", "restrict")),
    "scalar": (("value", "x", "amount"), ("reading", "level", "quantity")),
    "bounds": (
        (("low", "high"), ("lo", "hi"), ("lower", "upper")),
        (("floor", "ceiling"), ("least", "most"), ("bottom", "top")),
    ),
    "mean": (("mean", "average", "avg"), ("arithmetic_mean", "mean_of", "average_of")),
    "running_total": (("running_total", "cumulative_sum", "prefix_sums"), ("partial_sums", "cumsum", "accumulate")),
    "accumulator": (("acc", "total"), ("running", "subtotal")),
    "totals": (("totals", "sums"), ("result", "partials")),
    "count_words": (("count_words", "word_counts", "tally_words"), ("word_frequencies", "count_terms", "term_counts")),
    "text": (("text", "sentence"), ("line", "passage")),
    "min_length_name": (("MIN_LENGTH", "MIN_LETTERS"), ("SHORTEST", "MIN_CHARS")),
    "is_sorted": (("is_sorted", "in_order"), ("is_ascending", "non_decreasing")),
    "fizzbuzz": (("fizzbuzz", "label"), ("buzz_label", "call_out")),
    "fizzbuzz_list": (("fizzbuzz_list", "labels_upto"), ("label_run", "call_sequence")),
    "words": ((("Fizz", "Buzz"), ("Ping", "Pong"), ("Tick", "Tock")), (("Zip", "Zap"), ("Bim", "Bam"), ("Foo", "Bar"))),
    "discount": (("discounted_price", "apply_discount"), ("sale_price", "price_after_discount")),
    "member_price": (("member_price", "loyalty_price"), ("club_price", "vip_price")),
    "member_discount_name": (("MEMBER_DISCOUNT", "LOYALTY_PERCENT"), ("CLUB_DISCOUNT", "VIP_PERCENT")),
    "price": (("price", "cost"), ("list_price", "base_price")),
    "percent": (("percent", "pct"), ("rate", "reduction")),
    "fahrenheit": (("to_fahrenheit", "celsius_to_fahrenheit"), ("c_to_f", "fahrenheit_of")),
    "celsius": (("to_celsius", "fahrenheit_to_celsius"), ("f_to_c", "celsius_of")),
    "table": (("fahrenheit_table", "conversion_table"), ("f_readings", "convert_all")),
    "celsius_arg": (("celsius", "deg_c"), ("temp_c", "centigrade")),
    "fahrenheit_arg": (("fahrenheit", "deg_f"), ("temp_f", "f_degrees")),
    "temps": (("readings", "temps"), ("series", "measurements")),
    "last_n": (("last_n", "tail"), ("take_last", "final_items")),
    "k": (("k", "count"), ("m", "size")),
    "largest_step": (("largest_step", "max_jump"), ("biggest_change", "widest_gap")),
}
#: key constant -> (train values, test values): disjoint ranges.
CONSTANTS: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {
    "min_length": ((2, 3, 4), (5, 6, 7)),
    "divisors": (((3, 5), (2, 5), (3, 4), (2, 7), (4, 5)), ((3, 7), (5, 7), (4, 7), (5, 6), (2, 9))),
    "member_discount": ((5, 10, 15, 20, 25), (30, 35, 40, 45, 50)),
}

DESCRIPTIONS = (
    "The test {test} fails: {symptom}. Fix {module}.py so the tests pass.",
    "Bug report: {symptom}. Find the bug in {module}.py and fix it so that `{command}` passes.",
    "`{command}` fails because {symptom}. Repair {module}.py without editing {test}.",
    "Users report that {symptom}. Fix {module}.py; the tests in {test} show the expected behaviour.",
)

TEST_RUNNER = """

def main():
    tests = [(name, test) for name, test in globals().items() if name.startswith("test_")]
    failed = 0
    for name, test in tests:
        try:
            test()
        except Exception:
            failed += 1
            print(f"FAILED {name}")
            traceback.print_exc(file=sys.stdout)
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
"""


@dataclass(frozen=True)
class Bug:
    """A planted bug: ``correct`` (a fragment of the correct module) becomes ``buggy``."""

    correct: str
    buggy: str
    symptom: str  # what the failing tests show, without the fix
    cause: str  # what is wrong, for the expert's thought


@dataclass(frozen=True)
class Program:
    """A correct module, the tests it passes, and the bugs those tests catch."""

    source: str
    exports: tuple[str, ...]  # what the tests import
    tests: dict[str, list[str]]  # test function name -> statements
    bugs: dict[str, Bug]


@functools.cache
def _bug_catalogue() -> dict[str, dict[str, dict[str, str]]]:
    # Data, not code: ten families' bugs share one shape, so they live in one table.
    return yaml.safe_load(resources.files(__package__).joinpath("coding_bugs.yaml").read_text(encoding="utf-8"))


def planted_bugs(family: str, **names: Any) -> dict[str, Bug]:
    """``family``'s bugs from ``coding_bugs.yaml``, their templates filled with the names it drew."""
    bugs = {}
    for kind, texts in _bug_catalogue()[family].items():
        try:
            bugs[kind] = Bug(**{field: text.format(**names) for field, text in texts.items()})
        except KeyError as missing:
            raise AssertionError(
                f"coding_bugs.yaml: {family}/{kind} uses {missing}, which {family}() does not pass"
            ) from None
    return bugs


class Names:
    """Draws names and constants from one side's pools, recording each as an entity."""

    def __init__(self, rng: random.Random, side: int):
        self.rng = rng
        self.side = side
        self.entities: list[str] = []

    def pick(self, role: str) -> Any:
        choice = self.rng.choice(NAMES[role][self.side])
        self.entities.extend([choice] if isinstance(choice, str) else choice)
        return choice

    def constant(self, role: str) -> Any:
        value = self.rng.choice(CONSTANTS[role][self.side])
        self.entities.append(f"{role}={','.join(map(str, value)) if isinstance(value, tuple) else value}")
        return value


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _raises(call: str, error: str) -> list[str]:
    return [
        "try:",
        f"    {call}",
        f"except {error}:",
        "    return",
        f'raise AssertionError("{call} did not raise {error}")',
    ]


# -- families ------------------------------------------------------------------------------
def clamp(n: Names) -> Program:
    rng = n.rng
    f, v, (lo, hi) = n.pick("clamp"), n.pick("scalar"), n.pick("bounds")
    low = rng.randint(-20, 10)
    high = low + rng.randint(5, 30)
    inside, below, above = rng.randint(low + 1, high - 1), low - rng.randint(1, 9), high + rng.randint(1, 9)
    source = _code(f'''
        def {f}({v}, {lo}, {hi}):
            """Return {v} limited to the closed range [{lo}, {hi}]."""
            if {lo} > {hi}:
                raise ValueError("{lo} must not exceed {hi}")
            return max({lo}, min({v}, {hi}))
    ''')
    tests = {
        "test_inside_range": [f"assert {f}({inside}, {low}, {high}) == {inside}"],
        "test_below_range": [f"assert {f}({below}, {low}, {high}) == {low}"],
        "test_above_range": [
            f"assert {f}({above}, {low}, {high}) == {high}",
            f"assert {f}({high}, {low}, {high}) == {high}",
        ],
        "test_rejects_inverted_range": _raises(f"{f}({inside}, {high}, {low})", "ValueError"),
    }
    return Program(source, (f,), tests, planted_bugs("clamp", lo=lo, hi=hi, f=f, v=v))


def mean(n: Names) -> Program:
    rng = n.rng
    f, xs = n.pick("mean"), n.pick("values")
    data = [rng.randint(-9, 30) for _ in range(rng.randint(3, 5))]
    while sum(data) % len(data) == 0 or max(data) == sum(data):
        data[0] += 1
    single = rng.randint(-50, 50)
    source = _code(f'''
        def {f}({xs}):
            """Return the arithmetic mean of {xs}, or 0.0 when it is empty."""
            if not {xs}:
                return 0.0
            return sum({xs}) / len({xs})
    ''')
    tests = {
        "test_fractional_mean": [f"assert close({f}({data}), {sum(data) / len(data)!r})"],
        "test_single_value": [f"assert {f}([{single}]) == {single}"],
        "test_empty": [f"assert {f}([]) == 0.0"],
    }
    return Program(source, (f,), tests, planted_bugs("mean", xs=xs, f=f))


def running_total(n: Names) -> Program:
    rng = n.rng
    f, xs, acc, out = n.pick("running_total"), n.pick("values"), n.pick("accumulator"), n.pick("totals")
    data = [rng.randint(1, 20) for _ in range(rng.randint(3, 6))]
    expected = [sum(data[: i + 1]) for i in range(len(data))]
    source = _code(f'''
        def {f}({xs}):
            """Return the running totals of {xs}: item i is the sum of the first i + 1 values; None counts as empty."""
            if {xs} is None:
                return []
            {out} = []
            {acc} = 0
            for i in range(len({xs})):
                {acc} = {acc} + {xs}[i]
                {out}.append({acc})
            return {out}
    ''')
    tests = {
        "test_totals": [f"assert {f}({data}) == {expected}"],
        "test_empty": [f"assert {f}([]) == []"],
        "test_none": [f"assert {f}(None) == []"],
    }
    return Program(source, (f,), tests, planted_bugs("running_total", acc=acc, xs=xs, f=f))


def _word(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("abcdefghijklmnoprstuvw") for _ in range(length))


def count_words(n: Names) -> Program:
    rng = n.rng
    f, text, const, size = n.pick("count_words"), n.pick("text"), n.pick("min_length_name"), n.constant("min_length")
    exact, short, long = _word(rng, size), _word(rng, size - 1), _word(rng, size + 2)
    sentence = f"{exact.capitalize()} {short} {long} {exact} {long.upper()}"
    wrong = rng.choice([size - 1, size + 1])
    source = _code(f'''
        {const} = {size}


        def {f}({text}):
            """Count each word of at least {const} letters in {text}, ignoring case; None counts as no text."""
            counts = {{}}
            if {text} is None:
                return counts
            for word in {text}.lower().split():
                if len(word) >= {const}:
                    counts[word] = counts.get(word, 0) + 1
            return counts
    ''')
    tests = {
        "test_counts": [f"assert {f}({sentence!r}) == { ({exact: 2, long: 2})!r}"],
        "test_empty_text": [f"assert {f}('') == {{}}"],
        "test_none": [f"assert {f}(None) == {{}}"],
    }
    return Program(
        source, (f,), tests, planted_bugs("count_words", const=const, f=f, size=size, wrong=wrong, text=text)
    )


def is_sorted(n: Names) -> Program:
    rng = n.rng
    f, xs = n.pick("is_sorted"), n.pick("values")
    ordered = sorted(rng.sample(range(-20, 40), 4))
    repeats = sorted([*ordered, rng.choice(ordered)])
    last_bad = [*ordered, ordered[-1] - rng.randint(1, 5)]
    first_bad = [ordered[1], ordered[0], *ordered[2:]]
    source = _code(f'''
        def {f}({xs}):
            """Return True when {xs} never decreases from one item to the next."""
            for i in range(len({xs}) - 1):
                if {xs}[i] > {xs}[i + 1]:
                    return False
            return True
    ''')
    tests = {
        "test_sorted_with_repeats": [f"assert {f}({repeats}) is True"],
        "test_last_pair_out_of_order": [f"assert {f}({last_bad}) is False"],
        "test_first_pair_out_of_order": [f"assert {f}({first_bad}) is False"],
        "test_short_lists": [f"assert {f}([]) is True", f"assert {f}([{ordered[0]}]) is True"],
    }
    return Program(source, (f,), tests, planted_bugs("is_sorted", xs=xs, f=f))


def fizzbuzz(n: Names) -> Program:
    rng = n.rng
    f, g, (w1, w2), (a, b) = n.pick("fizzbuzz"), n.pick("fizzbuzz_list"), n.pick("words"), n.constant("divisors")
    ab = a * b

    def label(i: int) -> str:
        return w1 + w2 if i % ab == 0 else w1 if i % a == 0 else w2 if i % b == 0 else str(i)

    both = ab * rng.randint(1, 3)
    first = a * rng.choice([j for j in range(1, 12) if j % b])
    second = b * rng.choice([j for j in range(1, 12) if j % a and (b * j) % (b + 1)])
    other = rng.choice([i for i in range(1, 60) if i % a and i % b])
    source = _code(f'''
        def {f}(n):
            """Return "{w1}{w2}" for multiples of {a} and {b}, "{w1}" for multiples of {a}, "{w2}" for multiples of {b}, else str(n)."""
            if n % {ab} == 0:
                return "{w1}{w2}"
            if n % {a} == 0:
                return "{w1}"
            if n % {b} == 0:
                return "{w2}"
            return str(n)


        def {g}(last):
            """The labels of 1 to last, inclusive."""
            return [{f}(n) for n in range(1, last + 1)]
    ''')
    tests = {
        "test_multiple_of_both": [f"assert {f}({both}) == {w1 + w2!r}"],
        "test_multiple_of_first": [f"assert {f}({first}) == {w1!r}"],
        "test_multiple_of_second": [f"assert {f}({second}) == {w2!r}"],
        "test_other_numbers": [f"assert {f}({other}) == {str(other)!r}"],
        "test_sequence": [f"assert {g}({ab}) == {[label(i) for i in range(1, ab + 1)]!r}"],
    }
    return Program(
        source, (f, g), tests, planted_bugs("fizzbuzz", a=a, f=f, g=g, b=b, next_b=b + 1, w2=w2, ab=ab, w1=w1)
    )


def discount(n: Names) -> Program:
    rng = n.rng
    f, g, const = n.pick("discount"), n.pick("member_price"), n.pick("member_discount_name")
    price, pct, rate = n.pick("price"), n.pick("percent"), n.constant("member_discount")
    wrong = rate + rng.choice([-5, 5])
    cost, member_cost = rng.randint(500, 20000) / 100, rng.randint(500, 20000) / 100
    off, too_much = rng.choice(range(5, 95, 5)), 100 + rng.randint(1, 50)
    source = _code(f'''
        {const} = {rate}


        def {f}({price}, {pct}):
            """Return {price} reduced by {pct} percent, rounded to cents; {pct} must be 0 to 100."""
            if {pct} < 0 or {pct} > 100:
                raise ValueError("{pct} must be between 0 and 100")
            return round({price} * (100 - {pct}) / 100, 2)


        def {g}({price}):
            """The price a member pays: {price} less the {rate}% member discount."""
            return {f}({price}, {const})
    ''')
    tests = {
        "test_discount": [f"assert close({f}({cost}, {off}), {round(cost * (100 - off) / 100, 2)!r})"],
        "test_full_discount": [f"assert {f}({cost}, 100) == 0.0", f"assert {f}({cost}, 0) == {cost}"],
        "test_rejects_bad_percent": _raises(f"{f}({cost}, {too_much})", "ValueError"),
        "test_member_price": [f"assert close({g}({member_cost}), {round(member_cost * (100 - rate) / 100, 2)!r})"],
    }
    return Program(
        source, (f, g), tests, planted_bugs("discount", pct=pct, f=f, const=const, rate=rate, wrong=wrong, g=g)
    )


def fahrenheit(n: Names) -> Program:
    rng = n.rng
    f, g, t = n.pick("fahrenheit"), n.pick("celsius"), n.pick("table")
    c, fa, temps = n.pick("celsius_arg"), n.pick("fahrenheit_arg"), n.pick("temps")
    one, two, three = rng.sample([i for i in range(-30, 120) if i != -40], 3)
    source = _code(f'''
        def {f}({c}):
            """Convert degrees Celsius to degrees Fahrenheit."""
            return {c} * 9 / 5 + 32


        def {g}({fa}):
            """Convert degrees Fahrenheit to degrees Celsius."""
            return ({fa} - 32) * 5 / 9


        def {t}({temps}):
            """Convert every Celsius reading in {temps} to Fahrenheit; missing readings (None) stay None."""
            return [None if {c} is None else {f}({c}) for {c} in {temps}]
    ''')
    tests = {
        "test_freezing_and_boiling": [f"assert close({f}(0), 32)", f"assert close({f}(100), 212)"],
        "test_conversion": [f"assert close({f}({one}), {one * 9 / 5 + 32!r})"],
        "test_round_trip": [f"assert close({g}(212), 100)", f"assert close({g}({f}({two})), {two})"],
        "test_table": [
            f"converted = {t}([{one}, None, {three}])",
            "assert converted[1] is None",
            f"assert close(converted[0], {one * 9 / 5 + 32!r}) and close(converted[2], {three * 9 / 5 + 32!r})",
        ],
    }
    return Program(source, (f, g, t), tests, planted_bugs("fahrenheit", c=c, f=f, t=t, g=g))


def last_n(n: Names) -> Program:
    rng = n.rng
    f, xs, k = n.pick("last_n"), n.pick("values"), n.pick("k")
    data = rng.sample(range(1, 60), rng.randint(4, 7))
    take = rng.randint(2, len(data) - 1)
    source = _code(f'''
        def {f}({xs}, {k}):
            """Return the last {k} items of {xs}: all of them if {k} exceeds its length, none if {k} is zero or negative."""
            if {k} <= 0:
                return []
            return {xs}[-{k}:]
    ''')
    tests = {
        "test_last_items": [f"assert {f}({data}, {take}) == {data[-take:]}", f"assert {f}({data}, 1) == {data[-1:]}"],
        "test_more_than_length": [f"assert {f}({data}, {len(data) + 3}) == {data}"],
        "test_zero": [f"assert {f}({data}, 0) == []"],
        "test_negative": [f"assert {f}({data}, -2) == []"],
    }
    return Program(source, (f,), tests, planted_bugs("last_n", k=k, f=f))


def largest_step(n: Names) -> Program:
    rng = n.rng
    f, xs = n.pick("largest_step"), n.pick("values")
    big = rng.randint(15, 30)
    steps = [big, *rng.sample(range(1, 14), rng.randint(2, 4))]  # distinct sizes, the largest first
    steps = [s * rng.choice([-1, 1]) for s in steps]
    start = rng.randint(100, 150)  # every value stays positive, so |x - y| < x + y
    data = [start]
    for s in steps:
        data.append(data[-1] + s)
    later = [data[0], data[0] + steps[1], data[0] + steps[1] + steps[0]]
    source = _code(f'''
        def {f}({xs}):
            """Return the largest absolute difference between neighbouring values, or 0 for fewer than two values."""
            if len({xs}) < 2:
                return 0
            return max(abs({xs}[i] - {xs}[i - 1]) for i in range(1, len({xs})))
    ''')
    tests = {
        "test_first_step_largest": [f"assert {f}({data}) == {big}"],
        "test_later_step_largest": [f"assert {f}({later}) == {big}"],
        "test_short_lists": [f"assert {f}([]) == 0", f"assert {f}([{start}]) == 0"],
    }
    return Program(source, (f,), tests, planted_bugs("largest_step", xs=xs, f=f))


FAMILIES: dict[str, Callable[[Names], Program]] = {
    "clamp": clamp,
    "mean": mean,
    "running_total": running_total,
    "count_words": count_words,
    "is_sorted": is_sorted,
    "fizzbuzz": fizzbuzz,
    "discount": discount,
    "fahrenheit": fahrenheit,
    "last_n": last_n,
    "largest_step": largest_step,
}
#: Every ``family/bug_kind`` (the bug kinds of a family do not depend on its random draws).
TEMPLATES = tuple(
    f"{name}/{kind}" for name, build in FAMILIES.items() for kind in build(Names(random.Random(0), 0)).bugs
)
UNSEEN_TEMPLATES = tuple(t for t in TEMPLATES if t.split("/")[0] in UNSEEN_FAMILIES or t.endswith("/" + UNSEEN_KIND))
SEEN_TEMPLATES = tuple(t for t in TEMPLATES if t not in UNSEEN_TEMPLATES)


def solution_edit(buggy: str, fixed: str) -> tuple[str, str]:
    """The smallest whole-line ``(old_str, new_str)`` that turns ``buggy`` into ``fixed``.

    ``old_str`` is widened by neighbouring lines (the next one first) until it is non-empty
    and occurs exactly once, as ``edit_file`` requires.
    """
    old_lines, new_lines = buggy.splitlines(keepends=True), fixed.splitlines(keepends=True)
    start = 0
    while start < min(len(old_lines), len(new_lines)) and old_lines[start] == new_lines[start]:
        start += 1
    shared_tail = 0
    while (
        shared_tail < min(len(old_lines), len(new_lines)) - start
        and old_lines[-1 - shared_tail] == new_lines[-1 - shared_tail]
    ):
        shared_tail += 1
    old_end, new_end = len(old_lines) - shared_tail, len(new_lines) - shared_tail
    while True:
        old = "".join(old_lines[start:old_end])
        if old and buggy.count(old) == 1:
            return old, "".join(new_lines[start:new_end])
        if old_end < len(old_lines):
            old_end, new_end = old_end + 1, new_end + 1
        else:
            start -= 1


def test_script(module: str, program: Program) -> str:
    """The plain-assert test script: runs every ``test_*``, prints "N passed, M failed"."""
    header = _code(f'''
        """Tests for {module}.py: `python3 test_{module}.py` exits with 0 when every test passes."""

        import sys
        import traceback

        from {module} import {", ".join(program.exports)}


        def close(a, b):
            return abs(a - b) < 1e-6
    ''')
    tests = "".join(
        f"\n\ndef {name}():\n" + "".join(f"    {line}\n" for line in body) for name, body in program.tests.items()
    )
    return header + tests + TEST_RUNNER


def make_task(split: str, seed: int, index: int, template: str) -> dict[str, Any]:
    """Task ``index`` of ``generate(split, ..., seed)``, built from ``template``."""
    rng = random.Random(f"coding/{split}/{seed}/{index}")
    names = Names(rng, side=0 if split == "train" else 1)
    family, kind = template.split("/")
    module = names.pick("module")
    program = FAMILIES[family](names)
    bug = program.bugs[kind]
    if program.source.count(bug.correct) != 1:
        raise AssertionError(f"{template}: the bug's fragment must occur once in the module: {bug.correct!r}")
    path, test_path = f"{module}.py", f"test_{module}.py"
    files = {path: program.source.replace(bug.correct, bug.buggy, 1), test_path: test_script(module, program)}
    command = f"python3 {test_path}"
    description = rng.choice(DESCRIPTIONS).format(test=test_path, symptom=bug.symptom, module=module, command=command)
    old, new = solution_edit(files[path], program.source)
    solution = [
        {"tool": "read_file", "params": {"path": path}, "thought": f"Read {path} to find why {test_path} fails."},
        {
            "tool": "edit_file",
            "params": {"path": path, "old_str": old, "new_str": new},
            "thought": f"Found it: {bug.cause}.",
        },
        {"tool": "run_tests", "params": {}, "thought": "Run the tests to check the fix."},
        {
            "tool": "submit",
            "params": {"summary": f"Fixed {path}; the bug was that {bug.cause}."},
            "thought": "The tests pass.",
        },
    ]
    digest = hashlib.sha256(json.dumps([split, seed, index, description, files]).encode()).hexdigest()[:8]
    return {
        "id": f"coding-{split}-{index:05d}-{digest}",
        "description": description,
        "domain": "coding",
        "setup_commands": [SETUP],
        "test_command": command,
        "max_steps": CODING_MAX_STEPS,
        "metadata": {
            "suite": "coding",
            "split": split,
            "template": template,
            "family": family,
            "bug_kind": kind,
            "files": files,
            "protected_paths": [test_path],
            "solution": solution,
            "entities": sorted(set(names.entities)),
        },
    }


def generate(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` coding tasks of ``split``; the same arguments always give the same tasks.

    Templates come round robin in an order shuffled per ``(split, seed)``, so any
    ``len(templates)`` consecutive tasks cover every template once.
    """
    templates = list(UNSEEN_TEMPLATES if split == "test-unseen" else SEEN_TEMPLATES)
    random.Random(f"coding/{split}/{seed}").shuffle(templates)
    return [make_task(split, seed, index, templates[index % len(templates)]) for index in range(n)]


CODING_MAX_STEPS = 10
SYSTEM_PROMPT = (
    "You fix bugs in a small Python repository. Use one tool per turn: read the code, edit it, run the tests, "
    "and finish with submit once they pass.\n"
    "Tools: "
    + "; ".join(f"{t.name}({', '.join(t.parameters['properties'])})" for t in get_domain_profile("coding").tools)
    + "."
)

CODING = TaskSuite(
    name="coding",
    env_id="knowlyr/sandbox",
    description="fix a planted bug in a small generated Python repository until its tests pass (SWE-bench style)",
    generator=generate,
    max_steps=CODING_MAX_STEPS,
    system_prompt=SYSTEM_PROMPT,
)
