"""The vLLM launcher and the vLLM push modes without vLLM: the command line and environment a CPU
needs, the refusals, the worker extension's repair, and ``ServerGenerator``'s requests against a
loopback stand-in that answers as vLLM 0.32.0 does. The real server is in
tests/integration/test_vllm_backend.py."""

from __future__ import annotations

import itertools
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from agenttrainer.acting.generators import GenerationError, ServerGenerator
from agenttrainer.serving import vllm as launcher
from agenttrainer.serving.cli import serve
from agenttrainer.serving.vllm import VLLMNotFoundError, VLLMServer, vllm_command, vllm_env, vllm_python
from knowlyrcore.testing import import_file


def test_the_command_carries_the_cpu_fixes():
    command = vllm_command("/venv/bin/python", "/models/m", served_name="m", port=8123, dtype="float32", seed=3)
    assert command[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]  # not `vllm serve`
    flags = dict(itertools.pairwise(command))  # each flag -> what follows it
    assert flags["--model"] == "/models/m" and flags["--served-model-name"] == "m" and flags["--port"] == "8123"
    assert flags["--dtype"] == "float32" and flags["--gpu-memory-utilization"] == "0.5" and flags["--seed"] == "3"
    assert flags["--worker-extension-cls"] == launcher.WORKER_EXTENSION
    assert "--max-model-len" not in command and "--enable-lora" not in command  # the model's own context
    lora = vllm_command("p", "d", served_name="m", max_model_len=4096, enable_lora=True, extra_args=["--x"])
    assert lora[-1] == "--x" and "--enable-lora" in lora and lora[lora.index("--max-model-len") + 1] == "4096"


def test_the_environment_binds_every_core_and_opens_weight_updates_only_when_asked(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    env = vllm_env(kv_cache_gib=1.5)
    cores = launcher.cpu_threads()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1.5" and "OMP_NUM_THREADS" not in env
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == ",".join(map(str, cores)) and env["HF_HUB_OFFLINE"] == "1"
    assert env["PYTHONPATH"] == str(launcher.WORKER_EXTENSION_DIR)  # the extension alone, not knowlyr's paths
    assert "VLLM_SERVER_DEV_MODE" not in env and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in env
    updates = vllm_env(allow_weight_updates=True)
    assert updates["VLLM_SERVER_DEV_MODE"] == "1" and updates["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_weight_updates_are_refused_off_loopback():
    with pytest.raises(ValueError, match="collective_rpc is not behind its API key"):
        VLLMServer("smollm2-135m", host="0.0.0.0", allow_weight_updates=True)


def test_a_python_without_vllm_is_named_with_the_install_command(monkeypatch):
    monkeypatch.setenv(launcher.VLLM_PYTHON_ENV, sys.executable)  # the project's venv: no vllm in it
    with pytest.raises(VLLMNotFoundError, match="install_vllm.sh"):
        vllm_python()
    result = CliRunner().invoke(serve, ["--engine", "vllm", "smollm2-135m"])
    assert result.exit_code == 1 and "cannot import vllm" in result.output
    refused = CliRunner().invoke(serve, ["smollm2-135m", "--vllm-arg=--enable-lora"])
    assert refused.exit_code == 2 and "--vllm-arg needs --engine vllm" in refused.output


def test_the_worker_extension_reloads_then_repacks_a_tied_head():
    """vLLM's reload leaves a tied LM head's packed CPU kernel stale; the extension repacks it."""
    ext = import_file(launcher.WORKER_EXTENSION_DIR / "knowlyr_vllm_worker.py", "ext")
    calls = []
    head = SimpleNamespace(quant_method=SimpleNamespace(process_weights_after_loading=lambda h: calls.append(h)))
    model = SimpleNamespace(lm_head=head)

    class Worker(ext.WeightSync):
        def __init__(self, tied):
            self.model_config = SimpleNamespace(hf_config=SimpleNamespace(tie_word_embeddings=tied))
            self.model_runner = SimpleNamespace(get_model=lambda: model)

        def reload_weights(self, weights_path):
            calls.append(weights_path)

    Worker(tied=True).knowlyr_reload_weights("/ckpt")
    assert calls == ["/ckpt", head]
    calls.clear()
    Worker(tied=False).knowlyr_reload_weights("/ckpt")
    assert calls == ["/ckpt"]


class _VLLMStandIn(BaseHTTPRequestHandler):
    """Answers as vLLM 0.32.0: JSON from the dev routes, plain text from the adapter routes."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, body))
        if self.path == "/collective_rpc":
            self._reply(b'{"results": [null]}')
        elif self.path == "/reset_prefix_cache":
            self._reply(json.dumps({"success": self.server.reset_ok}).encode())
        elif self.path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            self._reply(f"Success: LoRA adapter '{body['lora_name']}' done.".encode())
        else:
            self.send_error(404)

    def _reply(self, content: bytes):
        self.send_response(200)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VLLMStandIn)
    server.requests, server.reset_ok = [], True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_push_vllm_reloads_in_place_then_resets_the_prefix_cache(stand_in):
    base_url = f"http://127.0.0.1:{stand_in.server_address[1]}/v1"
    generator = ServerGenerator(base_url, "m", push_weights="vllm")
    generator.weights_updated(path=None)  # nothing saved: nothing sent
    generator.weights_updated(path="/runs/push/iteration-00001")
    assert stand_in.requests == [
        (
            "/collective_rpc",
            {"method": "knowlyr_reload_weights", "kwargs": {"weights_path": "/runs/push/iteration-00001"}},
        ),
        ("/reset_prefix_cache", {}),
    ]
    assert generator.served_name == "m"  # the same model, new weights
    stand_in.reset_ok = False
    with pytest.raises(GenerationError, match="not reset"):
        generator.weights_updated(path="/runs/push/iteration-00002")


def test_push_vllm_lora_reads_plain_text_and_unloads_the_previous_adapter(stand_in):
    base_url = f"http://127.0.0.1:{stand_in.server_address[1]}/v1"
    generator = ServerGenerator(base_url, "m", push_weights="vllm-lora")
    generator.weights_updated(path="/a1")
    generator.weights_updated(path="/a2")
    assert stand_in.requests == [
        ("/v1/load_lora_adapter", {"lora_name": "m-online-1", "lora_path": "/a1"}),
        ("/v1/load_lora_adapter", {"lora_name": "m-online-2", "lora_path": "/a2"}),
        ("/v1/unload_lora_adapter", {"lora_name": "m-online-1"}),
    ]
    assert generator.served_name == "m-online-2"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_server_started_by_a_killed_process_is_terminated_with_it(tmp_path):
    """The launcher's child outlives no parent: SIGKILL the process that started it (no
    ``finally`` runs) and the child, in a session of its own, still gets SIGTERM."""
    import os
    import signal
    import subprocess
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from agenttrainer.serving.vllm import _terminate_with_parent\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],\n"
        "                         start_new_session=True, preexec_fn=_terminate_with_parent)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(child, 0)  # running
    parent.kill()
    parent.wait()
    for _ in range(200):  # the kernel signals at once; allow the child a moment to exit
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as fh:  # reaped by init once it exits; a zombie counts as gone
            if fh.read().split(")")[-1].split()[0] == "Z":
                break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived the process that started it")
