"""knowlyr-reward depends on knowlyr-core: its errors are core's family, a missing extra included.
(That importing it checks the knowlyr-core next to it is ours is held with every other dependent
package in packages/core/tests/test_origin.py.)"""

import sys

import pytest

from agentreward import Judge, RewardEngine
from agentreward.errors import JudgeError, RewardError, TrajectoryFormatError
from knowlyrcore.clikit import exit_code_of
from knowlyrcore.errors import DataFormatError, KnowlyrError, MissingExtraError
from knowlyrcore.origin import install_command


def test_reward_errors_are_knowlyr_errors_with_their_exit_codes():
    malformed = TrajectoryFormatError("t.jsonl", 3, "must be a list", field="steps")
    assert isinstance(RewardError("x"), KnowlyrError) and isinstance(malformed, DataFormatError)
    assert str(malformed) == "t.jsonl:3: steps: must be a list" and malformed.line == 3
    assert exit_code_of(malformed) == 2 and exit_code_of(JudgeError("endpoint down")) == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_judge_without_its_sdk_stops_the_scoring_with_the_missing_extra_line(monkeypatch, provider):
    """It used to raise a JudgeError, which the judge takes for a flaky endpoint: it abstained on
    every step and the rule scores came back as if a judge had scored them."""
    monkeypatch.setitem(sys.modules, provider, None)  # what Python reads as "not installed"
    judge = Judge(model="m", provider=provider, max_retries=0)
    with pytest.raises(MissingExtraError) as raised:
        RewardEngine(judge=judge).score_record({"task": {}, "steps": [{"tool_call": {"name": "ls"}}]})
    assert (
        str(raised.value) == f"the {provider} judge needs the 'llm' extra: {install_command('knowlyr-reward', 'llm')}"
    )
    assert exit_code_of(raised.value) == 2 and judge.failures == []
