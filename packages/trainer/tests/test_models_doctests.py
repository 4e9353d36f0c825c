"""The ``Example:`` blocks in ``agenttrainer.models`` and ``agenttrainer.acting.chat`` run as doctests."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "name",
    # modules whose examples run offline in milliseconds (the others' need model weights: +SKIP)
    ["agenttrainer.models.lora", "agenttrainer.acting.chat"],
)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
