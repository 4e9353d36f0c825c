import pytest

from knowlyrcore import InvalidActionError, KnowlyrError, parse_action


def test_parses_tool_and_params():
    assert parse_action({"tool": "bash", "params": {"command": "ls"}}) == ("bash", {"command": "ls"})


def test_params_default_to_empty():
    assert parse_action({"tool": "submit"}) == ("submit", {})
    assert parse_action({"tool": "submit", "params": None}) == ("submit", {})


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("bash ls", "must be a dict"),
        ({"params": {}}, "'tool' must be a non-empty string"),
        ({"tool": "", "params": {}}, "'tool' must be a non-empty string"),
        ({"tool": 3}, "'tool' must be a non-empty string"),
        ({"tool": "bash", "params": ["ls"]}, "'params' of tool 'bash' must be a dict"),
    ],
)
def test_malformed_actions_are_rejected_clearly(action, message):
    with pytest.raises(InvalidActionError, match=message) as info:
        parse_action(action)
    assert isinstance(info.value, KnowlyrError) and isinstance(info.value, ValueError)
