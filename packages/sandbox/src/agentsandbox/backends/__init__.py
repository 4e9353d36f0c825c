"""Sandbox backends: ``docker`` (a warm container) and ``local`` (bubblewrap, daemonless).

``make_sandbox(backend="auto")`` picks Docker when a daemon and the image are there, else the
local backend; ``available_backends()`` says which ones work here and why not.
"""

from __future__ import annotations

from agentsandbox.backends.base import BackendUnavailable, Sandbox, SandboxError
from agentsandbox.backends.docker import DockerSandbox, docker_status
from agentsandbox.backends.local import LocalSandbox, bwrap_status
from agentsandbox.config import SandboxConfig

BACKENDS: dict[str, type[Sandbox]] = {"docker": DockerSandbox, "local": LocalSandbox}


def available_backends(config: SandboxConfig | None = None) -> dict[str, tuple[bool, str]]:
    """``{name: (usable, reason)}`` for every backend, probing the daemon and bubblewrap."""
    image = (config or SandboxConfig()).image
    return {"docker": docker_status(image), "local": bwrap_status()}


def resolve_backend(backend: str = "auto", config: SandboxConfig | None = None) -> str:
    """The concrete backend name for ``backend`` ("auto": Docker if usable, else local)."""
    if backend != "auto":
        if backend not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {backend!r}; choose auto, {', '.join(BACKENDS)}")
        return backend
    status = available_backends(config)
    for name in ("docker", "local"):
        if status[name][0]:
            return name
    reasons = "; ".join(f"{name}: {why}" for name, (_, why) in status.items())
    raise BackendUnavailable(f"no sandbox backend works here ({reasons})")


def make_sandbox(backend: str = "auto", config: SandboxConfig | None = None, **overrides) -> Sandbox:
    """A new (not yet started) sandbox; ``overrides`` are ``SandboxConfig`` fields."""
    if overrides:
        from dataclasses import replace

        config = replace(config or SandboxConfig(), **overrides)
    return BACKENDS[resolve_backend(backend, config)](config)


__all__ = [
    "BACKENDS",
    "BackendUnavailable",
    "DockerSandbox",
    "LocalSandbox",
    "Sandbox",
    "SandboxError",
    "available_backends",
    "make_sandbox",
    "resolve_backend",
]
