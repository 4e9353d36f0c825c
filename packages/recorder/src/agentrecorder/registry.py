"""The adapter registry: format name → adapter, discovered through entry points.

Third-party packages add formats by declaring an entry point in the group
``knowlyr.recorder.adapters`` (``name = "package.module:AdapterClass"``); the built-ins are
declared there too, and listed here as well so a source checkout without installed metadata
still works. Nothing is imported until a format is used: ``names()`` reads only metadata.

Example:
    >>> "swe-agent" in names()
    True
    >>> get_adapter("swe-agent").name
    'swe-agent'
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from agentrecorder.adapters.base import Adapter
from agentrecorder.errors import ConversionError

ENTRY_POINT_GROUP = "knowlyr.recorder.adapters"

BUILTIN: dict[str, str] = {
    "openhands": "agentrecorder.adapters.openhands:OpenHandsAdapter",
    "swe-agent": "agentrecorder.adapters.swe_agent:SWEAgentAdapter",
    "mini-swe-agent": "agentrecorder.adapters.mini_swe_agent:MiniSWEAgentAdapter",
    "openai-chat": "agentrecorder.adapters.openai_chat:OpenAIChatAdapter",
    "sharegpt": "agentrecorder.adapters.sharegpt:ShareGPTAdapter",
    "who-and-when": "agentrecorder.adapters.who_and_when:WhoAndWhenAdapter",
    "atif": "agentrecorder.adapters.atif:ATIFAdapter",
    "adp": "agentrecorder.adapters.adp:ADPAdapter",
    "nebius": "agentrecorder.adapters.nebius:NebiusAdapter",
}

_targets: dict[str, str | type[Adapter]] = {}
_loaded: dict[str, Adapter] = {}
_discovered = False


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for name, target in BUILTIN.items():
        _targets.setdefault(name, target)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _targets.setdefault(ep.name, ep.value)


def register_adapter(name: str, target: str | type[Adapter]) -> None:
    """Add (or replace) a format: ``target`` is an ``Adapter`` subclass or ``"module:Class"``."""
    _discover()
    _targets[name] = target
    _loaded.pop(name, None)


def names() -> list[str]:
    """Every registered format name (without importing any adapter)."""
    _discover()
    return sorted(_targets)


def get_adapter(name: str) -> Adapter:
    """The adapter of format ``name``, imported on first use."""
    _discover()
    if name in _loaded:
        return _loaded[name]
    target = _targets.get(name)
    if target is None:
        raise ConversionError("<format>", None, f"unknown format {name!r}; known formats: {', '.join(names())}")
    if isinstance(target, str):
        module_name, _, attr = target.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConversionError("<format>", None, f"format {name!r}: cannot load {target!r}: {exc}") from None
    adapter = target()
    if not isinstance(adapter, Adapter):
        raise ConversionError("<format>", None, f"format {name!r}: {target!r} is not an Adapter")
    _loaded[name] = adapter
    return adapter


def adapters() -> list[Adapter]:
    """All loadable adapters, in auto-detection order (lower ``priority`` first, then name).

    A third-party adapter that fails to load is left out (see ``broken()``) rather than
    breaking every conversion; naming it explicitly still raises its error.
    """
    loaded = []
    for name in names():
        try:
            loaded.append(get_adapter(name))
        except ConversionError:
            continue
    return sorted(loaded, key=lambda a: (a.priority, a.name))


def broken() -> dict[str, str]:
    """Registered formats whose adapter cannot be loaded, with the reason."""
    problems = {}
    for name in names():
        try:
            get_adapter(name)
        except ConversionError as exc:
            problems[name] = exc.problem
    return problems
