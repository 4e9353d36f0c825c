"""Allowed roots: which host paths a server may read and write for a client it does not trust.

Every MCP server of knowlyr takes file paths from its client (in the end, from a model). An
``AllowedRoots`` decides which of them it may touch:

- the roots are the working directory at start, or each ``--root DIR`` given instead, plus the
  directories the MCP client declares through ``roots/list`` (the client application, not the
  model, declares them, so they are trusted like a ``--root``);
- ``readable(path)`` resolves the path (``..`` and symlinks included) and refuses it outside the
  roots;
- ``writable(path)`` does the same, refuses a symlink at the target and refuses to replace an
  existing file this process did not write (``mark_written`` records the ones it did);
- ``expand(inputs)`` turns files, directories and globs into files, never starting a walk
  outside the roots and visiting at most ``max_files`` entries.

Errors (``PathRefusedError`` and its subclasses) name the path and the roots, never file content.

Example:
    >>> import tempfile, os
    >>> root = os.path.realpath(tempfile.mkdtemp())
    >>> roots = AllowedRoots([root])
    >>> roots.readable(os.path.join(root, "a.jsonl")).name
    'a.jsonl'
    >>> roots.readable(os.path.join(root, "..", "etc"))
    Traceback (most recent call last):
    ...
    knowlyrcore.roots.PathOutsideRootsError: ...
"""

from __future__ import annotations

import argparse
import glob
import os
import stat
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from knowlyrcore.errors import InputError

MAX_FILES = 10_000  # directory entries one expand() may visit


class PathRefusedError(InputError):
    """A path argument a server will not use; the message names the path and why."""


class PathOutsideRootsError(PathRefusedError):
    """The path resolves (symlinks and ``..`` followed) outside every allowed root."""


class OverwriteRefusedError(PathRefusedError):
    """Writing would replace a file this process did not write, or go through a symlink."""


class TooManyFilesError(PathRefusedError):
    """A directory or glob names more files than one call may visit."""


def _identity(info: os.stat_result) -> tuple[int, ...]:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


