"""knowlyr-sandbox: real environments for LLM tool-use agents.

Code execution in a Docker container or a daemonless bubblewrap sandbox (``SandboxEnv``,
``knowlyr/sandbox``), conversation-style environments with real or data-backed tools
(``ConversationEnv``: ``knowlyr/conversation``, ``knowlyr/engineering``, ``knowlyr/advisory``,
``knowlyr/discussion``), and trajectory replay. The docker SDK is imported only when a Docker
sandbox is used.
"""

# the knowlyr siblings are checked before anything is imported from them
try:
    from knowlyrcore.origin import check_siblings
except ModuleNotFoundError as exc:  # the other project's knowlyr-core (PyPI) has no knowlyrcore.origin
    if exc.name not in ("knowlyrcore", "knowlyrcore.origin"):
        raise  # a module our knowlyr-core needs is missing: its own error says which
    raise ImportError(
        "knowlyr-sandbox needs knowlyr-core from the knowlyr checkout, not PyPI's (another project); fix: pip install ./packages/core (docs/install.md)"
    ) from exc

__version__ = check_siblings("knowlyr-sandbox")  # the pyproject's, from the installed metadata

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
