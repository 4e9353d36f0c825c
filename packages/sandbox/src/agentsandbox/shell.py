"""``PersistentShell``: one long-lived ``bash`` per episode, driven by a framed protocol.

Starting a process per command costs 70–90 ms through ``docker exec``; writing a request to
a shell that is already running costs well under a millisecond. The shell runs a small read
loop (``DRIVER``) that takes NUL-delimited requests from stdin and answers each with the
command's output followed by a sentinel carrying the request's own random nonce, the exit
code and the working directory:

    request   "sh\\0<nonce>\\0<command>\\0"            -> eval'd in the shell itself (cd/export persist)
    request   "argv\\0<nonce>\\0<n>\\0<a1>\\0...<an>\\0" -> run as an argument vector, never parsed by a shell
    request   "reset\\0<nonce>\\0"                     -> kill every other process, restore the workspace
                                                       snapshot, wipe /tmp and ``exec`` a fresh shell
    reply     <output>"\\n\\0<nonce>:<exit code>:<cwd>\\0"

The nonce is fresh for every request and lives only in an unexported shell variable, never in
the environment: a background job the agent left running cannot learn the nonce of a later
request, so it cannot print a sentinel that ends that request early with a forged exit code
(the forged-test-pass attack), and a late reply to an earlier request (after a timeout) is
recognised as stale and dropped instead of being taken for the next one. Rewards never rest on
this channel anyway: the final test run happens in a fresh shell after every other process in
the sandbox is killed (``Sandbox.run_clean``).

Commands read ``/dev/null`` as stdin, so nothing they do can swallow the next request.
The transport (a pipe to a local process or a Docker attach socket) is supplied by the
backend; this module knows nothing about containers.
"""

from __future__ import annotations

import os
import secrets
import select
import shlex
import subprocess
import time
from dataclasses import dataclass

#: The bash program every sandbox shell runs (``bash -c BOOT``, which evals it). The reset
#: script and the program text itself come from the environment, so a reset can ``exec`` an
#: identical fresh shell without the host sending anything again. The only per-shell value in
#: the environment is ``KNOWLYR_GREETING``, the nonce of the request that started the shell
#: (spent by the time any other process runs); it is unset at once.
DRIVER = r"""
exec 2>&1
__k_reply() { builtin printf '\n\0%s:%d:%s\0' "$__k_nonce" "$1" "$PWD"; }
__k_nonce=$KNOWLYR_GREETING
builtin unset KNOWLYR_GREETING
__k_reply 0
while IFS= builtin read -r -d '' __k_kind && IFS= builtin read -r -d '' __k_nonce; do
  case "$__k_kind" in
    sh)
      IFS= builtin read -r -d '' __k_cmd
      builtin eval "$__k_cmd" </dev/null
      __k_reply $?
      ;;
    argv)
      IFS= builtin read -r -d '' __k_n
      __k_argv=()
      for ((__k_i = 0; __k_i < __k_n; __k_i++)); do
        IFS= builtin read -r -d '' __k_a
        __k_argv+=("$__k_a")
      done
      builtin command -- "${__k_argv[@]}" </dev/null
      __k_reply $?
      ;;
    reset)
      builtin eval "$KNOWLYR_RESET"
      __k_reply 1
      ;;
  esac
done
"""


#: The shell's command line; the driver itself travels in the environment, which keeps
#: ``ps`` output inside the sandbox readable.
BOOT = 'builtin eval "$KNOWLYR_DRIVER_TEXT"'

#: Scratch places a process may write outside the workspace (``HOME`` is ``/tmp``). A reset
#: empties them, so nothing an episode leaves there (a ``.pth`` under ``~/.local``, a
#: ``~/.gitconfig`` with hooks, a cached answer) reaches the next episode.
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


#: Bash that empties the scratch directories (made writable first: an episode may have locked a
#: directory). Run by every reset and before every graded run.
WIPE_SCRATCH = (
    f"chmod -R u+w {' '.join(SCRATCH_DIRS)} 2>/dev/null; "
    f'for __k_d in {" ".join(SCRATCH_DIRS)}; do [ -w "$__k_d" ] && find "$__k_d" -mindepth 1 -delete 2>/dev/null; done; '
)


def reset_script(workdir: str, snapshot_dir: str, env: dict[str, str]) -> str:
    """Bash run in-shell on reset: kill every other process, restore the snapshot, re-exec.

    ``kill -9 -1`` signals every process the shell may signal except itself and the
    namespace's init, i.e. everything the previous episode left behind. The scratch
    directories are emptied (made writable first: an episode may have locked a directory).
    ``exec env -i`` replaces the shell in place (same pipe, same exec session) with a pristine
    one, so no function, alias, trap or variable survives; it greets with the reset's nonce.
    """
    w, s = shlex.quote(workdir), shlex.quote(snapshot_dir)
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    return (
        # repeated until nothing is left to signal: a fork bomb forks while a sweep runs
        "for __k_i in {1..50}; do builtin kill -9 -1 2>/dev/null || break; done; "
        f"builtin cd {w} || builtin exit 70; "
        f"chmod -R u+w {w} 2>/dev/null; find {w} -mindepth 1 -delete 2>/dev/null; "
        + WIPE_SCRATCH
        + f"cp -dR --preserve=mode,timestamps {s}/. {w}/ || builtin exit 71; "
        f'builtin exec env -i {assignments} KNOWLYR_GREETING="$__k_nonce" KNOWLYR_RESET="$KNOWLYR_RESET" '
        'KNOWLYR_DRIVER_TEXT="$KNOWLYR_DRIVER_TEXT" KNOWLYR_BOOT="$KNOWLYR_BOOT" bash --noprofile --norc -c "$KNOWLYR_BOOT"'
    )


