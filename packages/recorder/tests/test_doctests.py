"""The ``Example:`` blocks in knowlyr-recorder's docstrings run as doctests."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import agentrecorder

SKIP = {"agentrecorder.testing", "agentrecorder.mcp_server"}
MODULES = sorted(m.name for m in pkgutil.walk_packages(agentrecorder.__path__, "agentrecorder.") if m.name not in SKIP)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


def test_examples_exist():
    documented = [name for name in MODULES if ">>>" in (importlib.import_module(name).__doc__ or "")]
    assert len(documented) >= 8
