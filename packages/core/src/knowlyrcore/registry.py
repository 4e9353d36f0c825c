"""The environment registry: ``register``, ``make``, ``spec``, ``list_envs``.

Installed packages contribute environments through the ``knowlyr.envs`` entry-point group:
the entry point's name is the environment id and its value the class or factory, e.g. in a
pyproject::

    [project.entry-points."knowlyr.envs"]
    "knowlyr/sandbox" = "agentsandbox.env:SandboxEnv"

Discovery reads only the distributions' metadata; a plugin module is imported when one of its
environments is first made, so importing knowlyr-core has no side effects. A plugin that
fails to load raises ``RegistryError`` naming the entry point: errors are never swallowed.

Examples:
    >>> from knowlyrcore import AgentEnv, TimeStep
    >>> class Dummy(AgentEnv):
    ...     def reset(self, *, task=None, seed=None): return TimeStep("hi")
    ...     def step(self, action): return TimeStep("ok", terminated=True)
    >>> register("doc/dummy-v0", Dummy, domain="generic")
    >>> make("doc/dummy-v0").reset().observation
    'hi'
"""

from __future__ import annotations

import importlib
import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from knowlyrcore.env import AgentEnv
from knowlyrcore.errors import RegistryError

ENTRY_POINT_GROUP = "knowlyr.envs"
_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*$")


def builtin_envs_hint() -> str:
    """What to install when the built-in ``knowlyr/*`` environments are missing (``knowlyr-core envs``
    and an unknown ``knowlyr/*`` id both say it): knowlyr-sandbox, from the checkout or a wheelhouse."""
    from knowlyrcore.origin import install_command

    return f"knowlyr-sandbox provides the built-in knowlyr/* environments: {install_command('knowlyr-sandbox')}"


@dataclass
class EnvSpec:
    """How to build an environment: what to call, with which defaults."""

    id: str
    entry_point: Callable[..., AgentEnv] | str
    domain: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    source: str = "register()"

    def load(self) -> Callable[..., AgentEnv]:
        """Resolve a ``'module:attr'`` entry point to the callable, importing its module."""
        if callable(self.entry_point):
            return self.entry_point
        module_name, _, attr = self.entry_point.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in attr.split(".") if attr else []:
                target = getattr(target, part)
        except Exception as exc:
            raise RegistryError(
                f"environment {self.id!r}: cannot load entry point {self.entry_point!r} "
                f"(from {self.source}): {type(exc).__name__}: {exc}"
            ) from exc
        if not callable(target):
            raise RegistryError(f"environment {self.id!r}: entry point {self.entry_point!r} is not callable")
        self.entry_point = target
        return target

    def resolved_domain(self) -> str:
        """The declared domain, else the class's ``domain`` attribute (loading it if needed)."""
        if self.domain is not None:
            return self.domain
        return getattr(self.load(), "domain", "generic")


_REGISTRY: dict[str, EnvSpec] = {}
_PLUGINS_LOADED = False
_DISCOVERY_LOCK = threading.Lock()


def _discover_plugins() -> None:
    """Add the specs of installed distributions' entry points (metadata only, no import).

    Thread-safe: concurrent ``make()`` calls (``collect`` runs episodes in threads) must all
    see the plugins, so the flag is set only once every entry point is registered.
    """
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    with _DISCOVERY_LOCK:
        if _PLUGINS_LOADED:
            return
        found: dict[str, EnvSpec] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            source = f"entry point {ep.name!r} of {dist.name if dist else 'an installed package'}"
            if not _ID_PATTERN.match(ep.name):
                raise RegistryError(f"{source}: {ep.name!r} is not a valid environment id")
            found[ep.name] = EnvSpec(id=ep.name, entry_point=ep.value, source=source)
        for env_id, env_spec in found.items():
            _REGISTRY.setdefault(env_id, env_spec)  # an explicit register() call wins over installed metadata
        _PLUGINS_LOADED = True


def register(
    env_id: str,
    cls: Callable[..., AgentEnv] | str,
    domain: str | None = None,
    *,
    max_steps: int | None = None,
    **kwargs: Any,
) -> None:
    """Register an environment class (or factory, or ``'module:attr'`` string) under ``env_id``.

    ``kwargs`` become the constructor's defaults; ``max_steps`` makes ``make`` wrap the
    environment in a ``MaxStepsWrapper``. Registering an existing id replaces it with a
    warning, as re-running a notebook cell would.
    """
    if not isinstance(env_id, str) or not _ID_PATTERN.match(env_id):
        raise RegistryError(f"invalid environment id {env_id!r}: use names like 'project/env-name'")
    if not (callable(cls) or (isinstance(cls, str) and ":" in cls)):
        raise RegistryError(f"environment {env_id!r}: expected a class, a factory or 'module:attr', got {cls!r}")
    if env_id in _REGISTRY:
        warnings.warn(f"environment {env_id!r} was already registered; replacing it", stacklevel=2)
    _REGISTRY[env_id] = EnvSpec(id=env_id, entry_point=cls, domain=domain, kwargs=dict(kwargs), max_steps=max_steps)


def unregister(env_id: str) -> None:
    """Remove ``env_id`` from the registry (tests and notebooks use this)."""
    _discover_plugins()
    if env_id not in _REGISTRY:
        raise RegistryError(f"environment {env_id!r} is not registered")
    del _REGISTRY[env_id]


def spec(env_id: str) -> EnvSpec:
    """The spec registered under ``env_id``; unknown ids get suggestions."""
    _discover_plugins()
    try:
        return _REGISTRY[env_id]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(env_id, list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        known = ", ".join(sorted(_REGISTRY)) or "none"
        if env_id.startswith("knowlyr/") and not any(i.startswith("knowlyr/") for i in _REGISTRY):
            known += f"; {builtin_envs_hint()}"  # the package that provides them is not installed
        raise RegistryError(f"unknown environment {env_id!r}{hint} (registered: {known})") from None


def list_envs(domain: str | None = None) -> list[str]:
    """Registered environment ids, sorted; filtered by domain when given (loads entry points)."""
    _discover_plugins()
    ids = sorted(_REGISTRY)
    if domain is None:
        return ids
    return [i for i in ids if _REGISTRY[i].resolved_domain() == domain]


def make(env_id: str, **overrides: Any) -> AgentEnv:
    """Build the environment registered as ``env_id``; ``overrides`` replace its default kwargs."""
    env_spec = spec(env_id)
    factory = env_spec.load()
    kwargs = {**env_spec.kwargs, **overrides}
    max_steps = kwargs.pop("max_steps", env_spec.max_steps)
    try:
        env = factory(**kwargs)
    except TypeError as exc:
        raise RegistryError(f"environment {env_id!r}: constructor rejected arguments {sorted(kwargs)}: {exc}") from exc
    if not isinstance(env, AgentEnv):
        raise RegistryError(f"environment {env_id!r}: factory returned {type(env).__name__}, not an AgentEnv")
    env.spec = env_spec
    if env_spec.domain is not None and env.domain == "generic":
        # a class shared by several ids (ConversationEnv) takes its domain from the registration
        env.domain = env_spec.domain
    if max_steps is not None:
        from knowlyrcore.wrappers import MaxStepsWrapper

        env = MaxStepsWrapper(env, max_steps=max_steps)
    return env
