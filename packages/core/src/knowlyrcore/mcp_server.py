"""MCP server (stdio) exposing knowlyr-core's contracts to agents: validation, domains, tool schemas.

Run it with ``knowlyr-core mcp`` or ``python -m knowlyrcore.mcp_server`` (extra ``mcp``). Tools:

- ``validate(path, kind)``: check a trajectory (or, with ``kind="task"``, a task) JSONL file; a
  bad file answers ``valid: false`` with the same one-line ``file:line: field: problem`` error
  as ``knowlyr-core validate``;
- ``domains()``: the domain profiles, built-in and registered;
- ``domain(name)``: one profile, its tools (JSON Schemas) and rubric weights;
- ``tool_schemas(names, domain)``: OpenAI function schemas of tools (``knowlyrcore.tool_schemas``);
- ``search_tools(query, library, k)``: the ``k`` tools of a tool library (a file inside the roots,
  or ``generated``) that best match a request (BM25, ``knowlyrcore.tool_library``).

``validate`` and ``search_tools`` read a file the client names, so its path is checked against the allowed roots
(the working directory, or each ``--root DIR``, plus the roots the client declares;
``knowlyrcore.roots``) and refused outside them. The server is built by ``build_server()``, so
importing this module needs no SDK.
"""

# First, before the imports that need the mcp extra (the SDK, anyio):
if __name__ == "__main__":  # python -m knowlyrcore.mcp_server: without the SDK, one error line, no traceback
    from knowlyrcore.mcp import run_as_main

    run_as_main("knowlyr-core", "knowlyrcore.mcp_server")

import functools
from collections.abc import Sequence
from typing import Any

import anyio.to_thread

from knowlyrcore.domain import get_domain_profile, list_domain_profiles
from knowlyrcore.domain import tool_schemas as openai_tool_schemas
from knowlyrcore.errors import DataFormatError
from knowlyrcore.jsonl import read_jsonl, read_trajectories
from knowlyrcore.mcp import guard, new_server, refresh_roots, run_server
from knowlyrcore.models import TaskInfo

# kind -> (plural, reader): trajectories are read as `knowlyr-core validate` reads them
RECORD_KINDS = {
    "trajectory": ("trajectories", read_trajectories),
    "task": ("tasks", functools.partial(read_jsonl, model=TaskInfo)),
}


def validate_file(path: str, kind: str = "trajectory") -> dict[str, Any]:
    """Validate every record of the JSONL file ``path`` as a ``kind``; the first problem ends it."""
    plural, read = RECORD_KINDS[kind]
    try:
        count = sum(1 for _ in read(path))
        if count == 0:
            raise DataFormatError(path, None, f"no {plural} (empty file)")
    except DataFormatError as exc:
        return {"path": path, "kind": kind, "valid": False, "error": str(exc)}
    return {"path": path, "kind": kind, "valid": True, "records": count}


def build_server() -> Any:
    """The knowlyr-core MCP server (its ``roots`` are the working directory until ``run_server``)."""
    # No `from __future__ import annotations` here: the tools' `Context` annotation is evaluated when
    # they are defined, so the SDK (the extra) is imported only when the server is built.
    from knowlyrcore.mcp import Context, ToolError

    server = new_server("knowlyr-core", instructions="Validate knowlyr JSONL; list domains, their tools and weights.")

    @server.tool()
    async def validate(path: str, kind: str = "trajectory", ctx: Context | None = None) -> dict[str, Any]:
        """Check the JSONL file `path` against the trajectory schema (`kind` "trajectory") or the task
        schema ("task"); returns the record count, or the first problem as `file:line: field: problem`."""
        if kind not in RECORD_KINDS:
            raise ToolError(f"kind must be one of {', '.join(RECORD_KINDS)}, got {kind!r}")
        roots = await refresh_roots(server, ctx)
        with guard():
            resolved = str(roots.readable(path))
        return await anyio.to_thread.run_sync(functools.partial(validate_file, resolved, kind))

    @server.tool()
    def domains() -> dict[str, Any]:
        """The domain profiles (built-in and registered): name, description and tool names."""
        profiles = [get_domain_profile(name) for name in list_domain_profiles()]
        return {
            "domains": [
                {"name": p.name, "display_name": p.display_name, "description": p.description, "tools": p.tool_names}
                for p in profiles
            ]
        }

    @server.tool()
    def domain(name: str) -> dict[str, Any]:
        """One domain profile: its tools (with parameter JSON Schemas), terminal tools, outcome and
        rubric weights."""
        with guard():
            return get_domain_profile(name).model_dump(mode="json")

    @server.tool()
    def tool_schemas(names: list[str], domain: str = "generic") -> dict[str, Any]:
        """OpenAI function schemas of the tools `names`, described by `domain`'s profile (a name the
        profile lacks gets an empty parameter schema)."""
        with guard():
            get_domain_profile(domain)  # an unknown domain is an error, not silently "no descriptions"
        return {"tools": openai_tool_schemas(names, domain)}

    @server.tool()
    async def search_tools(
        query: str, library: str = "generated", k: int = 5, ctx: Context | None = None
    ) -> dict[str, Any]:
        """The `k` (1-50) tools of `library` (a tools JSONL / OpenAI tools / MCP tools/list file, or
        "generated") that best match `query`, best first, with their parameter schemas."""
        if not isinstance(k, int) or not 1 <= k <= 50:
            raise ToolError(f"k must be an integer in [1, 50], got {k!r}")
        if library != "generated":
            roots = await refresh_roots(server, ctx)
            with guard():
                library = str(roots.readable(library))
        with guard():
            found = await anyio.to_thread.run_sync(functools.partial(_search_tools, query, library, k))
        return {"tools": found}

    return server


@functools.lru_cache(maxsize=4)
def _library(spec: str, mtime: float) -> Any:
    """A loaded library, kept while its file is unchanged (the BM25 index is built once)."""
    from knowlyrcore.cli import load_tool_library

    return load_tool_library(spec)


def _search_tools(query: str, library: str, k: int) -> list[dict[str, Any]]:
    import os

    mtime = os.stat(library).st_mtime if library != "generated" else 0.0
    return [
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters, "score": round(score, 4)}
        for tool, score in _library(library, mtime).search(query, k=k)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    return run_server(build_server(), argv, prog="knowlyr-core mcp")
