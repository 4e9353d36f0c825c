"""``checked_number``: every number an agent or client sends passes this one check."""

from __future__ import annotations

import json
import math

import pytest

from knowlyrcore import checked_number

HUGE = json.loads("1" + "0" * 400)  # what a JSON body carrying a 401-digit integer parses to


def short_id(value):
    return "huge-int" if isinstance(value, int) and abs(value) > 10**15 else None


def timeout(value, **kw):
    return checked_number(value, "timeout", minimum=0, maximum=60, exclusive_minimum=True, **kw)


def line(value, **kw):
    return checked_number(value, "start_line", minimum=1, maximum=1000, integer=True, **kw)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1.0), (0.5, 0.5), (60, 60.0), (60.0, 60.0), (5e-324, 5e-324)],
)
def test_numbers_in_range_come_back_as_floats(value, expected):
    result = timeout(value)
    assert result == expected and type(result) is float


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (True, "timeout must be a number, got bool"),
        (False, "timeout must be a number, got bool"),
        ("5", "timeout must be a number, got str"),
        ("soon", "timeout must be a number, got str"),
        (None, "timeout must be a number, got NoneType"),
        ([5], "timeout must be a number, got list"),
        (float("nan"), "timeout must be a number, got NaN"),
        (0, "timeout must be a number above 0 and at most 60, got 0"),
        (-1e-9, "timeout must be a number above 0 and at most 60, got -1e-09"),
        (60.5, "timeout must be a number above 0 and at most 60, got 60.5"),
        (1e308, "timeout must be a number above 0 and at most 60, got 1e+308"),
        (math.inf, "timeout must be a number above 0 and at most 60, got inf"),
        (-math.inf, "timeout must be a number above 0 and at most 60, got -inf"),
        (HUGE, "timeout must be a number above 0 and at most 60, got an integer of about 401 digits"),
        (-HUGE, "timeout must be a number above 0 and at most 60, got a negative integer of about 401 digits"),
    ],
    ids=short_id,
)
def test_anything_else_is_a_value_error_naming_the_parameter(value, problem):
    with pytest.raises(ValueError) as caught:
        timeout(value)
    assert str(caught.value) == problem


@pytest.mark.parametrize("value", [61, 1e308, math.inf, HUGE, 10**5000], ids=["61", "1e308", "inf", "401d", "5001d"])
def test_clamp_cuts_anything_above_the_maximum_to_it(value):
    assert timeout(value, clamp=True) == 60.0


@pytest.mark.parametrize("value", [float("nan"), -math.inf, -HUGE, 0, True, "99"], ids=short_id)
def test_clamp_never_admits_what_is_below_the_range_or_not_a_number(value):
    with pytest.raises(ValueError, match="^timeout must be a number"):
        timeout(value, clamp=True)


def test_integers_come_back_as_int_and_whole_floats_count():
    assert line(2) == 2 and type(line(2)) is int
    assert line(2.0) == 2 and type(line(2.0)) is int  # JSON Schema's "integer" admits 2.0
    assert line(HUGE, clamp=True) == 1000 and type(line(HUGE, clamp=True)) is int
    with pytest.raises(ValueError, match=r"^start_line must be a whole number, got 1\.5$"):
        line(1.5)
    with pytest.raises(ValueError, match="^start_line must be a whole number at least 1 and at most 1000, got 0$"):
        line(0)


def test_the_range_itself_must_be_finite():
    with pytest.raises(ValueError, match="must be finite"):
        checked_number(5, "n", minimum=0, maximum=math.inf)
