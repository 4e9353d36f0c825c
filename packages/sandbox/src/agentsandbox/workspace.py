"""``Workspace``: the host directory mounted as the sandbox's workspace, and safe access to it.

Both backends bind-mount one host directory as ``/workspace``, so reading, writing, uploading
and downloading files never goes through a shell (no quoting, no injection) and costs a
system call rather than a container round-trip.

Because a process inside the sandbox can plant symlinks in that directory, every host-side
access walks the path one component at a time with ``O_NOFOLLOW`` relative to a directory
file descriptor: a symlink anywhere on the path is refused, and ``..`` cannot climb above the
workspace. This is the property that keeps ``read_file("../../etc/shadow")`` or a symlink to
``/etc/passwd`` from touching the host.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from knowlyrcore.errors import KnowlyrError


class WorkspacePathError(KnowlyrError, ValueError):
    """A path names something outside the workspace, or passes through a symlink."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Workspace:
    """A host directory seen by the sandbox as ``workdir``.

    ``owner`` (uid, gid) is given to everything created here when the sandbox runs as a
    different user than the host process (the local backend's private uid).
    """

    def __init__(self, root: str | os.PathLike, workdir: str = "/workspace", owner: tuple[int, int] | None = None):
        self.root = Path(root)
        self.workdir = workdir.rstrip("/") or "/"
        self.owner = owner

    # -- paths ---------------------------------------------------------------------------
    def parts(self, path: str) -> list[str]:
        """The components of ``path`` below the workspace root, or ``WorkspacePathError``.

        Relative paths are relative to the workspace; absolute paths must lie under
        ``workdir``. ``..`` is resolved lexically and may not leave the workspace.
        """
        if not isinstance(path, str) or "\x00" in path:
            raise WorkspacePathError(f"invalid path {path!r}")
        if path.startswith("/"):
            prefix = self.workdir + "/"
            if path == self.workdir:
                path = ""
            elif path.startswith(prefix):
                path = path[len(prefix) :]
            else:
                raise WorkspacePathError(f"path {path!r} is outside the workspace {self.workdir}")
        parts: list[str] = []
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    raise WorkspacePathError(f"path {path!r} climbs out of the workspace")
                parts.pop()
            else:
                parts.append(part)
        return parts

    def display(self, parts: list[str]) -> str:
        return "/".join(parts) or "."

    def _open_dir(self, parts: list[str], *, create: bool = False) -> int:
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for i, part in enumerate(parts):
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    self._chown(part, fd)
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        kind = "a symlink" if _is_symlink(part, fd) else "not a directory"
                        raise WorkspacePathError(
                            f"{self.display(parts[: i + 1])} is {kind}; symlinks are not followed"
                        ) from None
                    raise
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _chown(self, name: str, dir_fd: int) -> None:
        if self.owner is not None:
            os.chown(name, *self.owner, dir_fd=dir_fd, follow_symlinks=False)

    # -- files ---------------------------------------------------------------------------
    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        parts = self.parts(path)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        fd = self._open_dir(parts[:-1])
        try:
            try:
                file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise WorkspacePathError(f"{path} is a symlink; symlinks are not followed") from None
                raise
        finally:
            os.close(fd)
        with os.fdopen(file_fd, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            if not stat.S_ISREG(mode):
                raise WorkspacePathError(f"{path} is not a regular file")
            return handle.read() if max_bytes is None else handle.read(max_bytes)

    def write_bytes(self, path: str, data: bytes) -> None:
        parts = self.parts(path)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        fd = self._open_dir(parts[:-1], create=True)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            try:
                file_fd = os.open(parts[-1], flags, 0o644, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise WorkspacePathError(f"{path} is a symlink; symlinks are not followed") from None
                raise
            with os.fdopen(file_fd, "wb") as handle:
                if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                    raise WorkspacePathError(f"{path} is not a regular file")
                handle.write(data)
            self._chown(parts[-1], fd)
        finally:
            os.close(fd)

    def remove(self, path: str) -> bool:
        """Delete a file, symlink or whole directory at ``path`` (never following symlinks); False if absent."""
        parts = self.parts(path)
        if not parts:
            raise WorkspacePathError("cannot remove the workspace itself")
        try:
            fd = self._open_dir(parts[:-1])
        except FileNotFoundError:
            return False
        try:
            if not _exists(parts[-1], fd):
                return False
            _clear_dest_entry(parts[-1], fd)
            return True
        finally:
            os.close(fd)

    # -- trees ---------------------------------------------------------------------------
    def import_tree(self, source: str | os.PathLike, dest: str = ".") -> int:
        """Copy a host directory (or archive) into the workspace at ``dest``; return files copied."""
        source = Path(source)
        if source.is_file():
            return self._import_archive(source, dest)
        if not source.is_dir():
            raise FileNotFoundError(errno.ENOENT, "no such directory or archive", str(source))
        base = self.parts(dest)
        count = 0
        for dirpath, dirnames, filenames in os.walk(source):
            rel = Path(dirpath).relative_to(source).parts
            dir_fd = self._open_dir([*base, *rel], create=True)
            try:
                for name in dirnames + filenames:
                    src = os.path.join(dirpath, name)
                    st = os.lstat(src)
                    if stat.S_ISLNK(st.st_mode):
                        _replace_with_symlink(os.readlink(src), name, dir_fd)
                        self._chown(name, dir_fd)
                        if name in dirnames:
                            dirnames.remove(name)
                    elif stat.S_ISREG(st.st_mode):
                        with os.fdopen(os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as handle:
                            self.write_bytes("/".join([*base, *rel, name]), handle.read())
                        os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=dir_fd)
                        count += 1
            finally:
                os.close(dir_fd)
        return count

    def _import_archive(self, archive: Path, dest: str) -> int:
        import tarfile
        import tempfile
        import zipfile

        with tempfile.TemporaryDirectory(prefix="knowlyr-archive-") as tmp:
            if zipfile.is_zipfile(archive):
                with zipfile.ZipFile(archive) as zf:
                    zf.extractall(tmp)
            elif tarfile.is_tarfile(archive):
                with tarfile.open(archive) as tf:
                    tf.extractall(tmp, filter="data")
            else:
                raise ValueError(f"{archive} is neither a directory nor a tar/zip archive")
            entries = os.listdir(tmp)
            # An archive holding one top-level folder (as GitHub's) is that folder's contents.
            root = (
                os.path.join(tmp, entries[0])
                if len(entries) == 1 and os.path.isdir(os.path.join(tmp, entries[0]))
                else tmp
            )
            return self.import_tree(root, dest)

    def export_tree(self, source: str, dest: str | os.PathLike) -> int:
        """Copy ``source`` (a workspace directory) to the host directory ``dest``; return files copied.

        Nothing is followed on either side: the workspace is walked with ``O_NOFOLLOW``, and the
        destination is written through directory file descriptors, so a symlink left in
        ``dest`` by an earlier download (``a -> /etc``) is replaced, never written through.
        Symlinks in the workspace are recreated as symlinks (their targets are not copied).
        """
        parts = self.parts(source)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        count = 0
        top = self._open_dir(parts)
        # ``dest`` itself is the caller's choice and may be a symlink; below it nothing is followed.
        out_top = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
                out_fd = _open_dest_dir(out_top, Path(dirpath).parts)
                try:
                    for name in dirnames + filenames:
                        st = os.lstat(name, dir_fd=dir_fd)
                        if stat.S_ISDIR(st.st_mode):
                            os.close(_open_dest_dir(out_fd, (name,)))
                        elif stat.S_ISLNK(st.st_mode):
                            _clear_dest_entry(name, out_fd)
                            os.symlink(os.readlink(name, dir_fd=dir_fd), name, dir_fd=out_fd)
                        elif stat.S_ISREG(st.st_mode):
                            _clear_dest_entry(name, out_fd, keep_regular=True)
                            src_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
                            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
                            with (
                                os.fdopen(src_fd, "rb") as src,
                                os.fdopen(os.open(name, flags, 0o600, dir_fd=out_fd), "wb") as out,
                            ):
                                shutil.copyfileobj(src, out)
                                os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
                            count += 1
                finally:
                    os.close(out_fd)
        finally:
            os.close(top)
            os.close(out_top)
        return count

    def clear(self) -> None:
        """Remove everything inside the workspace (the directory itself stays, it is mounted)."""
        for entry in os.scandir(self.root):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, onerror=_force_remove)
            else:
                os.unlink(entry.path)


def chown_tree(root: str | os.PathLike, owner: tuple[int, int]) -> None:
    """Give ``root`` and everything below it (symlinks themselves, not targets) to ``owner``."""
    os.chown(root, *owner)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), *owner, follow_symlinks=False)


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _clear_dest_entry(name: str, dir_fd: int, *, keep_regular: bool = False) -> None:
    """Remove ``name`` under ``dir_fd`` (a symlink, file or whole directory) so it can be recreated.

    ``keep_regular`` leaves a regular file in place (it is truncated through ``O_NOFOLLOW``).
    """
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        try:
            for entry in os.listdir(sub):
                _clear_dest_entry(entry, sub)
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=dir_fd)
    elif not (keep_regular and stat.S_ISREG(st.st_mode)):
        os.unlink(name, dir_fd=dir_fd)


def _open_dest_dir(top_fd: int, parts: tuple[str, ...]) -> int:
    """A new fd of the directory ``parts`` below ``top_fd``, created as needed, never through a symlink.

    Whatever is in the way (a symlink, a file) is removed and replaced by a real directory.
    """
    fd = os.dup(top_fd)
    try:
        for part in parts:
            if part == ".":
                continue
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                _clear_dest_entry(part, fd)
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _replace_with_symlink(target: str, name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    os.symlink(target, name, dir_fd=dir_fd)


def _force_remove(func, path, _exc_info) -> None:
    # A sandboxed process may leave read-only directories behind; make them writable and retry.
    os.chmod(os.path.dirname(path), 0o700)
    func(path)
