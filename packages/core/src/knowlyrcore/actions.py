"""Actions are tool calls: ``{"tool": str, "params": dict}``.

An action may carry an optional ``"thought"`` (the reasoning that produced it), which
recorders keep and environments ignore.
"""

from __future__ import annotations

from typing import Any, TypedDict

from typing_extensions import NotRequired

from knowlyrcore.errors import InvalidActionError


class Action(TypedDict):
    """A tool call issued by the policy."""

    tool: str
    params: dict[str, Any]
    thought: NotRequired[str]


def parse_action(action: Any) -> tuple[str, dict[str, Any]]:
    """Return ``(tool, params)`` of a well-formed action or raise ``InvalidActionError``.

    ``params`` may be omitted (it defaults to ``{}``); anything else malformed is an error
    that says what was wrong.

    Examples:
        >>> parse_action({"tool": "bash", "params": {"command": "ls"}})
        ('bash', {'command': 'ls'})
    """
    if not isinstance(action, dict):
        raise InvalidActionError(
            f"an action must be a dict {{'tool': str, 'params': dict}}, got {type(action).__name__}"
        )
    tool = action.get("tool")
    if not isinstance(tool, str) or not tool:
        raise InvalidActionError(f"action field 'tool' must be a non-empty string, got {tool!r}")
    params = action.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidActionError(f"action field 'params' of tool {tool!r} must be a dict, got {type(params).__name__}")
    return tool, params
