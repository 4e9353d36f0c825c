"""A hostile policy and a hostile server against ``knowlyr/mcp`` (issue #45's acceptance).

Policy side: the real mcp-server-git, with and without its own ``--repository`` confinement,
is asked for ``..``, absolute host paths and repositories whose symlinks (a committed link, a
``.git`` that is a link) point at a secret on the host; the secret's text never shows. A git
hook and ``core.fsmonitor`` planted in the repository would write a marker on the host when
run there: the state check's command and the server run them in the sandbox, never on the host.

Server side: ``mcp_servers/hostile_server.py`` (a real MCP server) hangs, floods, prints
garbage, exits, allocates without bound; each ends the episode with ``InfrastructureError``
within the env's bounds, and the next reset works again.
"""

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from test_mcp_env import GIT, git

from agentsandbox.mcp import MCPEnv
from agentsandbox.testing import require_mcp_server
from knowlyrcore.domain import ToolCategory, get_domain_profile
from knowlyrcore.errors import InfrastructureError, InputError
from knowlyrcore.testing import require

pytestmark = pytest.mark.integration

HOSTILE_DIR = Path(__file__).parent / "mcp_servers"
HOSTILE = [sys.executable, str(HOSTILE_DIR / "hostile_server.py")]
TASK = {"id": "hostile", "description": "Do as the tools say."}


@pytest.fixture
def secret(tmp_path):
    """A host file the sandboxed server must never read, and its text."""
    text = f"TOP-SECRET-{uuid.uuid4().hex}"
    path = tmp_path / "secret.txt"
    path.write_text(text + "\n")
    return path, text


@pytest.fixture
def trap_repo(tmp_path, secret):
    """A repository with a committed symlink to the secret and, in ``linked/``, a ``.git`` that is
    a symlink to a host repository whose commit holds the secret."""
    path, text = secret
    vault = tmp_path / "vault"
    vault.mkdir()
    git(vault, "init", "-q", ".")
    (vault / "secret.txt").write_text(text + "\n")
    git(vault, "add", "secret.txt")
    git(vault, "commit", "-q", "-m", f"store {text}")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", ".")
    (root / "leak.txt").symlink_to(path)
    git(root, "add", "leak.txt")
    git(root, "commit", "-q", "-m", "Add a link")
    (root / "linked").mkdir()
    (root / "linked" / ".git").symlink_to(vault / ".git")
    return root


@pytest.mark.parametrize("server", [GIT, "mcp-server-git --repository {workspace}"])
def test_git_tools_never_show_host_files(server, secret, trap_repo):
    require_mcp_server(GIT)
    path, text = secret
    task = {**TASK, "metadata": {"workspace": {"copy": str(trap_repo)}}}
    places = ["..", "/workspace/..", str(path), str(path.parent), str(trap_repo), "/etc", "/work", "/"]
    places += ["/workspace", "/workspace/linked", "linked", "/workspace/leak.txt"]
    seen = []
    with MCPEnv(server=server) as env:
        env.reset(task=task)
        for place in places:
            for tool, extra in [
                ("git_status", {}),
                ("git_log", {}),
                ("git_show", {"revision": "HEAD"}),
                ("git_show", {"revision": "HEAD:leak.txt"}),
                ("git_diff", {"target": "HEAD~1"}),
            ]:
                seen.append(env.step({"tool": tool, "params": {"repo_path": place, **extra}}).observation)
        seen.append(
            env.step({"tool": "git_add", "params": {"repo_path": "/workspace", "files": [str(path)]}}).observation
        )
        seen.append(
            env.step({"tool": "git_add", "params": {"repo_path": "/workspace", "files": ["../../etc"]}}).observation
        )
    assert "Add a link" in "\n".join(seen)  # the tools did work on the copy
    assert not [o for o in seen if text in o]


def test_sqlite_cannot_attach_host_files(tmp_path, secret):
    require_mcp_server("mcp-server-sqlite --db-path {workspace}/shop.db")
    import sqlite3

    path, text = secret
    host_db = tmp_path / "host.db"
    with sqlite3.connect(host_db) as db:
        db.execute("CREATE TABLE vault (secret TEXT)")
        db.execute("INSERT INTO vault VALUES (?)", (text,))
    shop = tmp_path / "shop"
    shop.mkdir()
    sqlite3.connect(shop / "shop.db").close()
    task = {**TASK, "metadata": {"workspace": {"copy": str(shop)}}}
    seen = []
    with MCPEnv(server="mcp-server-sqlite --db-path {workspace}/shop.db") as env:
        env.reset(task=task)
        for query in (
            f"ATTACH DATABASE '{host_db}' AS host",
            "SELECT secret FROM host.vault",
            f"ATTACH DATABASE 'file:{host_db}?mode=ro' AS ro",
            "SELECT secret FROM ro.vault",
            f"ATTACH DATABASE '{path}' AS raw",
        ):
            for tool in ("write_query", "read_query"):
                seen.append(env.step({"tool": tool, "params": {"query": query}}).observation)
    assert not [o for o in seen if text in o]


