"""Every reward layer passes the standard suite (agentreward.testing.LayerConformance).

The judge is not here: the unit tests only ever talk to a scripted endpoint (test_judge.py),
which replays canned replies rather than judging. The judge runs against real served models in
tests/integration/test_reward_judge_served_model.py.
"""

import pytest

from agentreward import Calibrator, RewardEngine
from agentreward.testing import LayerConformance


class TestRules(LayerConformance):
    def make_engine(self):
        return RewardEngine()


class TestRulesSeed003WithConversationRules(LayerConformance):
    def make_engine(self):
        return RewardEngine(preset="seed-003", conversation_rules=True)


class TestRulesAndCalibration(LayerConformance):
    def make_engine(self):
        # fitted on six labelled steps: redundancy matters, the rest barely
        rubric_scores = [
            {
                "goal_progress": g,
                "tool_selection": 1.0,
                "param_correctness": p,
                "info_utilization": i,
                "non_redundancy": r,
            }
            for g, p, i, r in [
                (0.9, 1, 1, 1),
                (0.5, 1, 0.5, 1),
                (0, 1, 1, 0),
                (0.2, 0.3, 1, 1),
                (0.9, 1, 0, 1),
                (0, 0, 0, 0),
            ]
        ]
        calibrator = Calibrator.fit(rubric_scores, [0.9, 0.7, 0.1, 0.5, 0.8, 0.0])
        return RewardEngine(layers=("rules", "calibration"), calibrator=calibrator)


@pytest.fixture(scope="module")
def prm_checkpoint(build_prm, tmp_path_factory):
    # a random head: each prefix gets its own value, so order, labels and leaks would show
    return build_prm(tmp_path_factory.mktemp("prm"), bias=0.3, weight_std=2.0)


class TestLearned(LayerConformance):
    @pytest.fixture(autouse=True)
    def _checkpoint(self, prm_checkpoint):
        self.prm = prm_checkpoint

    def make_engine(self):
        return RewardEngine(layers=("learned",), prm=self.prm)


class TestRulesAndLearned(TestLearned):
    def make_engine(self):
        return RewardEngine(layers=("rules", "learned"), prm=self.prm)


@pytest.fixture(scope="module")
def prm_with_signals(build_prm, tmp_path_factory):
    # a head that reads the process signals too (what knowlyr-trainer prm trains by default)
    weights = {"grounded_last": 1.5, "error_last": -2.0, "repeated": -1.0, "length": 0.5}
    return build_prm(tmp_path_factory.mktemp("prm-signals"), bias=0.3, weight_std=2.0, signal_weights=weights)


class TestLearnedWithSignals(TestLearned):
    @pytest.fixture(autouse=True)
    def _checkpoint(self, prm_with_signals):  # the same engine on the checkpoint that reads the signals
        self.prm = prm_with_signals
