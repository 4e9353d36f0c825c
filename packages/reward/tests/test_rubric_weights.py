"""The rubric weights have one table, knowlyr-core's built-in DomainProfiles; reward reads it."""

import pytest

from agentreward.rubrics import RUBRICS, domain_weights
from knowlyrcore.builtin_domains import BUILTIN_DOMAINS


@pytest.mark.parametrize("domain", sorted(BUILTIN_DOMAINS))
def test_every_builtin_domain_weighs_the_five_rubrics_reward_scores(domain):
    assert set(BUILTIN_DOMAINS[domain].rubric_weights) == set(RUBRICS)
    assert domain_weights(domain) == pytest.approx(BUILTIN_DOMAINS[domain].normalized_weights())
    assert sum(domain_weights(domain).values()) == pytest.approx(1.0)


def test_an_unknown_domain_is_weighed_as_generic():
    assert domain_weights("no-such-domain") == domain_weights("generic") == pytest.approx(dict.fromkeys(RUBRICS, 0.2))
