import pytest

from knowlyrcore import AgentEnv, TimeStep
from knowlyrcore.testing import EnvConformance
from knowlyrcore.toolgen import generate_library
from knowlyrcore.wrappers import RecorderWrapper, ToolRetrievalWrapper


class Desk(AgentEnv):
    """A help desk whose replies steer the next step: first an order question, then weather."""

    def reset(self, *, task=None, seed=None):
        self.turn = 0
        return TimeStep("Hello, what do you need?")

    def step(self, action):
        self.turn += 1
        if self.turn == 1:
            return TimeStep("Done. Anything about the weather forecast for tomorrow?")
        return TimeStep("bye", terminated=True, info={"success": True})


LIBRARY = generate_library()


@pytest.fixture(scope="module")
def library():
    return LIBRARY


def test_the_offer_follows_the_task_then_the_latest_observation(library):
    env = RecorderWrapper(ToolRetrievalWrapper(Desk(), library, k=3, always=["respond"]))
    env.reset(task="Please cancel my shop order #123")
    first = env.available_tools
    assert "shop_cancel_order" in first and first[-1] == "respond" and len(first) == 4
    env.step({"tool": "shop_cancel_order", "params": {"order_id": "#123"}})
    assert any(name.startswith("weather_") for name in env.available_tools)
    env.step({"tool": "crm_delete_contact", "params": {}})
    steps = env.get_trajectory().steps
    assert steps[0].metadata["offered_tools"] == first and "tool_not_offered" not in steps[0].metadata
    assert steps[1].metadata["tool_not_offered"] is True  # the agent called a tool it was not shown


def test_specs_are_offered_for_the_prompt(library):
    env = ToolRetrievalWrapper(Desk(), library, k=2)
    env.reset(task="book a hotel room")
    assert [t.name for t in env.offered_tools] == env.available_tools
    assert all(t.parameters["type"] == "object" for t in env.offered_tools)


def test_bad_arguments():
    with pytest.raises(TypeError, match="search"):
        ToolRetrievalWrapper(Desk(), object())
    with pytest.raises(ValueError, match="k must be"):
        ToolRetrievalWrapper(Desk(), LIBRARY, k=0)


class TestToolRetrievalWrapperConforms(EnvConformance):
    actions = [{"tool": "shop_get_order", "params": {}}]
    terminal_action = None

    def make_env(self):
        return ToolRetrievalWrapper(Desk(), LIBRARY, k=2, always=["shop_get_order"])
