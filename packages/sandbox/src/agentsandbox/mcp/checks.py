"""The verifiers of an MCP task: checks on the final answer and on the server's state after it.

A task's metadata may hold (all optional):

- ``answer_contains`` / ``answer_excludes``: substrings the closing message must / must not
  contain, compared case-insensitively (one check: the answer check);
- ``state_checks``: a list, each either
  ``{"tool": name, "arguments": {...}, ...}`` — a (read-only) tool called on the same server
  after the episode, its result text checked — or ``{"command": [argv...], ...}`` — run with
  the workspace as its working directory inside the server's sandbox (never on the host: the
  policy may have planted git hooks or config in the repository), its output checked, and a
  non-zero exit code fails it. Each says what the text must be with ``contains`` (substrings
  that must all appear), ``excludes`` (substrings none of which may appear) and ``equals`` (the
  whole text, surrounding whitespace ignored); these compare case-sensitively, as program
  output is. "{workspace}" in arguments and argv is the workspace as the server sees it.

``check_metadata`` validates all of it at reset, with one-line errors naming the field; a
verdict is ``{"check": what, "ok": bool, "why": str}``.
"""

from __future__ import annotations

from typing import Any

from agentsandbox.mcp import sdk
from agentsandbox.mcp.client import MCPClient, one_line, result_text, substitute
from knowlyrcore.errors import InputError

_MATCHERS = ("contains", "excludes", "equals")
_OUTPUT_BYTES = 1 << 16


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: must be a list of strings")
    return value


def check_metadata(metadata: dict[str, Any], task_id: str) -> None:
    """Refuse malformed checks in a task's metadata (one line naming the task and the field)."""
    where = f"task {task_id!r}: metadata"
    _strings(metadata.get("answer_contains"), f"{where}.answer_contains")
    _strings(metadata.get("answer_excludes"), f"{where}.answer_excludes")
    checks = metadata.get("state_checks") or []
    if not isinstance(checks, list):
        raise InputError(f"{where}.state_checks: must be a list")
    for i, check in enumerate(checks):
        at = f"{where}.state_checks[{i}]"
        if not isinstance(check, dict) or ("tool" in check) == ("command" in check):
            raise InputError(f"{at}: must have exactly one of 'tool' and 'command'")
        if "tool" in check and not (isinstance(check["tool"], str) and isinstance(check.get("arguments", {}), dict)):
            raise InputError(f"{at}: 'tool' must be a name and 'arguments' an object")
        if "command" in check:
            argv = check["command"]
            if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
                raise InputError(f"{at}.command: must be a non-empty list of strings")
        _strings(check.get("contains"), f"{at}.contains")
        _strings(check.get("excludes"), f"{at}.excludes")
        if not isinstance(check.get("equals", ""), str):
            raise InputError(f"{at}.equals: must be a string")
        if not any(key in check for key in _MATCHERS):
            raise InputError(f"{at}: says nothing to check (give contains, excludes or equals)")


def has_answer_check(metadata: dict[str, Any]) -> bool:
    return bool(metadata.get("answer_contains") or metadata.get("answer_excludes"))


def answer_verdict(message: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """Whether the closing ``message`` states every required fact and none of the excluded ones."""
    text = message.casefold()
    missing = [s for s in metadata.get("answer_contains") or [] if s.casefold() not in text]
    present = [s for s in metadata.get("answer_excludes") or [] if s.casefold() in text]
    why = "; ".join(
        [f"missing {one_line(s, 60)!r}" for s in missing] + [f"states excluded {one_line(s, 60)!r}" for s in present]
    )
    return {"check": "answer", "ok": not (missing or present), "why": why}


def _text_problem(text: str, check: dict[str, Any]) -> str:
    """Why ``text`` fails ``check``'s contains/excludes/equals, or ''."""
    for needle in check.get("contains") or []:
        if needle not in text:
            return f"output lacks {one_line(needle, 60)!r}"
    for needle in check.get("excludes") or []:
        if needle in text:
            return f"output has excluded {one_line(needle, 60)!r}"
    if "equals" in check and text.strip() != check["equals"].strip():
        return f"output is {one_line(text.strip(), 80)!r}, not {one_line(check['equals'], 80)!r}"
    return ""


def state_verdict(check: dict[str, Any], client: MCPClient, *, timeout: float) -> dict[str, Any]:
    """Run one state check after the episode. A server failure raises ``InfrastructureError``."""
    workspace = client.workspace_path or ""
    if "tool" in check:
        name = check["tool"]
        result = client.call_tool(name, substitute(check.get("arguments") or {}, workspace))
        text = result_text(result)
        why = (
            f"the tool answered an error: {one_line(text, 120)}"
            if sdk.field(result, "is_error")
            else _text_problem(text, check)
        )
        return {"check": f"tool {name}", "ok": not why, "why": why}
    argv = substitute(check["command"], workspace)
    code, output = client.run_command(argv, timeout=timeout, max_bytes=_OUTPUT_BYTES)
    if code is None:
        why = f"timed out after {timeout:g} s"
    elif code != 0:
        why = f"exit code {code}: {one_line(output.strip().splitlines()[-1] if output.strip() else '', 120)}"
    else:
        why = _text_problem(output, check)
    return {"check": f"command {one_line(' '.join(argv), 80)}", "ok": not why, "why": why}
