"""BFCL's AST rules (``agentsandbox.bfcl.checker``) on a perturbation corpus with hand-derived
verdicts. The function documents and answers are written in BFCL's format (several copied from
its entries: ``simple_python_0``, ``simple_python_1``, ``live_multiple_306``), so these tests
need no bfcl-eval install."""

import pytest

from agentsandbox.bfcl.checker import check, normalize


def doc(name, required, **properties):
    return {
        "name": name,
        "description": f"{name} (test)",
        "parameters": {"type": "dict", "properties": properties, "required": list(required)},
    }


def call(tool, **params):
    return {"tool": tool, "params": params}


# simple_python_0: an optional string with a default
TRIANGLE = doc(
    "calculate_triangle_area",
    ["base", "height"],
    base={"type": "integer"},
    height={"type": "integer"},
    unit={"type": "string"},
)
TRIANGLE_TRUTH = [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]
# simple_python_1: a dotted name
FACTORIAL = doc("math.factorial", ["number"], number={"type": "integer"})
FACTORIAL_TRUTH = [{"math.factorial": {"number": [5]}}]
SPEED = doc("calculate_speed", ["distance", "time"], distance={"type": "float"}, time={"type": "float"})
SPEED_TRUTH = [{"calculate_speed": {"distance": [100.0], "time": [9.5]}}]
COUNT = doc("count_items", ["n"], n={"type": "integer"})
WEATHER = doc(
    "get_weather", ["city"], city={"type": "string"}, unit={"type": "string", "enum": ["celsius", "fahrenheit"]}
)
SF = {"city": ["San Francisco, CA", "San Francisco"], "unit": ["celsius", ""]}
LA = {"city": ["Los Angeles, CA", "Los Angeles"], "unit": ["celsius", ""]}
SORT = doc(
    "sort_numbers", ["numbers"], numbers={"type": "array", "items": {"type": "integer"}}, order={"type": "string"}
)
SORT_TRUTH = [{"sort_numbers": {"numbers": [[3, 1, 2]], "order": ["ascending", ""]}}]
BOOK = doc(
    "book_room",
    ["options"],
    options={"type": "dict", "properties": {"room": {"type": "string"}, "breakfast": {"type": "boolean"}}},
)
BOOK_TRUTH = [{"book_room": {"options": [{"room": ["Single Room"], "breakfast": [True, ""]}]}}]
ORDER = doc(
    "place_order",
    ["items"],
    items={
        "type": "array",
        "items": {"type": "dict", "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}}},
    },
)
ORDER_TRUTH = [{"place_order": {"items": [[{"name": ["apple"], "qty": [2]}, {"name": ["pear"], "qty": [1, ""]}]]}}]
# live_multiple_306-131-5: BFCL stores "dontcare" for an integer (a "variable")
HOTEL = doc("Hotels_2_SearchHouse", ["where_to"], where_to={"type": "string"}, number_of_rooms={"type": "integer"})
HOTEL_TRUTH = [{"Hotels_2_SearchHouse": {"where_to": ["Austin, TX"], "number_of_rooms": ["dontcare", ""]}}]


CASES = [
    # (case, calls, ground truth, functions, success) -- each verdict derived by hand from the rules
    ("exact call", [call("calculate_triangle_area", base=10, height=5)], TRIANGLE_TRUTH, [TRIANGLE], True),
    (
        "optional given an allowed value",
        [call("calculate_triangle_area", base=10, height=5, unit="units")],
        TRIANGLE_TRUTH,
        [TRIANGLE],
        True,
    ),
    (
        "optional given another value",
        [call("calculate_triangle_area", base=10, height=5, unit="cm")],
        TRIANGLE_TRUTH,
        [TRIANGLE],
        False,
    ),
    ("wrong name", [call("calculate_circle_area", base=10, height=5)], TRIANGLE_TRUTH, [TRIANGLE], False),
    ("dotted name as documented", [call("math.factorial", number=5)], FACTORIAL_TRUTH, [FACTORIAL], True),
    ("dotted name with an underscore", [call("math_factorial", number=5)], FACTORIAL_TRUTH, [FACTORIAL], False),
    ("missing required parameter", [call("calculate_triangle_area", base=10)], TRIANGLE_TRUTH, [TRIANGLE], False),
    (
        "extra unknown parameter",
        [call("calculate_triangle_area", base=10, height=5, color="red")],
        TRIANGLE_TRUTH,
        [TRIANGLE],
        False,
    ),
    ("string for an integer", [call("math.factorial", number="5")], FACTORIAL_TRUTH, [FACTORIAL], False),
    ("boolean for an integer", [call("count_items", n=True)], [{"count_items": {"n": [1]}}], [COUNT], False),
    ("int for a float is accepted", [call("calculate_speed", distance=100, time=9.5)], SPEED_TRUTH, [SPEED], True),
    ("float for an int is refused", [call("math.factorial", number=5.0)], FACTORIAL_TRUTH, [FACTORIAL], False),
    ("wrong value", [call("math.factorial", number=6)], FACTORIAL_TRUTH, [FACTORIAL], False),
    ("any-of: first value", [call("get_weather", city="San Francisco, CA")], [{"get_weather": SF}], [WEATHER], True),
    (
        "any-of: second value",
        [call("get_weather", city="San Francisco", unit="celsius")],
        [{"get_weather": SF}],
        [WEATHER],
        True,
    ),
    ("any-of: none of them", [call("get_weather", city="SF")], [{"get_weather": SF}], [WEATHER], False),
    # string normalisation: case, spaces and , . / - _ * ^ do not count; single quotes = double
    (
        "string: case and punctuation",
        [call("get_weather", city="san francisco ca")],
        [{"get_weather": SF}],
        [WEATHER],
        True,
    ),
    ("string: hyphens and dots", [call("get_weather", city="San-Francisco.")], [{"get_weather": SF}], [WEATHER], True),
    (
        "string: quotes",
        [call("get_weather", city='"San Francisco"')],
        [{"get_weather": {"city": ["'San Francisco'"]}}],
        [WEATHER],
        True,
    ),
    (
        "string: other letters count",
        [call("get_weather", city="San Franciso")],
        [{"get_weather": SF}],
        [WEATHER],
        False,
    ),
    ("list element-wise", [call("sort_numbers", numbers=[3, 1, 2])], SORT_TRUTH, [SORT], True),
    ("list in another order", [call("sort_numbers", numbers=[1, 2, 3])], SORT_TRUTH, [SORT], False),
    ("list item of the wrong type", [call("sort_numbers", numbers=[3, 1, "2"])], SORT_TRUTH, [SORT], False),
    ("list strings normalised", [call("sort_numbers", numbers=[3, 1, 2], order="Ascending")], SORT_TRUTH, [SORT], True),
    (
        "dict with the optional key left out",
        [call("book_room", options={"room": "single room"})],
        BOOK_TRUTH,
        [BOOK],
        True,
    ),
    ("dict with a wrong value", [call("book_room", options={"room": "Double Room"})], BOOK_TRUTH, [BOOK], False),
    (
        "dict with an unknown key",
        [call("book_room", options={"room": "Single Room", "view": "sea"})],
        BOOK_TRUTH,
        [BOOK],
        False,
    ),
    (
        "list of dicts element-wise",
        [call("place_order", items=[{"name": "Apple", "qty": 2}, {"name": "pear"}])],
        ORDER_TRUTH,
        [ORDER],
        True,
    ),
    (
        "list of dicts in another order",
        [call("place_order", items=[{"name": "pear"}, {"name": "apple", "qty": 2}])],
        ORDER_TRUTH,
        [ORDER],
        False,
    ),
    (
        "ground truth's own type (a variable)",
        [call("Hotels_2_SearchHouse", where_to="Austin, TX", number_of_rooms="dontcare")],
        HOTEL_TRUTH,
        [HOTEL],
        True,
    ),
    (
        "documented type but not the variable",
        [call("Hotels_2_SearchHouse", where_to="Austin, TX", number_of_rooms=2)],
        HOTEL_TRUTH,
        [HOTEL],
        False,
    ),
    # parallel: order-free, one call per ground-truth call
    (
        "parallel in order",
        [call("get_weather", city="San Francisco"), call("get_weather", city="Los Angeles")],
        [{"get_weather": SF}, {"get_weather": LA}],
        [WEATHER],
        True,
    ),
    (
        "parallel swapped",
        [call("get_weather", city="Los Angeles"), call("get_weather", city="San Francisco")],
        [{"get_weather": SF}, {"get_weather": LA}],
        [WEATHER],
        True,
    ),
    (
        "parallel with an extra call",
        [
            call("get_weather", city="Los Angeles"),
            call("get_weather", city="San Francisco"),
            call("get_weather", city="Los Angeles"),
        ],
        [{"get_weather": SF}, {"get_weather": LA}],
        [WEATHER],
        False,
    ),
    (
        "parallel with a call missing",
        [call("get_weather", city="Los Angeles")],
        [{"get_weather": SF}, {"get_weather": LA}],
        [WEATHER],
        False,
    ),
    (
        "parallel: one call twice",
        [call("get_weather", city="Los Angeles"), call("get_weather", city="Los Angeles")],
        [{"get_weather": SF}, {"get_weather": LA}],
        [WEATHER],
        False,
    ),
    (
        "parallel multiple, swapped",
        [call("math.factorial", number=5), call("get_weather", city="San Francisco")],
        [{"get_weather": SF}, {"math.factorial": {"number": [5]}}],
        [WEATHER, FACTORIAL],
        True,
    ),
    (
        "extra call after a right one",
        [call("math.factorial", number=5), call("math.factorial", number=5)],
        FACTORIAL_TRUTH,
        [FACTORIAL],
        False,
    ),
    ("no call where one is expected", [], FACTORIAL_TRUTH, [FACTORIAL], False),
    ("irrelevance without a call", [], [], [WEATHER], True),
    ("irrelevance with a call", [call("get_weather", city="Paris")], [], [WEATHER], False),
    # BFCL decodes the whole answer; one that does not decode counts as no call (a pass here)
    (
        "irrelevance with an undecodable call",
        [{"tool": "get_weather", "params": {}, "format_error": "not JSON"}],
        [],
        [WEATHER],
        True,
    ),
    (
        "arguments that did not parse",
        [{"tool": "get_weather", "params": {}, "format_error": "not JSON"}],
        [{"get_weather": {"unit": ["celsius", ""]}}],
        [WEATHER],
        False,
    ),
]


@pytest.mark.parametrize(("calls", "truth", "functions", "success"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_perturbation_corpus(calls, truth, functions, success):
    verdict = check(calls, truth, functions)
    assert verdict.success is success, verdict.reason
    assert verdict.reason and "\n" not in verdict.reason


def test_greedy_pairing_is_not_needed():
    """A call that fits both expected calls first must not block the pairing that fits all:
    call 1 (no unit) fits SF and SF-in-celsius alike, call 2 only SF-in-celsius; BFCL's greedy
    pass gives call 1 to the first expected call and then fails, any perfect pairing passes."""
    truth = [
        {"get_weather": {"city": ["San Francisco"], "unit": ["celsius", ""]}},
        {"get_weather": {"city": ["San Francisco"], "unit": ["fahrenheit", ""]}},
    ]
    calls = [call("get_weather", city="San Francisco"), call("get_weather", city="San Francisco", unit="celsius")]
    assert check(calls, truth, [WEATHER]).success


def test_reasons_name_the_call_and_the_parameter():
    assert check([call("math.factorial", number="5")], FACTORIAL_TRUTH, [FACTORIAL]).reason == (
        "call 1 (math.factorial): parameter 'number': '5' is a string, expected integer"
    )
    assert check([call("calculate_triangle_area", base=10)], TRIANGLE_TRUTH, [TRIANGLE]).reason == (
        "call 1 (calculate_triangle_area): missing required parameter 'height'"
    )
    assert check([], FACTORIAL_TRUTH, [FACTORIAL]).reason == "0 calls made, 1 expected"
    assert check([call("get_weather", city="Paris")], [], [WEATHER]).reason.startswith("no call was expected, 1 made")
    huge = 10**5000 // 7  # a value too large to print must not break the reason
    reason = check([call("math.factorial", number=[huge])], FACTORIAL_TRUTH, [FACTORIAL]).reason
    assert "too large to print" in reason and len(reason) < 200
    reason = check([call("calculate_speed", distance=10**400, time=9.5)], SPEED_TRUTH, [SPEED]).reason
    assert reason.endswith("is too large for a float")  # not an OverflowError out of the checker


def test_partial_credit_by_hand():
    """name_score = same-name pairs / max(made, expected); param_score = the pairs' shares of
    matching parameters over the same; credit = (name + param) / 4 unless it succeeds."""
    # base right, height wrong, unit left out (optional: matches): 2 of {base, height, unit}
    verdict = check([call("calculate_triangle_area", base=10, height=6)], TRIANGLE_TRUTH, [TRIANGLE])
    assert (verdict.success, verdict.name_score, verdict.param_score) == (False, 1.0, pytest.approx(2 / 3))
    assert verdict.partial_credit == pytest.approx((1 + 2 / 3) / 4)
    # a right call and an extra one: 1 pair of 2 calls, its parameters all right
    verdict = check([call("math.factorial", number=5), call("math.factorial", number=7)], FACTORIAL_TRUTH, [FACTORIAL])
    assert (verdict.name_score, verdict.param_score, verdict.partial_credit) == (0.5, 0.5, 0.25)
    # a wrong function scores nothing; an unknown parameter counts in the share's denominator
    assert check([call("count_items", n=5)], FACTORIAL_TRUTH, [FACTORIAL, COUNT]).partial_credit == 0.0
    verdict = check([call("math.factorial", number=5, extra=1)], FACTORIAL_TRUTH, [FACTORIAL])
    assert (verdict.name_score, verdict.param_score) == (1.0, 0.5)
    assert check([call("math.factorial", number=5)], FACTORIAL_TRUTH, [FACTORIAL]).partial_credit == 1.0
    assert check([call("get_weather", city="Paris")], [], [WEATHER]).partial_credit == 0.0


def test_normalize_is_bfcls():
    assert normalize("April 1, 2024") == normalize("april 1 2024") == "april12024"
    assert normalize("a/b-c_d*e^f.g") == "abcdefg"
    assert normalize("it's") == 'it"s'
    assert normalize("Tab\tstays") == "tab\tstays"  # only the space character is dropped, as in BFCL


def test_docstring_examples_run():
    import doctest

    import agentsandbox.bfcl.checker

    result = doctest.testmod(agentsandbox.bfcl.checker)
    assert result.failed == 0 and result.attempted > 0
