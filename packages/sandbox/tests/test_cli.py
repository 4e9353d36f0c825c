"""The ``knowlyr-sandbox`` command, run as a real subprocess: exec, run, replay, gc, backends."""

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sandbox_tasks import CALC_TASK, FIX

from agentsandbox.backends.docker import LABEL, LABEL_HOST, LABEL_PID, docker_client
from agentsandbox.gc import collect_garbage
from agentsandbox.testing import require_backend

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "agentsandbox.cli"]


def cli(*args, check=None):
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)
    if check is not None:
        assert done.returncode == check, done.stderr + done.stdout
    return done


def test_backends_lists_both_with_reasons():
    out = cli("backends").stdout
    assert out.startswith("docker ") and "\nlocal " in out and "auto     ->" in out


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_exec_runs_a_command_and_propagates_its_exit_code(backend):
    require_backend(backend)
    done = cli("exec", "--backend", backend, "--repo", CALC_TASK["repo"], "--", "ls && exit 3", check=3)
    assert done.stdout == "calc.py\ncheck_calc.py\n"
    argv = cli("exec", "--backend", backend, "--", "printf", "%s|", "$(id)", "a b", check=0)
    assert argv.stdout == "$(id)|a b|"
    # without --, everything after the command's first word is the command's, options included
    assert cli("exec", "--backend", backend, "printf", "%s|", "--timeout", "-h", check=0).stdout == "--timeout|-h|"


@pytest.fixture
def episode_files(tmp_path):
    task = tmp_path / "task.json"
    task.write_text(json.dumps({**CALC_TASK, "domain": "coding"}))
    actions = tmp_path / "actions.jsonl"
    script = [
        {"tool": "bash", "params": {"command": "python3 -c 'print(40 + 2)'"}},
        FIX,
        {"tool": "submit", "params": {}},
    ]
    actions.write_text("\n".join(json.dumps(a) for a in script))
    return task, actions, tmp_path / "traj.jsonl"


def test_run_then_replay_reproduces_then_detects_tampering(episode_files):
    require_backend("local")
    task, actions, output = episode_files
    done = cli("run", str(task), "--backend", "local", "--actions", str(actions), "-o", str(output), check=0)
    summary = json.loads(done.stdout)
    assert summary["success"] is True and summary["steps"] == 3
    record = json.loads(output.read_text())
    assert record["steps"][0]["observation"]["output"] == "42\n"
    assert record["outcome"]["success"] is True and "+    return a + b" in record["outcome"]["patch"]

    same = json.loads(cli("replay", str(output), "--backend", "local", check=0).stdout)
    assert same["ok"] is True and same["steps_replayed"] == 3

    record["steps"][0]["observation"]["output"] = "41\n"
    output.write_text(json.dumps(record) + "\n")
    differs = json.loads(cli("replay", str(output), "--backend", "local", check=1).stdout)
    assert [m["index"] for m in differs["mismatches"]] == [0]
    assert "-41" in differs["mismatches"][0]["diff"] and "+42" in differs["mismatches"][0]["diff"]


def test_run_without_an_agent_is_a_usage_error(episode_files):
    task, _, _ = episode_files
    assert cli("run", str(task), "--backend", "local", check=2).stderr == (
        "error: give --actions FILE, or --endpoint URL and --model NAME (see 'knowlyr-sandbox run --help')\n"
    )


def _dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_gc_removes_orphaned_containers_and_directories(tmp_path):
    require_backend("docker")
    dead = _dead_pid()
    client = docker_client()
    orphan = client.containers.create(
        "knowlyr/sandbox-base:latest",
        ["true"],
        labels={LABEL: "1", LABEL_PID: str(dead), LABEL_HOST: os.uname().nodename},
    )
    alive = client.containers.create(
        "knowlyr/sandbox-base:latest",
        ["true"],
        labels={LABEL: "1", LABEL_PID: str(os.getpid()), LABEL_HOST: os.uname().nodename},
    )
    orphan_dir = f"/tmp/knowlyr-sandbox-{dead}-gctest"
    os.makedirs(orphan_dir, exist_ok=True)
    try:
        preview = collect_garbage(dry_run=True)
        assert orphan.id[:12] in preview.containers and alive.id[:12] not in preview.containers
        assert orphan_dir in preview.directories
        client.containers.get(orphan.id)  # a dry run removes nothing
        done = cli("gc", check=0)
        assert orphan.id[:12] in done.stdout and orphan_dir in done.stdout
        assert not os.path.exists(orphan_dir)
        assert alive.id in [c.id for c in client.containers.list(all=True, filters={"label": LABEL})]
        assert orphan.id not in [c.id for c in client.containers.list(all=True, filters={"label": LABEL})]
    finally:
        alive.remove(force=True)
        shutil.rmtree(orphan_dir, ignore_errors=True)
        client.close()


