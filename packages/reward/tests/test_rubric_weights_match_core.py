"""The rubric weights live twice: knowlyr-core's built-in DomainProfiles and reward's DOMAIN_WEIGHTS
(reward stays standalone, so it cannot read core's). This test keeps the two tables equal."""

import pytest

from agentreward.rubrics import DOMAIN_WEIGHTS, RUBRICS, domain_weights

pytest.importorskip("knowlyrcore", reason="knowlyr-core is a sibling; it comes with knowlyr-reward[mcp]")
from knowlyrcore.builtin_domains import BUILTIN_DOMAINS


def test_the_same_domains_in_both_tables():
    assert sorted(DOMAIN_WEIGHTS) == sorted(BUILTIN_DOMAINS)


@pytest.mark.parametrize("domain", sorted(BUILTIN_DOMAINS))
def test_every_builtin_domain_weighs_the_rubrics_as_core_does(domain):
    core = BUILTIN_DOMAINS[domain]
    assert set(core.rubric_weights) == set(RUBRICS)
    assert DOMAIN_WEIGHTS[domain] == core.rubric_weights  # the raw table, exactly
    assert domain_weights(domain) == pytest.approx(core.normalized_weights())
