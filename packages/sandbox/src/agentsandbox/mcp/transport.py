"""A bounded stdio transport for the mcp SDK's ``ClientSession``.

The SDK's own ``stdio_client`` reads a server's stdout line by line with no limit: a server that
prints one endless line, or floods notifications, grows the client's memory until the host
gives out. This transport hands the session the same pair of memory object streams (of
``SessionMessage``) but reads the pipes itself, in chunks, and holds the server to its bounds:

- one message (a line) over ``max_message_bytes``, even before its newline arrives;
- more than ``max_call_bytes`` read since the last ``begin_call`` (many small messages);
- a line that is not a JSON-RPC message (a stray ``print`` on stdout breaks the protocol);
- end of its stdout (the server exited) or of its stdin (it stopped reading).

Any of these sets ``failure`` (one phrase: what the server did) and closes the session's read
stream, so every pending request ends at once with "connection closed"; the client then reports
``failure``, not the SDK's message. The server's stderr is drained into ``StderrTail`` (its last
few KB), so a full stderr pipe cannot block the server and an error can quote its last line.

The transport reads duplicates of the pipes' descriptors (non-blocking) and closes them
itself, so whoever kills the process may close the ``Popen``'s pipes at any time.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from agentsandbox.mcp import sdk

_CHUNK = 65536
_EXIT_WAIT = 2.0  # seconds to wait for the exit code of a server whose stdout ended


class StderrTail:
    """The last ``keep`` bytes a server wrote to stderr."""

    def __init__(self, keep: int = 4096) -> None:
        self.keep = keep
        self.data = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.data += chunk
        del self.data[: max(0, len(self.data) - self.keep)]

    def last_line(self, chars: int = 200) -> str:
        """The last non-empty line, cut to ``chars``, or ''."""
        lines = [line.strip() for line in self.data.decode("utf-8", "replace").splitlines()]
        last = next((line for line in reversed(lines) if line), "")
        return last if len(last) <= chars else last[:chars] + "..."


async def _read_chunk(fd: int) -> bytes:
    """The next bytes of the non-blocking pipe ``fd`` (b"" at its end), waiting on the event loop."""
    while True:
        await anyio.wait_readable(fd)
        try:
            return os.read(fd, _CHUNK)
        except BlockingIOError:  # another reader of the pipe was first
            continue


def _preview(line: bytes) -> str:
    text = line[:60].decode("utf-8", "replace")
    return repr(text) + ("..." if len(line) > 60 else "")


class BoundedStdio:
    """The transport of one server process (see the module docstring); ``open()`` gives the streams."""

    def __init__(self, process: subprocess.Popen, *, max_message_bytes: int, max_call_bytes: int) -> None:
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        self.process = process
        self.max_message_bytes = max_message_bytes
        self.max_call_bytes = max_call_bytes
        self.failure: str | None = None
        self.stderr = StderrTail()
        self._call_bytes = 0
        self._fds = [os.dup(pipe.fileno()) for pipe in (process.stdout, process.stderr, process.stdin)]
        for fd in self._fds:
            os.set_blocking(fd, False)
        self._read_send: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self._stderr_ended: anyio.Event | None = None

    def begin_call(self) -> None:
        """Start counting ``max_call_bytes`` afresh (before each request)."""
        self._call_bytes = 0

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
        if self._read_send is not None:
            self._read_send.close()  # every pending request ends now with "connection closed"

    async def _exit_reason(self) -> str:
        with anyio.move_on_after(_EXIT_WAIT):
            while self.process.poll() is None:
                await anyio.sleep(0.01)  # polling the child's status; bounded by the scope above
            if self._stderr_ended is not None:
                await self._stderr_ended.wait()  # so an error can quote the server's last words
        code = self.process.returncode
        return "closed its output" if code is None else f"exited with code {code}"

    async def _read_stdout(self) -> None:
        fd, buffer = self._fds[0], bytearray()
        while self.failure is None:
            chunk = await _read_chunk(fd)
            if not chunk:
                self._fail(await self._exit_reason())
                return
            self._call_bytes += len(chunk)
            if self._call_bytes > self.max_call_bytes:
                self._fail(f"sent over {self.max_call_bytes} bytes for one request")
                return
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                if not await self._deliver(line):
                    return
            if len(buffer) > self.max_message_bytes:
                self._fail(f"sent a message over {self.max_message_bytes} bytes")
                return

    async def _deliver(self, line: bytes) -> bool:
        if len(line) > self.max_message_bytes:
            self._fail(f"sent a message over {self.max_message_bytes} bytes")
            return False
        if not line.strip():
            return True
        try:
            message = sdk.session_message(line)
        except ValueError:
            self._fail(f"broke the protocol: printed {_preview(line)} on stdout, not a JSON-RPC message")
            return False
        assert self._read_send is not None
        try:
            await self._read_send.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False  # the session is gone
        return True

    async def _drain_stderr(self) -> None:
        fd = self._fds[1]
        while True:
            chunk = await _read_chunk(fd)
            if not chunk:
                if self._stderr_ended is not None:
                    self._stderr_ended.set()
                return
            self.stderr.feed(chunk)

    async def _write_stdin(self, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
        fd = self._fds[2]
        async for session_message in receive:
            json = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
            data = memoryview((json + "\n").encode("utf-8", "backslashreplace"))
            while data:
                await anyio.wait_writable(fd)
                try:
                    data = data[os.write(fd, data) :]
                except BlockingIOError:
                    continue
                except OSError:
                    self._fail("stopped reading its input")
                    receive.close()  # the session's next send fails at once instead of blocking
                    return

    @asynccontextmanager
    async def open(
        self,
    ) -> AsyncIterator[
        tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
    ]:
        """The (read, write) streams a ``ClientSession`` takes, for as long as the block runs."""
        read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
        self._read_send = read_send
        self._stderr_ended = anyio.Event()
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._read_stdout)
                tasks.start_soon(self._drain_stderr)
                tasks.start_soon(self._write_stdin, write_receive)
                try:
                    yield read_receive, write_send
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            for stream in (read_send, read_receive, write_send, write_receive):
                stream.close()
            for fd in self._fds:
                os.close(fd)
            self._fds = []
