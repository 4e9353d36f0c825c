"""The `Example:` blocks in knowlyr-core's docstrings run as doctests."""

import doctest
import importlib
import pkgutil

import pytest

import knowlyrcore
from knowlyrcore.testing import require_module

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(knowlyrcore.__path__, "knowlyrcore.") if m.name != "knowlyrcore.testing"
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, clean_registry):
    if name == "knowlyrcore.gymnasium_adapter":
        require_module("gymnasium", "the gymnasium adapter needs gymnasium (knowlyr-core[gymnasium], in [dev])")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


def test_examples_exist():
    documented = [name for name in MODULES if ">>>" in (importlib.import_module(name).__doc__ or "")]
    assert len(documented) >= 8
