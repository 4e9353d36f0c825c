"""knowlyr-sandbox: real environments for LLM tool-use agents.

Code execution in a Docker container or a daemonless bubblewrap sandbox (``SandboxEnv``,
``knowlyr/sandbox``), conversation-style environments with real or data-backed tools
(``ConversationEnv``: ``knowlyr/conversation``, ``knowlyr/engineering``, ``knowlyr/advisory``,
``knowlyr/discussion``), and trajectory replay.
"""

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
from agentsandbox.env import SandboxEnv
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
    "make_sandbox",
    # environments
    "SandboxEnv",
]