class ShellError(RuntimeError):
    """The shell is gone (exited, killed) or its transport failed."""


@dataclass
class ShellOutput:
    """What one request produced."""

    output: str
    exit_code: int | None
    cwd: str | None
    timed_out: bool = False
    truncated: bool = False
    overflowed: bool = False
    shell_died: bool = False


class Transport:
    """A byte stream to the shell's stdin and from its stdout (stderr merged)."""

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def recv(self, timeout: float) -> bytes | None:
        """Bytes available within ``timeout`` seconds; ``None`` on timeout, ``b""`` at EOF."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class PipeTransport(Transport):
    """Pipes to a local child process (the local backend's ``bwrap ... bash``)."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self._out = process.stdout.fileno()

    def send(self, data: bytes) -> None:
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise ShellError(f"shell stdin closed: {exc}") from None

    def recv(self, timeout: float) -> bytes | None:
        ready, _, _ = select.select([self._out], [], [], max(timeout, 0))
        if not ready:
            return None
        return os.read(self._out, 65536)

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class PersistentShell:
    """Sends requests to a running ``DRIVER`` loop and parses its framed replies.

    ``greeting`` is the nonce the shell was started with (``KNOWLYR_GREETING``); every later
    request carries a fresh one, and only a sentinel with the current request's nonce ends it.
    """

    def __init__(self, transport: Transport, greeting: str, *, max_output_bytes: int, overflow_bytes: int):
        self.transport = transport
        self.max_output_bytes = max_output_bytes
        self.overflow_bytes = overflow_bytes
        self._nonce = greeting
        self._pending = bytearray()
        self.cwd: str | None = None

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_hex(16)

    def wait_ready(self, timeout: float) -> ShellOutput:
        """Read the greeting the driver prints on start."""
        return self._read_reply(timeout)

    def run(self, command: str, timeout: float) -> ShellOutput:
        if "\x00" in command:
            raise ValueError("a command cannot contain NUL bytes")
        return self._request(b"sh", command.encode() + b"\x00", timeout)

    def run_argv(self, argv: list[str], timeout: float) -> ShellOutput:
        if not argv or any("\x00" in a for a in argv):
            raise ValueError("argv must be non-empty and free of NUL bytes")
        payload = str(len(argv)).encode() + b"\x00" + b"".join(a.encode() + b"\x00" for a in argv)
        return self._request(b"argv", payload, timeout)

    def reset(self, timeout: float) -> ShellOutput:
        """Ask the shell to reset itself; the fresh shell greets with this request's nonce."""
        return self._request(b"reset", b"", timeout)

    def close(self) -> None:
        self.transport.close()

    def _request(self, kind: bytes, payload: bytes, timeout: float) -> ShellOutput:
        # Anything left over (a background job's late output) belongs to no request.
        self._pending.clear()
        self._nonce = self.new_nonce()
        try:
            self.transport.send(kind + b"\x00" + self._nonce.encode() + b"\x00" + payload)
        except ShellError:
            return ShellOutput("", None, None, shell_died=True)
        return self._read_reply(timeout)

    def _read_reply(self, timeout: float) -> ShellOutput:
        deadline = time.monotonic() + timeout
        buf = self._pending
        kept = bytearray()
        total = 0
        # The sentinel is "\n\0<nonce>:": bash may write the "\n" and the rest separately, and a
        # background job's output can land in between, so only "\0<nonce>:" is matched and the
        # newline right before it (when it is there) is dropped from the output.
        marker = b"\x00" + self._nonce.encode() + b":"

        def flush(upto: int) -> None:
            nonlocal total
            room = self.max_output_bytes - len(kept)
            if room > 0:
                kept.extend(buf[: min(upto, room)])
            total += upto
            del buf[:upto]

        while True:
            start = buf.find(marker)
            if start >= 0:
                end = buf.find(b"\x00", start + len(marker))
                if end >= 0:
                    newline = start > 0 and buf[start - 1 : start] == b"\n"
                    flush(start - 1 if newline else start)
                    del buf[: 1 if newline else 0]  # buf now starts with the marker
                    end = buf.find(b"\x00", len(marker))
                    code, _, cwd = bytes(buf[len(marker) : end]).decode(errors="replace").partition(":")
                    del buf[: end + 1]
                    self.cwd = cwd
                    return ShellOutput(_decode(kept), int(code), cwd, truncated=total > self.max_output_bytes)
            else:
                # Keep only a tail long enough to hold a marker split across reads (and its newline).
                flush(max(0, len(buf) - len(marker) - 1))
            if total > self.overflow_bytes:
                return ShellOutput(_decode(kept), None, None, truncated=True, overflowed=True)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ShellOutput(_decode(kept), None, None, timed_out=True, truncated=total > self.max_output_bytes)
            try:
                chunk = self.transport.recv(remaining)
            except OSError:
                chunk = b""
            if chunk is None:
                continue
            if not chunk:
                flush(len(buf))
                return ShellOutput(_decode(kept), None, None, shell_died=True, truncated=total > self.max_output_bytes)
            buf.extend(chunk)


def _decode(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", errors="replace")
