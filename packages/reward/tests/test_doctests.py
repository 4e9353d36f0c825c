import doctest

import agentreward.engine


def test_engine_example():
    result = doctest.testmod(agentreward.engine)
    assert result.attempted >= 3 and result.failed == 0
