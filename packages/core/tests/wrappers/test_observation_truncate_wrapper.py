import pytest

from knowlyrcore import AgentEnv, TimeStep
from knowlyrcore.wrappers import ObservationTruncateWrapper


class Loud(AgentEnv):
    def reset(self, *, task=None, seed=None):
        return TimeStep("H" * 50 + "T" * 50)

    def step(self, action):
        return TimeStep({"structured": True})


def test_short_observations_pass_untouched():
    env = ObservationTruncateWrapper(Loud(), max_chars=1000)
    ts = env.reset()
    assert ts.observation == "H" * 50 + "T" * 50 and "observation_truncated" not in ts.info


def test_keep_both_ends():
    ts = ObservationTruncateWrapper(Loud(), max_chars=20).reset()
    head, marker, tail = ts.observation.split("\n")
    assert head == "H" * 10 and tail == "T" * 10
    assert marker == "... [80 characters truncated]"
    assert ts.info["observation_truncated"] == 100


def test_keep_head_or_tail():
    assert ObservationTruncateWrapper(Loud(), max_chars=10, keep="head").reset().observation.startswith("H" * 10 + "\n")
    assert ObservationTruncateWrapper(Loud(), max_chars=10, keep="tail").reset().observation.endswith("\n" + "T" * 10)


def test_non_text_observations_are_left_alone():
    env = ObservationTruncateWrapper(Loud(), max_chars=1)
    env.reset()
    assert env.step({"tool": "x", "params": {}}).observation == {"structured": True}


@pytest.mark.parametrize(("kwargs", "message"), [({"max_chars": 0}, "max_chars"), ({"keep": "middle"}, "keep")])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ObservationTruncateWrapper(Loud(), **kwargs)
