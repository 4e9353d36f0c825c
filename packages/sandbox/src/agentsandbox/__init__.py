"""knowlyr-sandbox: real environments for LLM tool-use agents.

Code execution in a Docker container or a daemonless bubblewrap sandbox (``SandboxEnv``,
``knowlyr/sandbox``), conversation-style environments with real or data-backed tools
(``ConversationEnv``: ``knowlyr/conversation``, ``knowlyr/engineering``, ``knowlyr/advisory``,
``knowlyr/discussion``), and trajectory replay. The docker SDK is imported only when a Docker
sandbox is used.
"""

# ruff: noqa: E402 -- knowlyr-core must be checked before anything is imported from it
from importlib import metadata as _metadata

__version__ = _metadata.version("knowlyr-sandbox")
# The other project's knowlyr-core (PyPI) has no knowlyrcore.origin, so core is checked here.
if _metadata.version("knowlyr-core") != __version__:
    raise ImportError(
        f"knowlyr-sandbox {__version__} needs knowlyr-core {__version__}, found knowlyr-core "
        f"{_metadata.version('knowlyr-core')} (the knowlyr-* packages on PyPI are another project); "
        "fix: pip install ./packages/core from the knowlyr checkout, or pip install --no-index "
        f"--find-links WHEELHOUSE knowlyr-core=={__version__} (docs/install.md)"
    )

from knowlyrcore.origin import check_siblings

check_siblings("knowlyr-sandbox")

from agentsandbox.agents import EndpointAgent, ScriptedAgent
from agentsandbox.backends import (
    BackendUnavailable,
    DockerSandbox,
    LocalSandbox,
    Sandbox,
    SandboxError,
    available_backends,
    make_sandbox,
)
from agentsandbox.config import SandboxConfig
from agentsandbox.conversation import AdvisoryEnv, ConversationEnv, DiscussionEnv, EngineeringEnv
from agentsandbox.env import SandboxEnv
from agentsandbox.gc import collect_garbage
from agentsandbox.replay import ReplayReport, StepMismatch, replay, replay_file
from agentsandbox.simulated_user import SimulatedUser
from agentsandbox.workspace import WorkspacePathError

__all__ = [
    # sandboxes
    "BackendUnavailable",
    "DockerSandbox",
    "LocalSandbox",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "WorkspacePathError",
    "available_backends",
    "collect_garbage",
    "make_sandbox",
    # environments
    "AdvisoryEnv",
    "ConversationEnv",
    "DiscussionEnv",
    "EngineeringEnv",
    "SandboxEnv",
    "SimulatedUser",
    # agents and replay
    "EndpointAgent",
    "ReplayReport",
    "ScriptedAgent",
    "StepMismatch",
    "replay",
    "replay_file",
]