def test_gc_is_not_stopped_by_a_container_another_process_removes_meanwhile(monkeypatch):
    """Sandboxes close while gc runs (parallel tests, other jobs): a container listed and then gone
    before gc inspects it is skipped, and the other orphans are still removed."""
    require_backend("docker")
    from docker.models.containers import ContainerCollection

    dead = _dead_pid()
    client = docker_client()
    labels = {LABEL: "1", LABEL_PID: str(dead), LABEL_HOST: os.uname().nodename}
    orphan = client.containers.create("knowlyr/sandbox-base:latest", ["true"], labels=labels)
    vanishing = client.containers.create("knowlyr/sandbox-base:latest", ["true"], labels=labels)
    real_get = ContainerCollection.get

    def get(self, container_id):  # the other process removes it just before gc inspects it, for real
        if container_id == vanishing.id:
            client.api.remove_container(vanishing.id, force=True)
        return real_get(self, container_id)

    monkeypatch.setattr(ContainerCollection, "get", get)
    try:
        done = collect_garbage()
        assert orphan.id[:12] in done.containers and done.errors == []
        assert orphan.id not in [c.id for c in client.containers.list(all=True, filters={"label": LABEL})]
    finally:
        monkeypatch.undo()
        for container in (orphan, vanishing):
            try:
                container.remove(force=True)
            except Exception:  # removed by the test itself
                pass
        client.close()


def test_sandbox_of_a_killed_process_is_cleaned_by_gc():
    require_backend("docker")
    code = (
        "from agentsandbox import DockerSandbox; import os, sys; sb = DockerSandbox(); sb.start(); "
        "print(sb._container_id, flush=True); os.kill(os.getpid(), 9)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    container_id = done.stdout.strip()
    assert done.returncode == -9 and container_id
    client = docker_client()
    try:
        assert client.containers.get(container_id).status == "running"  # SIGKILL runs no cleanup
        assert container_id[:12] in collect_garbage().containers  # subprocess.run reaped the owner
        assert container_id not in [c.id for c in client.containers.list(all=True, filters={"label": LABEL})]
    finally:
        client.close()


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_interpreter_exit_without_close_cleans_up(backend):
    require_backend(backend)
    code = (
        f"from agentsandbox.backends import BACKENDS; sb = BACKENDS[{backend!r}](); sb.start(); "
        "sb.run('sleep 300 &'); print(sb._tmp, getattr(sb, '_container_id', ''))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    tmp, _, container_id = done.stdout.strip().partition(" ")
    assert not os.path.exists(tmp)
    if container_id:
        client = docker_client()
        try:
            assert container_id not in [c.id for c in client.containers.list(all=True, filters={"label": LABEL})]
        finally:
            client.close()


class _PolicyModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible policy: a tool call per turn from a script, then plain text."""

    script = [("write_file", {"path": "note.txt", "content": "from the model"}), ("bash", {"command": "cat note.txt"})]

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn < len(self.script):
            name, args = self.script[turn]
            call = {"id": f"call_{turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": "All done."}
        payload = json.dumps({"choices": [{"message": message}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_run_with_an_endpoint_agent_uses_function_calling(tmp_path):
    require_backend("local")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PolicyModel)
    server.requests = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        task = tmp_path / "task.json"
        task.write_text(json.dumps({"description": "write a note", "domain": "coding"}))
        out = tmp_path / "traj.jsonl"
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        cli(
            "run",
            str(task),
            "--backend",
            "local",
            "--endpoint",
            url,
            "--model",
            "policy",
            "--output",
            str(out),
            check=0,
        )
    finally:
        server.shutdown()
        server.server_close()
    steps = json.loads(out.read_text())["steps"]
    assert [s["tool_call"]["name"] for s in steps] == ["write_file", "bash", "finish"]
    assert steps[1]["observation"]["output"] == "from the model"
    assert steps[2]["tool_call"]["parameters"] == {"message": "All done."}
    offered = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert {"bash", "edit_file", "submit"} <= offered
    # the observation went back as the tool call's result
    assert server.requests[2]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "from the model"}
