"""``DomainProfile``: a declarative description of an agent domain.

A profile lists the domain's tools (name, description, JSON-schema parameters, category),
which tools end an episode, how the outcome is judged and how the reward rubrics are
weighted. Environments take their tool list from it, the reward model its weights, the
exporters the tool schemas they put in chat-format datasets. New domains need no code: write
a YAML or JSON file and ``load_domain_profile`` it.

Examples:
    >>> profile = get_domain_profile("coding")
    >>> profile.get_tool("bash").validate_params({"command": "ls"})
    >>> "submit" in profile.terminal_tools
    True
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from knowlyrcore.errors import DomainError, InvalidActionError, describe_parse_error, no_such_file
from knowlyrcore.jsonl import depth_exceeds

# Bounds on what a policy's tool arguments may cost to check and to report back.
MAX_PARAM_DEPTH = 64
MAX_MESSAGE_CHARS = 300


def _bounded(text: str) -> str:
    """``text`` cut to ``MAX_MESSAGE_CHARS``, lone surrogates escaped (the message is written to JSONL)."""
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + f"... ({len(text)} characters)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


RUBRICS = ("goal_progress", "tool_selection", "param_correctness", "info_utilization", "non_redundancy")


class ToolCategory(str, Enum):
    """What kind of effect a tool has; the reward rules reason about these."""

    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    SEARCH = "search"
    NAVIGATE = "navigate"
    INTERACT = "interact"
    COMMUNICATE = "communicate"
    THINK = "think"
    SUBMIT = "submit"
    OTHER = "other"


class ToolSpec(BaseModel):
    """A tool: its name, what it does, its parameters as a JSON Schema object, its category."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    category: ToolCategory = ToolCategory.OTHER

    @field_validator("parameters")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            canonical = json.dumps(schema, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError):  # not JSON: checked as it is, without the cache
            problem = _schema_problem_of(schema)
        else:
            problem = _schema_problem(canonical)
        if problem is not None:
            raise ValueError(f"not a valid JSON Schema: {problem}")
        if schema.get("type", "object") != "object":
            raise ValueError("tool parameters must be a JSON Schema of type 'object'")
        return schema

    def validate_params(self, params: Any) -> None:
        """Raise ``InvalidActionError`` naming the offending parameter if ``params`` break the schema.

        ``params`` come from the policy, so nothing about them is trusted: values nested past
        ``MAX_PARAM_DEPTH`` are refused before the schema walk (jsonschema recurses, and its
        messages ``repr`` the value), and the message is cut to ``MAX_MESSAGE_CHARS`` so a 10 MB
        argument is not echoed back into the observation.
        """
        if depth_exceeds(params, MAX_PARAM_DEPTH):
            raise InvalidActionError(
                f"tool {self.name!r}: invalid parameters: nested deeper than {MAX_PARAM_DEPTH} levels"
            )
        validator = jsonschema.Draft202012Validator(self.parameters)
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(params))
            message = None if error is None else error.message
        except ValueError as exc:  # repr of an int past Python's digit limit
            raise InvalidActionError(f"tool {self.name!r}: invalid parameters: {exc}") from None
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path)
            at = f" at '{_bounded(where)}'" if where else ""
            raise InvalidActionError(f"tool {self.name!r}: invalid parameters{at}: {_bounded(message)}")

    def to_openai_tool(self) -> dict[str, Any]:
        """The tool in OpenAI function-calling form, as chat templates and APIs expect it."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def _schema_problem_of(schema: Any) -> str | None:
    """Why ``schema`` is no valid JSON Schema (draft 2020-12), or None."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return exc.message
    return None


@functools.lru_cache(maxsize=4096)
def _schema_problem(canonical: str) -> str | None:
    """``_schema_problem_of`` for a schema given as sorted-key JSON, remembered: checking a schema
    against the metaschema takes ~1 ms, and a library of thousands of tools repeats a few dozen
    parameter schemas (a 50,000-tool file took 25 s to load before)."""
    return _schema_problem_of(json.loads(canonical))


def tool_spec(
    name: str, category: ToolCategory, description: str, required: Sequence[str] = (), /, **properties: dict[str, Any]
) -> ToolSpec:
    """A ``ToolSpec`` whose parameters are a closed JSON Schema object: ``properties`` maps each
    parameter to its schema (a parameter may be called ``name`` or ``category`` too), ``required``
    names the ones a call must give.

    >>> tool_spec("get_user", ToolCategory.READ, "A user's record.", ["user_id"], user_id={"type": "string"}).parameters
    {'type': 'object', 'properties': {'user_id': {'type': 'string'}}, 'required': ['user_id'], 'additionalProperties': False}
    """
    parameters = {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}
    return ToolSpec(name=name, category=category, description=description, parameters=parameters)


class OutcomeSpec(BaseModel):
    """How an episode's success is decided in this domain."""

    model_config = ConfigDict(extra="forbid")

    method: str = Field(
        default="heuristic",
        description="'tests' (a test command decides), 'terminal_tool' (reaching a terminal tool), "
        "'judge' (an LLM judge decides) or 'heuristic' (rules only).",
    )
    success_threshold: float = Field(
        default=0.5, ge=0, le=1, description="Score at or above which an episode succeeded."
    )
    description: str = ""

    @field_validator("method")
    @classmethod
    def _known_method(cls, method: str) -> str:
        allowed = ("tests", "terminal_tool", "judge", "heuristic")
        if method not in allowed:
            raise ValueError(f"method must be one of {', '.join(allowed)}")
        return method


