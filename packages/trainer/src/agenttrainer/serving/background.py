"""Run ``knowlyr-trainer serve`` in a child process, for tests and scripts that need a real
OpenAI-compatible endpoint on loopback (the reward judge, rollout policies, this package's tests).

    with ServerProcess("smollm2-135m", "--dtype", "bfloat16") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused")

The server picks a free port and prints ``serving <name> at <url>`` once the model is loaded; we
poll for that line and then for ``/health``, so callers never race the startup. The child's
output goes to temporary files, not pipes, so a chatty server can never block on a full pipe.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

POLL_INTERVAL_SECONDS = 0.05


class ServerProcess:
    """Context manager: ``python -m agenttrainer.serving CHECKPOINT --port 0 *extra_args``."""

    def __init__(
        self, checkpoint: str, *extra_args: str, host: str = "127.0.0.1", ready_timeout: float = 120.0
    ) -> None:
        self.command = [
            sys.executable,
            "-m",
            "agenttrainer.serving",
            checkpoint,
            "--host",
            host,
            "--port",
            "0",
            *extra_args,
        ]
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = ""  # http://host:port/v1
        self.model_name = ""
        # Closed in __exit__; they must outlive this method.
        self._stdout = tempfile.TemporaryFile()  # noqa: SIM115
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115

    def __enter__(self) -> ServerProcess:
        self.process = subprocess.Popen(self.command, stdout=self._stdout, stderr=self._stderr)
        deadline = time.monotonic() + self.ready_timeout
        while not self._ready():
            if self.process.poll() is not None:
                self._fail(f"server exited with code {self.process.returncode} during startup")
            if time.monotonic() > deadline:
                self._fail(f"server not ready after {self.ready_timeout} s")
            time.sleep(POLL_INTERVAL_SECONDS)
        return self

    def _ready(self) -> bool:
        if not self.base_url:
            self._stdout.seek(0)
            first = self._stdout.readline().decode()
            if not (first.startswith("serving ") and first.endswith("\n")):
                return False
            _, self.model_name, _, self.base_url = first.split()
        try:
            with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/health", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _fail(self, message: str) -> None:
        self.stop()
        tail = self.stderr_tail()
        self.__exit__(None, None, None)  # __enter__ failed, so the with statement will not call it
        raise RuntimeError(f"{message}: {' '.join(self.command)}\n{tail}")

    def stderr_tail(self, lines: int = 20) -> str:
        """The last lines the server wrote to stderr (its errors and warnings)."""
        self._stderr.seek(0)
        return "\n".join(self._stderr.read().decode(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate the server (SIGTERM: uvicorn shuts down gracefully), killing it if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
        self._stdout.close()
        self._stderr.close()
