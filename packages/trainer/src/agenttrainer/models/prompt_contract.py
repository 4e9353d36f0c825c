"""The prompt a checkpoint was trained with, saved beside its weights (``prompt_contract.json``).

A policy answers well only when it is prompted as it was trained: the same system prompt, and
tool schemas in the prompt or not. An SFT run on chats without tool schemas, evaluated with the
schemas shown, scores far below its own report. So every checkpoint the trainer writes carries

    {"schema_version": 1, "system_prompt": "..." | null, "include_tools": true | false}

(the chat template travels with the tokenizer files), and evaluation, serving and online RL
default to it; an explicit flag overrides it.

The contract rides on the model object (``attach_contract`` / ``contract_of``): ``load_model_and_tokenizer``
attaches the file's contract, training keeps it unless its own data says otherwise, and
``save_model`` writes whatever the model carries, so a chain base -> SFT -> RL passes it on.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenttrainer.models.errors import ModelLoadError

CONTRACT_FILE = "prompt_contract.json"
SCHEMA_VERSION = 1
_ATTRIBUTE = "knowlyr_prompt_contract"


@dataclass(frozen=True)
class PromptContract:
    """How the policy is prompted: its system prompt (None: no system turn) and whether the tool
    schemas are rendered into the prompt by the chat template."""

    system_prompt: str | None = None
    include_tools: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "system_prompt": self.system_prompt,
            "include_tools": self.include_tools,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> PromptContract:
        if not isinstance(data, dict):
            raise ModelLoadError(f"{where}: expected a JSON object")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ModelLoadError(
                f"{where}: schema_version: expected {SCHEMA_VERSION}, got {data.get('schema_version')!r}"
            )
        system, tools = data.get("system_prompt"), data.get("include_tools")
        if system is not None and not isinstance(system, str):
            raise ModelLoadError(f"{where}: system_prompt: expected a string or null")
        if not isinstance(tools, bool):
            raise ModelLoadError(f"{where}: include_tools: expected true or false")
        return cls(system_prompt=system, include_tools=tools)

    def describe(self) -> str:
        system = f"a {len(self.system_prompt)}-character system prompt" if self.system_prompt else "no system prompt"
        return f"{system}, tool schemas {'shown' if self.include_tools else 'not shown'}"


def _base(model: Any) -> Any:
    """The innermost model of a PEFT wrapper (where the contract is kept)."""
    inner = getattr(getattr(model, "base_model", None), "model", None)
    return inner if inner is not None and type(model).__name__.startswith("Peft") else model


def attach_contract(model: Any, contract: PromptContract | None) -> None:
    """Make ``model`` carry ``contract`` (None: forget it)."""
    setattr(_base(model), _ATTRIBUTE, contract)


def contract_of(model: Any) -> PromptContract | None:
    return getattr(_base(model), _ATTRIBUTE, None)


def write_contract(directory: str | os.PathLike, contract: PromptContract) -> None:
    path = Path(directory) / CONTRACT_FILE
    tmp = path.with_name(f".{CONTRACT_FILE}.tmp")
    tmp.write_text(json.dumps(contract.to_dict(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_contract(directory: str | os.PathLike) -> PromptContract | None:
    """The contract saved in checkpoint ``directory`` (None when it has none, e.g. a base model)."""
    path = Path(directory) / CONTRACT_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path}: not readable JSON ({exc})") from None
    return PromptContract.from_dict(data, str(path))


def contract_of_chats(chats: list[tuple[list[dict[str, Any]], Any]]) -> PromptContract | None:
    """The contract a set of training chats ``(messages, tools)`` shows, or None when the chats
    disagree (several system prompts, tools in some only): then there is no one way to prompt."""
    systems = {m[0]["content"] if m and m[0].get("role") == "system" else None for m, _ in chats}
    tools = {bool(t) for _, t in chats}
    if not chats or len(systems) != 1 or len(tools) != 1:
        return None
    (system,), (include_tools,) = systems, tools
    return PromptContract(system_prompt=system if isinstance(system, str) else None, include_tools=include_tools)