def test_planted_hooks_run_only_in_the_sandbox(tmp_path):
    require_mcp_server(GIT)
    marker = tmp_path / "host-marker"
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", ".")
    (root / "a.txt").write_text("a\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-q", "-m", "first")
    git(root, "config", "core.fsmonitor", f"echo pwned > {marker} #")
    hook = root / ".git" / "hooks" / "post-commit"
    hook.write_text(f"#!/bin/sh\necho pwned > {marker}\n")
    hook.chmod(0o755)
    # the trap is live: git on the host runs it
    subprocess.run(
        ["git", "status"], cwd=root, capture_output=True, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    )
    require(marker.exists(), "this git does not run core.fsmonitor: the trap cannot be tested")
    marker.unlink()
    (root / "b.txt").write_text("b\n")
    checks = [{"command": ["git", "status", "--porcelain"], "contains": ["b.txt"]}]
    task = {**TASK, "metadata": {"workspace": {"copy": str(root)}, "state_checks": checks}}
    with MCPEnv(server=GIT) as env:
        env.reset(task=task)
        env.step({"tool": "git_add", "params": {"repo_path": "/workspace", "files": ["b.txt"]}})
        env.step({"tool": "git_commit", "params": {"repo_path": "/workspace", "message": "second"}})
        done = env.step({"tool": "respond", "params": {"message": "done"}})
    assert done.info["checks"][0]["ok"] is False  # b.txt was committed: the check ran on the copy
    assert not marker.exists()


def _hostile_env(**kwargs):
    require_mcp_server(GIT)  # bubblewrap; the hostile server itself runs from this interpreter's venv
    return MCPEnv(server=HOSTILE, binds=[str(HOSTILE_DIR)], **kwargs)


@pytest.mark.parametrize(
    ("tool", "params", "said"),
    [
        ("hang", {}, "did not answer within 3 s"),
        ("flood", {"megabytes": 3}, "sent a message over 1048576 bytes"),
        ("garbage", {}, "broke the protocol"),
        ("huge_result", {"megabytes": 2}, "sent a message over 1048576 bytes"),
        ("chatter", {"messages": 1000}, "bytes for one request"),
        ("die", {"code": 3}, "exited with code 3; last stderr line: fatal: the hostile server gives up"),
        ("allocate", {}, "failed on tool 'allocate'"),
    ],
)
def test_a_failing_server_is_an_infrastructure_error(tool, params, said):
    with _hostile_env(call_timeout=3, memory_mb=256) as env:
        env.reset(task=TASK)
        with pytest.raises(InfrastructureError) as failure:
            env.step({"tool": tool, "params": params})
        message = str(failure.value)
        assert "hostile_server.py" in message and f"tool {tool!r}" in message and said in message
        assert "\n" not in message
        env.reset(task=TASK)  # a fresh server
        assert env.step({"tool": "echo", "params": {"text": "alive"}}).observation == "alive"


def test_non_text_results_and_unannotated_tools():
    with _hostile_env() as env:
        env.reset(task=TASK)
        assert env.step({"tool": "picture", "params": {}}).observation == "[image/png, 4 bytes]"
        assert get_domain_profile(env.domain).get_tool("echo").category == ToolCategory.OTHER  # no annotations


def test_a_server_tool_named_like_the_closing_tool_is_refused():
    refused = pytest.raises(InputError, match="offers a tool named 'respond', the env's closing tool")
    with _hostile_env(env={"HOSTILE_RESPOND": "1"}) as env, refused:
        env.reset(task=TASK)
    with _hostile_env(env={"HOSTILE_RESPOND": "1"}, closing_tool="finish") as env:
        env.reset(task=TASK)
        assert env.step({"tool": "finish", "params": {"message": "ok"}}).terminated


def test_hang_is_bounded_without_a_sandbox():
    with MCPEnv(server=HOSTILE, sandbox="none", call_timeout=2) as env:
        env.reset(task=TASK)
        with pytest.raises(InfrastructureError, match="did not answer within 2 s"):
            env.step({"tool": "hang", "params": {}})


@pytest.fixture
def http_server():
    """The hostile server over streamable HTTP on a free loopback port; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([*HOSTILE, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)  # polling for the server's socket, bounded by the deadline
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def test_streamable_http_server(http_server):
    with MCPEnv(url=http_server, call_timeout=3) as env:
        env.reset(task=TASK)
        assert env.step({"tool": "echo", "params": {"text": "over http"}}).observation == "over http"
        with pytest.raises(InfrastructureError, match="did not answer within 3 s"):
            env.step({"tool": "hang", "params": {}})
