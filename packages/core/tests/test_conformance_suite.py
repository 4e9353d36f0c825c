"""The standard suite every environment runs, applied to the test environment here."""

import json

import pytest

from knowlyrcore import AgentEnv, TimeStep
from knowlyrcore.testing import REAL_DATA_ENV_VAR, REQUIRE_ENV_VAR, EnvConformance, real_data, require, require_module


class SmallEnv(AgentEnv):
    domain = "generic"

    def reset(self, *, task=None, seed=None):
        self.n = 0
        return TimeStep(f"task: {task}")

    def step(self, action):
        from knowlyrcore import InvalidActionError

        if action["tool"] == "note":
            self.n += 1
            return TimeStep(f"noted {self.n}")
        if action["tool"] == "submit":
            return TimeStep("bye", terminated=True, info={"success": True})
        raise InvalidActionError(f"no tool {action['tool']!r}")

    @property
    def available_tools(self):
        return ["note", "submit"]


class TestSmallEnvConforms(EnvConformance):
    task = "write two notes"
    actions = [{"tool": "note", "params": {}}, {"tool": "note", "params": {"x": 1}}]
    terminal_action = {"tool": "submit", "params": {}}

    def make_env(self):
        return SmallEnv()


def test_require_skips_normally(monkeypatch):
    monkeypatch.delenv(REQUIRE_ENV_VAR, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no daemon"):
        require(False, "no daemon")
    require(True, "unused")


def test_require_fails_under_ci(monkeypatch):
    monkeypatch.setenv(REQUIRE_ENV_VAR, "1")
    with pytest.raises(pytest.fail.Exception, match="required component missing"):
        require(False, "no daemon")


def test_require_module_returns_the_module_skips_or_fails(monkeypatch):
    monkeypatch.delenv(REQUIRE_ENV_VAR, raising=False)
    assert require_module("json", "unused") is json
    with pytest.raises(pytest.skip.Exception, match="needs the extra"):
        require_module("knowlyr_no_such_module", "needs the extra")
    monkeypatch.setenv(REQUIRE_ENV_VAR, "1")
    with pytest.raises(pytest.fail.Exception, match="required component missing.*needs the extra"):
        require_module("knowlyr_no_such_module", "needs the extra")


def test_real_data_is_the_named_folder_and_a_missing_file_is_a_missing_component(monkeypatch, tmp_path):
    (tmp_path / "interop").mkdir()
    (tmp_path / "interop" / "a.json").write_text("{}")
    monkeypatch.setenv(REAL_DATA_ENV_VAR, str(tmp_path))
    monkeypatch.delenv(REQUIRE_ENV_VAR, raising=False)
    assert real_data() == tmp_path
    assert real_data("interop", "a.json") == tmp_path / "interop" / "a.json"
    with pytest.raises(pytest.skip.Exception, match=r"real agent logs not found: .*nope\.json"):
        real_data("nope.json")
    monkeypatch.setenv(REQUIRE_ENV_VAR, "1")
    with pytest.raises(pytest.fail.Exception, match=r"required component missing.*nope\.json"):
        real_data("nope.json")
    monkeypatch.delenv(REAL_DATA_ENV_VAR)
    with pytest.raises(pytest.fail.Exception, match=f"{REAL_DATA_ENV_VAR} is not set"):
        real_data()