class DomainProfile(BaseModel):
    """Everything domain specific that the environments, reward model and exporters need."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    display_name: str = ""
    description: str = ""
    tools: list[ToolSpec] = Field(default_factory=list)
    terminal_tools: list[str] = Field(default_factory=list)
    outcome: OutcomeSpec = Field(default_factory=OutcomeSpec)
    rubric_weights: dict[str, float] = Field(default_factory=lambda: dict.fromkeys(RUBRICS, 0.2))

    @field_validator("rubric_weights")
    @classmethod
    def _non_negative(cls, weights: dict[str, float]) -> dict[str, float]:
        for rubric, weight in weights.items():
            if weight < 0:
                raise ValueError(f"rubric weight {rubric!r} is negative")
        return weights

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, tools: list[ToolSpec]) -> list[ToolSpec]:
        seen: set[str] = set()
        for tool in tools:
            if tool.name in seen:
                raise ValueError(f"tool {tool.name!r} is declared twice")
            seen.add(tool.name)
        return tools

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    def get_tool(self, name: str) -> ToolSpec:
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise InvalidActionError(
            f"unknown tool {name!r} in domain {self.name!r}; available: {', '.join(self.tool_names) or '(none)'}"
        )

    def validate_action(self, action: Any) -> None:
        """Check that ``action`` names one of this domain's tools with valid parameters."""
        from knowlyrcore.actions import parse_action

        tool, params = parse_action(action)
        self.get_tool(tool).validate_params(params)

    def normalized_weights(self) -> dict[str, float]:
        """Rubric weights scaled to sum to 1 (all equal when every weight is 0)."""
        total = sum(self.rubric_weights.values())
        if total <= 0:
            return {k: 1 / len(self.rubric_weights) for k in self.rubric_weights} if self.rubric_weights else {}
        return {k: v / total for k, v in self.rubric_weights.items()}


_CUSTOM_PROFILES: dict[str, DomainProfile] = {}


def register_domain_profile(profile: DomainProfile, *, replace: bool = False) -> None:
    """Make ``profile`` available to ``get_domain_profile`` under its name."""
    from knowlyrcore.builtin_domains import BUILTIN_DOMAINS

    if not replace and (profile.name in _CUSTOM_PROFILES or profile.name in BUILTIN_DOMAINS):
        raise DomainError(f"domain {profile.name!r} already exists; pass replace=True to override it")
    _CUSTOM_PROFILES[profile.name] = profile


def get_domain_profile(name: str) -> DomainProfile:
    """Return the profile called ``name`` (custom registrations win over built-ins)."""
    from knowlyrcore.builtin_domains import BUILTIN_DOMAINS

    if name in _CUSTOM_PROFILES:
        return _CUSTOM_PROFILES[name]
    if name in BUILTIN_DOMAINS:
        return BUILTIN_DOMAINS[name]
    raise DomainError(f"unknown domain {name!r}; known: {', '.join(list_domain_profiles())}")


def tool_schemas(tools: list[Any], domain: str = "generic") -> list[dict[str, Any]]:
    """OpenAI function schemas of an environment's tools (``available_tools``): names are looked
    up in the domain's profile (description, parameters), ``ToolSpec``s and schemas pass through,
    unknown names get an empty parameter schema.

    Examples:
        >>> tool_schemas(["bash"], "coding")[0]["function"]["parameters"]["required"]
        ['command']
    """
    try:
        profile: DomainProfile | None = get_domain_profile(domain)
    except DomainError:
        profile = None
    out = []
    for tool in tools:
        if isinstance(tool, ToolSpec):
            out.append(tool.to_openai_tool())
        elif isinstance(tool, dict):
            out.append(tool if tool.get("type") == "function" else {"type": "function", "function": tool})
        elif profile is not None and tool in profile.tool_names:
            out.append(profile.get_tool(tool).to_openai_tool())
        else:
            empty = {"type": "object", "properties": {}}
            out.append({"type": "function", "function": {"name": str(tool), "description": "", "parameters": empty}})
    return out


def list_domain_profiles() -> list[str]:
    """Names of every known domain, built-in and registered, sorted."""
    from knowlyrcore.builtin_domains import BUILTIN_DOMAINS

    return sorted({*BUILTIN_DOMAINS, *_CUSTOM_PROFILES})


def load_domain_profile(path: str | Path, *, register: bool = False) -> DomainProfile:
    """Read a profile from a ``.yaml``/``.yml`` or ``.json`` file; optionally register it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DomainError(no_such_file(path)) from None
    except OSError as exc:
        raise DomainError(f"{path}: cannot read domain profile ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise DomainError(f"{path}: cannot read domain profile (not UTF-8 text)") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # yaml.YAMLError and json.JSONDecodeError carry the position
        line, problem = describe_parse_error(exc)  # never the file's text: it may be any host file
        where = f"{path}:{line}" if line else str(path)
        raise DomainError(f"{where}: not valid {path.suffix.lstrip('.') or 'JSON'} ({problem})") from None
    if not isinstance(data, dict):
        raise DomainError(f"{path}: a domain profile is a mapping, got {type(data).__name__}")
    try:
        profile = DomainProfile.model_validate(data)
    except ValidationError as err:
        from knowlyrcore.jsonl import format_field_path

        first = err.errors()[0]
        raise DomainError(f"{path}: {format_field_path(first['loc'])}: {first['msg']}") from None
    if register:
        register_domain_profile(profile, replace=True)
    return profile
