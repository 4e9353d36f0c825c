"""knowlyr-sandbox: real environments for LLM tool-use agents.

Code execution in a Docker container or a daemonless bubblewrap sandbox (``SandboxEnv``,
``knowlyr/sandbox``), conversation-style environments with real or data-backed tools
(``ConversationEnv``: ``knowlyr/conversation``, ``knowlyr/engineering``, ``knowlyr/advisory``,
``knowlyr/discussion``), and trajectory replay. The docker SDK is imported only when a Docker
sandbox is used.
"""

from agentsandbox._siblings import __version__ as __version__  # first: knowlyr-core must be ours
from agentsandbox.agents import ScriptedAgent
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
    "ReplayReport",
    "ScriptedAgent",
    "StepMismatch",
    "replay",
    "replay_file",
]
