"""``checked_number``: the one check for a number that comes from an agent, a task or a client.

JSON puts no bound on numbers: ``json.loads("1" + "0" * 400)`` is a 401-digit ``int`` that
``float()`` refuses with ``OverflowError``, ``1e999`` parses as infinity, and a schema's
``"integer"`` admits ``2.0``, which no slice or ``range`` takes. A tool that converts such a value
itself raises out of ``step``; this function turns every one of them into a ``ValueError`` that
names the parameter, or into a number the caller can use as it is.

    >>> checked_number(10**400, "timeout", minimum=0, maximum=60, exclusive_minimum=True, clamp=True)
    60.0
    >>> checked_number(2.0, "start_line", minimum=1, maximum=100, integer=True)
    2
    >>> checked_number(True, "top_k", minimum=1, maximum=10)
    Traceback (most recent call last):
    ...
    ValueError: top_k must be a number, got bool
"""

from __future__ import annotations

import math


def checked_number(
    value: object,
    name: str,
    *,
    minimum: float,
    maximum: float,
    exclusive_minimum: bool = False,
    clamp: bool = False,
    integer: bool = False,
) -> float | int:
    """``value`` as a finite number between ``minimum`` and ``maximum``, else ``ValueError``.

    Refused: bools (JSON ``true`` is not 1), strings and anything else that is not an ``int`` or
    ``float``; NaN; values outside the range, infinities and integers too large for a float
    included. With ``clamp`` a value above ``maximum`` becomes ``maximum`` instead (an agent asking
    for more than it may have gets the most it may have). With ``integer`` the value must be whole
    (``3.0`` is, as in JSON Schema) and comes back as an ``int``; otherwise as a ``float``.
    """
    if not -math.inf < minimum <= maximum < math.inf:
        raise ValueError(f"{name}: the range [{minimum}, {maximum}] must be finite and not empty")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}")
    if value != value:  # NaN; int/float comparisons below are exact, so a huge int never overflows
        raise ValueError(f"{name} must be a number, got NaN")
    if clamp and value > maximum:
        value = maximum
    below = value <= minimum if exclusive_minimum else value < minimum
    if below or value > maximum:
        low = f"above {_bound(minimum)}" if exclusive_minimum else f"at least {_bound(minimum)}"
        kind = "whole number" if integer else "number"
        raise ValueError(f"{name} must be a {kind} {low} and at most {_bound(maximum)}, got {_shown(value)}")
    if not integer:
        return float(value)
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(value)


def _bound(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))


def _shown(value: float) -> str:
    # A 4,000-digit integer in an error message (or str() refusing one past 4,300 digits) helps nobody.
    if isinstance(value, int) and abs(value) >= 10**15:
        article = "a negative" if value < 0 else "an"
        return f"{article} integer of about {math.floor(math.log10(abs(value))) + 1} digits"
    return repr(value)
