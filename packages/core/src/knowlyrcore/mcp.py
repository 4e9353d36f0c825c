"""How every knowlyr MCP server meets the mcp SDK: one import shim, one error rule, one launcher.

- ``MCPServer``, ``Context`` and ``ToolError`` are the installed SDK's (mcp >= 2:
  ``mcp.server.mcpserver``; mcp 1.21+: ``mcp.server.fastmcp``). They are imported on first use,
  so this module (and ``knowlyr-<pkg> mcp`` without the extra) loads without the SDK.
- ``new_server(name, instructions)`` builds a server whose ``roots`` (``AllowedRoots``, the
  working directory until ``run_server`` parses ``--root``) every tool checks paths against.
- ``guard()`` turns a deliberate error (``KnowlyrError``, ``ValueError``) into a ``ToolError``
  carrying the same one-line message the CLI prints, never a traceback.
- ``run_server(server, argv, prog=...)`` parses the server's options and ``--root``, then serves
  over stdio until the client hangs up.
- ``run_module(dist, module, argv)`` is ``knowlyr-<pkg> mcp``: it starts the same server as
  ``python -m <module>``; without the SDK it prints ``missing_sdk(dist)``, one ``error: ...``
  line naming the extra, and returns 2.
- ``run_as_main(dist, module)`` is ``python -m <module>``: ``run_module`` with the command line,
  then exit. A server module calls it first thing when run as ``__main__``, before its imports
  that need the extra (the SDK, anyio), so that run ends in the same one line without the SDK.

A server module then reads::

    from knowlyrcore.mcp import Context, guard, new_server, refresh_roots, run_server

    server = new_server("knowlyr-x", instructions="...")

    @server.tool()
    async def stats(path: str, ctx: Context | None = None) -> dict:
        roots = await refresh_roots(server, ctx)
        with guard():
            return summarize(roots.readable(path))

    def main(argv=None) -> int:
        return run_server(server, argv, prog="knowlyr-x mcp")

and, for ``python -m x.mcp_server``, above those imports::

    if __name__ == "__main__":
        from knowlyrcore.mcp import run_as_main

        run_as_main("knowlyr-x", "x.mcp_server")
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from knowlyrcore.errors import KnowlyrError, MissingExtraError
from knowlyrcore.roots import AllowedRoots, parse_server_args

if TYPE_CHECKING:  # at run time these come from __getattr__, from whichever SDK is installed
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

_SDK_NAMES = ("MCPServer", "Context", "ToolError")


def _sdk() -> dict[str, Any]:
    try:  # mcp >= 2
        from mcp.server.mcpserver import Context, MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import Context
        from mcp.server.fastmcp import FastMCP as MCPServer
        from mcp.server.fastmcp.exceptions import ToolError
    return {"MCPServer": MCPServer, "Context": Context, "ToolError": ToolError}


def __getattr__(name: str) -> Any:  # PEP 562: `from knowlyrcore.mcp import ToolError` imports the SDK then
    if name in _SDK_NAMES:
        found = _sdk()
        globals().update(found)
        return found[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def new_server(name: str, instructions: str) -> Any:
    """An ``MCPServer`` named ``name`` with ``roots`` set to the working directory until ``run_server``."""
    server = __getattr__("MCPServer")(name, instructions=instructions)
    server.roots = AllowedRoots()
    return server


@contextlib.contextmanager
def guard(*also: type[Exception]) -> Iterator[None]:
    """Re-raise ``KnowlyrError``, ``ValueError`` (and the error types in ``also``, for a package whose
    errors do not derive from ``KnowlyrError``) as a ``ToolError`` with their one-line message."""
    try:
        yield
    except (KnowlyrError, ValueError, *also) as exc:
        raise __getattr__("ToolError")(str(exc)) from None


async def refresh_roots(server: Any, ctx: Any | None) -> AllowedRoots:
    """``server.roots`` with the roots the client declares right now (asked on the event loop)."""
    if ctx is not None:
        await server.roots.refresh_client_roots(ctx.session)
    return server.roots


def run_server(
    server: Any,
    argv: Sequence[str] | None = None,
    *,
    prog: str,
    parser: argparse.ArgumentParser | None = None,
    configure: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Parse ``argv`` (``parser``'s options plus ``--root``), give ``server`` its roots, call
    ``configure(args)`` for the rest, then serve over stdio until the client hangs up.

    A bad option or a root that is not a directory is a usage error (one line, exit 2).
    """
    if parser is None:
        parser = argparse.ArgumentParser(prog=prog, description=f"MCP server (stdio) for {prog.split()[0]}")
    args, server.roots = parse_server_args(parser, argv)
    if configure is not None:
        configure(args)
    server.run("stdio")
    return 0


def missing_sdk(dist: str) -> str:
    """The line printed when ``<dist> mcp`` runs without the mcp SDK (exit code 2)."""
    return f"error: {MissingExtraError(f'{dist} mcp', dist, 'mcp', module='mcp')}"


def run_module(dist: str, module: str, argv: Sequence[str]) -> int:
    """``<dist> mcp ARGS``: run ``module.main(ARGS)``, the server ``python -m <module>`` starts.

    Without the mcp SDK: ``missing_sdk(dist)`` on stderr, exit code 2, no traceback.
    """
    try:
        _sdk()  # first: a server module may import the SDK only when it builds its server
        server_module = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != "mcp" and not (exc.name or "").startswith("mcp."):
            raise
        print(missing_sdk(dist), file=sys.stderr)
        return 2
    return server_module.main(list(argv)) or 0


def run_as_main(dist: str, module: str) -> NoReturn:
    """``python -m <module>``: ``run_module(dist, module, sys.argv[1:])``, then exit with its code.

    ``module`` is imported afresh under its own name (the ``__main__`` copy stops here), so
    without the mcp SDK the run ends in ``missing_sdk(dist)``, exit code 2, no traceback.
    """
    sys.exit(run_module(dist, module, sys.argv[1:]))


__all__ = [
    "Context",
    "MCPServer",
    "ToolError",
    "guard",
    "missing_sdk",
    "new_server",
    "refresh_roots",
    "run_as_main",
    "run_module",
    "run_server",
]
