"""Host-side workspace access (no backend needed): path rules, symlinks, trees, archives."""

import os
import tarfile
import zipfile

import pytest

from agentsandbox.workspace import Workspace, WorkspacePathError


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root, "/workspace")


@pytest.mark.parametrize(
    ("path", "parts"),
    [("a/b.txt", ["a", "b.txt"]), ("./a//b/../c", ["a", "c"]), ("/workspace/x", ["x"]), ("/workspace", []), (".", [])],
)
def test_paths_inside_the_workspace(ws, path, parts):
    assert ws.parts(path) == parts


@pytest.mark.parametrize("path", ["..", "../x", "a/../../x", "/etc/passwd", "/workspacex/a", "a\x00b"])
def test_paths_outside_the_workspace_are_refused(ws, path):
    with pytest.raises(WorkspacePathError):
        ws.parts(path)


def test_write_creates_parents_and_read_returns_bytes(ws):
    ws.write_bytes("deep/er/f.txt", b"data")
    assert ws.read_bytes("/workspace/deep/er/f.txt") == b"data"
    assert ws.read_bytes("deep/er/f.txt", max_bytes=2) == b"da"


def test_symlinks_anywhere_on_the_path_are_refused(ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    os.symlink(outside, ws.root / "dirlink")
    os.symlink(outside / "secret", ws.root / "filelink")
    for path in ("dirlink/secret", "filelink"):
        with pytest.raises(WorkspacePathError, match="symlink"):
            ws.read_bytes(path)
        with pytest.raises(WorkspacePathError, match="symlink"):
            ws.write_bytes(path, b"pwned")
    with pytest.raises(WorkspacePathError, match="symlink"):
        ws.write_bytes("dirlink/new", b"pwned")
    assert (outside / "secret").read_text() == "s" and not (outside / "new").exists()


def test_fifo_is_not_opened_as_a_file(ws):
    os.mkfifo(ws.root / "pipe")
    with pytest.raises(WorkspacePathError, match="not a regular file"):
        ws.read_bytes("pipe")


def test_tree_round_trip_keeps_modes_and_symlinks(ws, tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "run.sh").write_text("echo")
    (src / "pkg" / "run.sh").chmod(0o755)
    os.symlink("pkg/run.sh", src / "link")
    assert ws.import_tree(src, "dest") == 1
    assert os.readlink(ws.root / "dest" / "link") == "pkg/run.sh"
    out = tmp_path / "out"
    assert ws.export_tree("dest", out) == 1
    assert os.access(out / "pkg" / "run.sh", os.X_OK) and os.readlink(out / "link") == "pkg/run.sh"


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_archives_with_one_top_folder_are_unwrapped(ws, tmp_path, kind):
    (tmp_path / "proj-1.0").mkdir()
    (tmp_path / "proj-1.0" / "a.py").write_text("x")
    archive = tmp_path / f"proj.{kind}"
    if kind == "tar":
        with tarfile.open(archive, "w") as tar:
            tar.add(tmp_path / "proj-1.0", arcname="proj-1.0")
    else:
        with zipfile.ZipFile(archive, "w") as zf:
            zf.write(tmp_path / "proj-1.0" / "a.py", "proj-1.0/a.py")
    ws.import_tree(archive)
    assert ws.read_bytes("a.py") == b"x"


def test_clear_removes_read_only_directories(ws):
    ws.write_bytes("ro/f", b"x")
    os.chmod(ws.root / "ro", 0o500)
    ws.clear()
    assert os.listdir(ws.root) == []
