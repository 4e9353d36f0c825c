import doctest
import importlib


def test_rollout_example():
    result = doctest.testmod(importlib.import_module("trajectoryhub.rollout"))
    assert result.attempted >= 2 and result.failed == 0
