import pytest

from knowlyrcore.testing import require_module

gymnasium = require_module("gymnasium", "the gymnasium adapter needs gymnasium (knowlyr-core[gymnasium], in [dev])")
from gymnasium.utils.env_checker import check_env as gymnasium_check_env  # noqa: E402

from knowlyrcore.gymnasium_adapter import ToolCallSpace, to_gymnasium  # noqa: E402


def test_passes_gymnasium_own_checker(counter_env):
    genv = to_gymnasium(counter_env)
    gymnasium_check_env(genv, skip_render_check=True)


def test_reset_and_step_follow_gymnasium_signatures(counter_env):
    genv = to_gymnasium(counter_env)
    obs, info = genv.reset(seed=1, options={"task": "count"})
    assert obs == "count=0 target=2" and isinstance(info, dict)
    obs, reward, terminated, truncated, info = genv.step({"tool": "inc", "params": {}})
    assert (obs, terminated, truncated) == ("count=1", False, False)
    assert reward == pytest.approx(0.1)


def test_spaces(counter_env):
    genv = to_gymnasium(counter_env)
    assert genv.observation_space.contains("any text ✓")
    assert not genv.observation_space.contains(3)
    genv.action_space.seed(0)
    sample = genv.action_space.sample()
    assert genv.action_space.contains(sample) and sample["tool"] in {"inc", "submit"}
    assert not genv.action_space.contains({"tool": "fly", "params": {}})
    with pytest.raises(ValueError, match="no tools"):
        ToolCallSpace([]).sample()


def test_close_reaches_the_env(counter_env):
    to_gymnasium(counter_env).close()
    assert counter_env.closed == 1
