"""AllowedRoots: what a server may read and write for a client it does not trust."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from knowlyrcore import (
    AllowedRoots,
    KnowlyrError,
    OverwriteRefusedError,
    PathOutsideRootsError,
    PathRefusedError,
    TooManyFilesError,
)


@pytest.fixture
def root(tmp_path) -> Path:
    path = tmp_path / "root"
    path.mkdir()
    return Path(os.path.realpath(path))


@pytest.fixture
def host_file(tmp_path) -> Path:
    """A file outside the root standing in for /etc/shadow."""
    path = Path(os.path.realpath(tmp_path)) / "shadow"
    path.write_text("root:SECRET-HASH:19000:0:99999:7:::\n")
    return path


def test_security_inside_paths_resolve_and_outside_ones_are_refused(root, host_file):
    roots = AllowedRoots([root])
    assert roots.readable(root / "a.jsonl") == root / "a.jsonl"
    assert roots.readable("a.jsonl", base=root) == root / "a.jsonl"
    assert roots.readable(root) == root
    with pytest.raises(PathOutsideRootsError) as refused:
        roots.readable(host_file)
    message = str(refused.value)
    assert str(host_file) in message and str(root) in message and "--root" in message
    assert "SECRET" not in message  # names the path, never the content
    assert isinstance(refused.value, KnowlyrError)


def test_security_dotdot_is_refused(root, host_file):
    roots = AllowedRoots([root])
    with pytest.raises(PathOutsideRootsError, match="resolves to"):
        roots.readable(root / ".." / host_file.name)
    with pytest.raises(PathOutsideRootsError):
        roots.readable(f"../{host_file.name}", base=root)
    with pytest.raises(PathOutsideRootsError):
        roots.readable("/etc/passwd")


def test_security_symlink_escape_is_refused(root, host_file):
    (root / "link").symlink_to(host_file)
    (root / "dir").symlink_to(host_file.parent, target_is_directory=True)
    roots = AllowedRoots([root])
    for path in (root / "link", root / "dir" / host_file.name):
        with pytest.raises(PathOutsideRootsError):
            roots.readable(path)
    with pytest.raises(PathOutsideRootsError):
        roots.writable(root / "dir" / "new.jsonl")


def test_security_symlink_inside_the_roots_is_fine(root):
    (root / "data.jsonl").write_text("{}\n")
    (root / "alias.jsonl").symlink_to(root / "data.jsonl")
    assert AllowedRoots([root]).readable(root / "alias.jsonl") == root / "data.jsonl"


def test_security_overwrite_of_a_foreign_file_is_refused(root):
    foreign = root / "notes.txt"
    foreign.write_text("mine, not the server's")
    roots = AllowedRoots([root])
    with pytest.raises(OverwriteRefusedError, match="not written by this server"):
        roots.writable(foreign)
    assert foreign.read_text() == "mine, not the server's"


def test_security_overwrite_of_own_file_is_allowed(root):
    roots = AllowedRoots([root])
    target = roots.writable(root / "out.jsonl")  # does not exist yet: fine
    tmp = root / ".out.jsonl.tmp"
    tmp.write_text("{}\n")
    tmp.replace(target)  # writers replace atomically: a new inode each time
    roots.mark_written(target)
    assert roots.writable(root / "out.jsonl") == target
    # replaced behind the server's back by a file it did not write: refused again
    target.unlink()
    target.write_text("someone else's")
    with pytest.raises(OverwriteRefusedError):
        roots.writable(target)


def test_security_write_through_a_symlink_is_refused(root):
    (root / "inner.jsonl").write_text("")
    (root / "out.jsonl").symlink_to(root / "inner.jsonl")
    with pytest.raises(OverwriteRefusedError, match="symlink"):
        AllowedRoots([root]).writable(root / "out.jsonl")


def test_security_write_outside_the_roots_is_refused(root, host_file):
    roots = AllowedRoots([root])
    with pytest.raises(PathOutsideRootsError):
        roots.writable(host_file.parent / "new.jsonl")
    with pytest.raises(PathRefusedError, match="directory"):
        roots.writable(root)
    assert roots.writable_dir(root / "out") == root / "out"
    with pytest.raises(PathOutsideRootsError):
        roots.writable_dir(host_file.parent / "out")


def test_default_root_is_the_working_directory(root, monkeypatch):
    monkeypatch.chdir(root)
    roots = AllowedRoots()
    assert roots.roots == (root,)
    assert roots.readable("x.jsonl") == root / "x.jsonl"
    with pytest.raises(PathRefusedError, match="not a directory"):
        AllowedRoots([root / "missing"])


def test_security_expand_never_walks_outside_the_roots(root, host_file):
    (root / "logs").mkdir()
    for name in ("b.json", "a.jsonl", "skip.txt"):
        (root / "logs" / name).write_text("{}")
    roots = AllowedRoots([root])
    assert roots.expand([root / "logs"], suffixes=[".json", ".jsonl"]) == [root / "logs/a.jsonl", root / "logs/b.json"]
    assert roots.expand([str(root / "logs" / "*.json")]) == [root / "logs/b.json"]
    assert roots.expand([root / "missing.jsonl"]) == [root / "missing.jsonl"]  # reported by the caller
    for hostile in ("/", str(host_file.parent), "/*", f"{root}/../*", "/e*c/pass*"):
        with pytest.raises(PathOutsideRootsError):
            roots.expand([hostile])


def test_security_expand_refuses_a_symlinked_file_pointing_outside(root, host_file):
    (root / "logs").mkdir()
    (root / "logs" / "x.json").symlink_to(host_file)
    roots = AllowedRoots([root])
    with pytest.raises(PathOutsideRootsError):
        roots.expand([root / "logs"])
    with pytest.raises(PathOutsideRootsError):
        roots.expand([f"{root}/logs/*"])


def test_security_expand_is_bounded(root):
    for i in range(12):
        (root / f"{i}.json").write_text("{}")
    roots = AllowedRoots([root], max_files=10)
    with pytest.raises(TooManyFilesError, match="more than 10"):
        roots.expand([root])
    with pytest.raises(TooManyFilesError):
        roots.expand([f"{root}/**"])


class _Session:
    """Just what AllowedRoots reads of an MCP server session."""

    def __init__(self, uris, supports_roots=True):
        self.client_capabilities = SimpleNamespace(roots=SimpleNamespace() if supports_roots else None)
        self.uris = uris

    async def list_roots(self):
        return SimpleNamespace(roots=[SimpleNamespace(uri=u) for u in self.uris])


def test_roots_declared_by_the_client_are_added(root, tmp_path):
    other = Path(os.path.realpath(tmp_path)) / "client root"
    other.mkdir()
    roots = AllowedRoots([root])
    with pytest.raises(PathOutsideRootsError):
        roots.readable(other / "a.jsonl")
    declared = [other.as_uri(), "https://example.com/repo", (root / "missing").as_uri()]
    asyncio.run(roots.refresh_client_roots(_Session(declared)))
    assert roots.roots == (root, other)
    assert roots.readable(other / "a.jsonl") == other / "a.jsonl"
    # the client's list is read again on each refresh: a root it drops is gone
    asyncio.run(roots.refresh_client_roots(_Session([])))
    with pytest.raises(PathOutsideRootsError):
        roots.readable(other / "a.jsonl")
    # a client without the roots capability is never asked
    asyncio.run(roots.refresh_client_roots(_Session([other.as_uri()], supports_roots=False)))
    assert roots.roots == (root,)