class AllowedRoots:
    """The directories a server may read and write in, and the files it wrote itself."""

    def __init__(self, roots: Iterable[str | os.PathLike] | None = None, *, max_files: int = MAX_FILES):
        given = [Path(os.path.realpath(r)) for r in roots or ()] or [Path(os.path.realpath(os.getcwd()))]
        for root in given:
            if not root.is_dir():
                raise PathRefusedError(f"root {root} is not a directory")
        self.server_roots: tuple[Path, ...] = tuple(dict.fromkeys(given))
        self.client_roots: tuple[Path, ...] = ()
        self.max_files = max_files
        # path -> its inode, size and times right after the write: a file replaced or changed since (even
        # on a reused inode) no longer matches
        self._written: dict[Path, tuple[int, ...]] = {}

    @property
    def roots(self) -> tuple[Path, ...]:
        return self.server_roots + tuple(r for r in self.client_roots if r not in self.server_roots)

    def _describe(self) -> str:
        return ", ".join(str(r) for r in self.roots)

    def _absolute(self, path: str | os.PathLike, base: str | os.PathLike | None) -> str:
        text = os.fspath(path)
        if not text or "\0" in text:
            raise PathRefusedError(f"invalid path {text!r}")
        return os.path.join(os.fspath(base) if base is not None else os.getcwd(), text)

    def _check_inside(self, given: str | os.PathLike, resolved: Path) -> Path:
        if not any(resolved == root or resolved.is_relative_to(root) for root in self.roots):
            shown = os.fspath(given)
            where = f"{shown} (resolves to {resolved})" if shown != str(resolved) else shown
            raise PathOutsideRootsError(
                f"{where} is outside the allowed roots ({self._describe()}); "
                "start the server with --root DIR to allow another directory"
            )
        return resolved

    def readable(self, path: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
        """``path`` resolved (relative to ``base``, default the working directory); refused outside the roots.

        Whether the file exists is left to the caller, which reports a missing file its own way.
        """
        resolved = Path(os.path.realpath(self._absolute(path, base)))
        return self._check_inside(path, resolved)

    def writable(self, path: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
        """Where writing ``path`` is allowed: inside the roots, not through a symlink, and not over a
        file this process did not write (a file that does not exist yet is fine)."""
        absolute = self._absolute(path, base)
        parent, name = os.path.split(absolute)
        if name in ("", ".", ".."):
            raise PathRefusedError(f"{os.fspath(path)} names a directory; name a file to write")
        target = Path(os.path.realpath(parent)) / name
        self._check_inside(path, target)
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            return target
        if stat.S_ISLNK(info.st_mode):
            raise OverwriteRefusedError(f"{target} is a symlink; refusing to write through it")
        if stat.S_ISDIR(info.st_mode):
            raise PathRefusedError(f"{target} is a directory; name a file to write")
        if self._written.get(target) != _identity(info):
            raise OverwriteRefusedError(
                f"{target} already exists and was not written by this server; "
                "refusing to replace it (choose a new name or remove it yourself)"
            )
        return target

    def writable_dir(self, path: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
        """A directory to write into, resolved (symlinks included): inside the roots and not an existing
        non-directory. Whether it may hold what it already holds is the caller's rule."""
        target = self.readable(path, base)
        if target.exists() and not target.is_dir():
            raise PathRefusedError(f"{target} exists and is not a directory")
        return target

    def mark_written(self, path: str | os.PathLike) -> None:
        """Record that this process just wrote ``path`` (as returned by ``writable``), so it may replace it later."""
        target = Path(path)
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            return
        self._written[target] = _identity(info)

    def expand(
        self,
        inputs: Iterable[str | os.PathLike],
        suffixes: Iterable[str] | None = None,
        base: str | os.PathLike | None = None,
    ) -> list[Path]:
        """Files named by ``inputs``: files as given, directories walked (files with one of
        ``suffixes``, any file without), globs expanded; all inside the roots, at most
        ``max_files`` entries visited. A path that does not exist is returned for the caller to report."""
        wanted = tuple(s.lower() for s in suffixes) if suffixes is not None else None
        budget = [self.max_files]
        files: list[Path] = []
        for item in inputs:
            text = os.fspath(item)
            if glob.has_magic(text):
                files.extend(self._glob(text, base, budget))
                continue
            resolved = self.readable(text, base)
            if resolved.is_dir():
                files.extend(
                    sorted(
                        p for p in self._walk(text, resolved, budget) if wanted is None or p.suffix.lower() in wanted
                    )
                )
            else:
                files.append(resolved)
        return files

    def _spend(self, given: str, budget: list[int]) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise TooManyFilesError(
                f"{given}: more than {self.max_files} files or directories to visit; name fewer or smaller inputs"
            )

    def _walk(self, given: str, directory: Path, budget: list[int]) -> Iterator[Path]:
        for dirpath, dirnames, filenames in os.walk(directory):  # never follows directory symlinks
            dirnames.sort()
            for _ in dirnames:
                self._spend(given, budget)
            for name in sorted(filenames):
                self._spend(given, budget)
                path = Path(dirpath) / name
                yield self.readable(path)  # a symlinked file must point inside the roots too

    def _glob(self, pattern: str, base: str | os.PathLike | None, budget: list[int]) -> list[Path]:
        absolute = self._absolute(pattern, base)
        parts = Path(absolute).parts
        fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
        start = self.readable(Path(*parts[:fixed]))  # the walk itself must start inside the roots
        found = []
        for match in glob.iglob(str(start.joinpath(*parts[fixed:])), recursive=True):
            self._spend(pattern, budget)
            if os.path.isfile(match):
                found.append(self.readable(match))
        return sorted(found)

    async def refresh_client_roots(self, session: object) -> None:
        """Replace the client roots by what the MCP client declares (``roots/list``), if it supports roots.

        ``session`` is the MCP server session (``ctx.session``); only ``file://`` roots that are
        existing directories count. A client without the capability, or whose answer fails, has none.
        """
        capabilities = getattr(session, "client_capabilities", None)  # mcp >= 2
        if capabilities is None:  # mcp 1.x
            capabilities = getattr(getattr(session, "client_params", None), "capabilities", None)
        if capabilities is None or getattr(capabilities, "roots", None) is None:
            self.client_roots = ()
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # mcp 2 marks the roots capability deprecated (SEP-2577)
                result = await session.list_roots()  # type: ignore[attr-defined]
        except Exception:  # the client's answer is an error or malformed: it declares no roots
            self.client_roots = ()
            return
        declared = []
        for root in getattr(result, "roots", ()):
            url = urlparse(str(root.uri))
            if url.scheme == "file" and url.netloc in ("", "localhost"):
                path = Path(os.path.realpath(unquote(url.path)))
                if path.is_dir():
                    declared.append(path)
        self.client_roots = tuple(dict.fromkeys(declared))


def parse_server_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> tuple[argparse.Namespace, AllowedRoots]:
    """Add ``--root`` to a server's ``parser``, parse ``argv`` and build its roots.

    A root that does not exist is a usage error (exit 2, one line), as any bad flag is.
    """
    add_roots_argument(parser)
    args = parser.parse_args(argv)
    try:
        return args, AllowedRoots(args.root)
    except PathRefusedError as exc:
        parser.error(str(exc))


def add_roots_argument(parser: argparse.ArgumentParser) -> None:
    """``--root DIR`` (repeatable) on a server's command line; read it back with ``AllowedRoots(args.root)``."""
    parser.add_argument(
        "--root",
        action="append",
        metavar="DIR",
        help="directory the server may read and write in (repeatable; default: the working directory); "
        "roots the MCP client declares are added",
    )
