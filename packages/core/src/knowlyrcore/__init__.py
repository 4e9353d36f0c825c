"""knowlyr-core: the MDP protocol shared by every knowlyr package.

Environments (``AgentEnv``, ``TimeStep``, wrappers), the registry (``register``/``make``),
domain profiles, the policy protocol with the one tool-call parser every chat policy uses, the
endpoint policy (a model behind an OpenAI-compatible or Anthropic endpoint), and the trajectory
schema with its JSONL helpers. Depends on pydantic, jsonschema, PyYAML, click and
typing_extensions (its pyproject's list); never imports torch. The ``gymnasium`` and ``mcp``
extras add ``to_gymnasium`` and the MCP servers.
"""

from importlib import metadata

from knowlyrcore.actions import Action, parse_action
from knowlyrcore.checker import check_env
from knowlyrcore.domain import (
    DomainProfile,
    OutcomeSpec,
    ToolCategory,
    ToolSpec,
    get_domain_profile,
    list_domain_profiles,
    load_domain_profile,
    register_domain_profile,
    tool_schemas,
)
from knowlyrcore.endpoint import ChatEndpoint, EndpointError, EndpointPolicy
from knowlyrcore.env import AgentEnv, EnvWrapper
from knowlyrcore.errors import (
    DataFormatError,
    DomainError,
    EnvCheckError,
    InfrastructureError,
    InputError,
    InvalidActionError,
    KnowlyrError,
    MissingExtraError,
    RegistryError,
    TaskRequiredError,
    require_extra,
)
from knowlyrcore.jsonl import read_jsonl, read_trajectories, write_jsonl, write_trajectories
from knowlyrcore.models import TaskInfo, ToolResult
from knowlyrcore.numbers import checked_number
from knowlyrcore.policy import (
    BatchPolicy,
    ChatTranscript,
    Policy,
    SequentialBatchPolicy,
    SolutionReplay,
    as_batch_policy,
    reset_policy,
)
from knowlyrcore.recording import TrajectoryBuilder
from knowlyrcore.registry import EnvSpec, list_envs, make, register, spec, unregister
from knowlyrcore.roots import (
    AllowedRoots,
    OverwriteRefusedError,
    PathOutsideRootsError,
    PathRefusedError,
    TooManyFilesError,
)
from knowlyrcore.timestep import TimeStep
from knowlyrcore.tool_parsing import (
    CLOSING_TOOLS,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    FunctionCall,
    ParsedReply,
    ParserState,
    ToolCallParser,
    action_from_message,
    call_from_json,
    closing_action,
    first_json_object,
    parse_reply,
    parse_tool_calls,
    possible_tool_call_start,
    select_closing_tool,
)
from knowlyrcore.trajectory import (
    SCHEMA_VERSION,
    Observation,
    Outcome,
    Step,
    TestSummary,
    ToolCall,
    Trajectory,
    Usage,
)

__version__ = metadata.version("knowlyr-core")  # the pyproject's, from the installed metadata

__all__ = [
    # environment protocol
    "Action",
    "AgentEnv",
    "EnvWrapper",
    "TimeStep",
    "check_env",
    "parse_action",
    # policies
    "BatchPolicy",
    "ChatEndpoint",
    "ChatTranscript",
    "EndpointError",
    "EndpointPolicy",
    "Policy",
    "SequentialBatchPolicy",
    "SolutionReplay",
    "as_batch_policy",
    "reset_policy",
    # tool-call parsing
    "CLOSING_TOOLS",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "FunctionCall",
    "ParsedReply",
    "ParserState",
    "ToolCallParser",
    "action_from_message",
    "call_from_json",
    "closing_action",
    "first_json_object",
    "parse_reply",
    "parse_tool_calls",
    "possible_tool_call_start",
    "select_closing_tool",
    # registry
    "EnvSpec",
    "list_envs",
    "make",
    "register",
    "spec",
    "unregister",
    # domains
    "DomainProfile",
    "OutcomeSpec",
    "ToolCategory",
    "ToolSpec",
    "get_domain_profile",
    "tool_schemas",
    "list_domain_profiles",
    "load_domain_profile",
    "register_domain_profile",
    # data
    "SCHEMA_VERSION",
    "Observation",
    "Outcome",
    "Step",
    "TaskInfo",
    "TestSummary",
    "ToolCall",
    "ToolResult",
    "Trajectory",
    "TrajectoryBuilder",
    "Usage",
    "read_jsonl",
    "read_trajectories",
    "write_jsonl",
    "write_trajectories",
    # allowed roots (servers that take paths from a client)
    "AllowedRoots",
    # errors
    "DataFormatError",
    "DomainError",
    "EnvCheckError",
    "InfrastructureError",
    "InputError",
    "InvalidActionError",
    "KnowlyrError",
    "MissingExtraError",
    "OverwriteRefusedError",
    "PathOutsideRootsError",
    "PathRefusedError",
    "RegistryError",
    "TaskRequiredError",
    "TooManyFilesError",
    "require_extra",
    # untrusted numbers (tool parameters, request fields)
    "checked_number",
]
