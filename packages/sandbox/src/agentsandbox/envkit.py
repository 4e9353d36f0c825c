"""What every environment of this package does alike: register its domain profile once, report
an action it refuses, and answer a step taken after the episode ended.

Kept free of the sandbox backends, so the environments without a sandbox (retail, BFCL) can
use it without importing Docker's machinery.
"""

from __future__ import annotations

from typing import Any

from knowlyrcore.domain import DomainProfile, register_domain_profile
from knowlyrcore.errors import DomainError
from knowlyrcore.timestep import TimeStep

#: The observation of a step after the episode ended.
EPISODE_OVER = "[error] the episode is over; call reset()"


def register_once(profile: DomainProfile) -> None:
    """Register ``profile`` unless its name is already taken: on a module reload the profile the
    first import registered stays."""
    try:
        register_domain_profile(profile)
    except DomainError:
        pass


def error_step(error: str, **info: Any) -> TimeStep:
    """A step that did nothing but refuse the action: ``[error] <error>``, with ``error`` in ``info``
    after the other ``info`` fields (such as ``tool``)."""
    return TimeStep(observation=f"[error] {error}", info={**info, "error": error})


def episode_over(tool: str) -> TimeStep:
    """What ``step`` answers once the episode has ended: nothing runs, and the episode stays
    terminated (``tool``: the action's tool as ``info`` may show it)."""
    return TimeStep(observation=EPISODE_OVER, terminated=True, info={"tool": tool, "error": "episode over"})
