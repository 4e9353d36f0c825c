"""Hostile commands and parameters, on both backends, against real containers and processes.

Every case checks three things: the attack is contained (the host file, process table or
network is untouched), the agent gets a clear error observation, and the sandbox keeps
working. The fixture then checks that closing it leaves no container, process or directory.
"""

import gc
import os
import socket
import subprocess

import pytest

from agentsandbox import tools
from agentsandbox.backends import BACKENDS
from agentsandbox.config import SandboxConfig
from agentsandbox.testing import leftovers, require_backend

pytestmark = pytest.mark.integration

HOSTILE = SandboxConfig(
    memory_mb=256, pids_limit=64, timeout=10, max_output_bytes=8192, overflow_bytes=2 << 20, max_file_mb=8
)
INJECTIONS = [
    "$(touch /workspace/pwned)",
    "`touch /workspace/pwned`",
    "x; touch /workspace/pwned",
    "x && touch pwned",
    "| touch pwned",
    "'; touch pwned; '",
    '"; touch pwned; "',
    "-exec touch pwned ;",
    "--output=pwned",
]


@pytest.fixture(params=["local", "docker"])
def sandbox(request):
    require_backend(request.param)
    sandbox = BACKENDS[request.param](HOSTILE)
    try:
        sandbox.start()
        yield sandbox
    finally:
        sandbox.close()
    assert leftovers(sandbox) == []


def assert_not_pwned(sandbox):
    assert sandbox.run("ls -a").output.split().count("pwned") == 0
    assert not (sandbox.host_workspace / "pwned").exists()


def assert_usable(sandbox):
    assert sandbox.run("echo still-alive").output == "still-alive\n"


def host_process_count():
    return sum(1 for p in os.listdir("/proc") if p.isdigit())


def test_process_limit_caps_how_many_processes_exist(sandbox):
    before = host_process_count()
    forker = (
        "import os, time\nn = 0\ntry:\n    while n < 500:\n        if os.fork() == 0:\n"
        "            time.sleep(300)\n            os._exit(0)\n        n += 1\n"
        "except OSError as exc:\n    print(exc.strerror, n)\n"
    )
    sandbox.write_file("forker.py", forker)
    result = sandbox.run("python3 forker.py")
    assert "Resource temporarily unavailable" in result.output
    running = int(result.output.split()[-1])
    assert 0 < running < HOSTILE.pids_limit
    assert host_process_count() - before <= HOSTILE.pids_limit + 16


def test_fork_bomb_is_contained_and_reset_clears_it(sandbox):
    before = host_process_count()
    sandbox.run(":(){ :|:& };:", timeout=3)
    assert host_process_count() - before <= HOSTILE.pids_limit + 16
    sandbox.reset()
    assert int(sandbox.run("ps -e --no-headers | wc -l").output) < 10
    assert_usable(sandbox)


def test_memory_hog_fails_inside_the_sandbox(sandbox):
    result = sandbox.run("python3 -c \"b = bytearray(1024 * 1024 * 1024); print('ALLOC' + 'ATED')\"")
    assert result.exit_code != 0
    assert "ALLOCATED" not in result.output
    assert_usable(sandbox)


def test_infinite_builtin_loop_is_killed_by_the_timeout(sandbox):
    result = sandbox.run("while :; do :; done", timeout=1)
    assert result.exit_code == 124
    assert "timed out after 1s" in result.error
    assert_usable(sandbox)


def test_no_network_even_to_the_hosts_loopback(sandbox):
    # A listening socket completes TCP handshakes by itself (the backlog), so a sandbox that
    # could reach the host's loopback would leave a connection waiting to be accepted.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    try:
        probe = (
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\"; "
            "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)\""
        )
        result = sandbox.run(probe)
        assert result.exit_code != 0
        assert "refused" in result.output or "unreachable" in result.output
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


@pytest.mark.parametrize("path", ["../../../../etc/passwd", "/etc/passwd", "../outside.txt", "a/../../x"])
def test_file_tools_refuse_paths_outside_the_workspace(sandbox, path):
    for result in (
        tools.read_file(sandbox, path),
        tools.write_file(sandbox, path, "x"),
        tools.edit_file(sandbox, path, "a", "b"),
    ):
        assert result.error and ("outside the workspace" in result.error or "climbs out" in result.error)
    assert not (sandbox.host_workspace.parent / "outside.txt").exists()


def test_symlinks_planted_in_the_workspace_are_not_followed_on_the_host(sandbox, tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    os.chmod(tmp_path, 0o755)
    sandbox.run(f"ln -s {secret} link.txt; ln -s / root; ln -s {tmp_path} hostdir")
    assert "symlink" in tools.read_file(sandbox, "link.txt").error
    assert "symlink" in tools.write_file(sandbox, "link.txt", "pwned").error
    assert "symlink" in tools.write_file(sandbox, "root/tmp/escape", "pwned").error
    assert "symlink" in tools.write_file(sandbox, "hostdir/new.txt", "pwned").error
    assert secret.read_text() == "host secret"
    assert not (tmp_path / "new.txt").exists()


def test_shell_cannot_write_outside_the_workspace(sandbox):
    result = sandbox.run("touch /usr/pwned; echo x > /etc/pwned; mkdir /pwned; echo rc=$?")
    assert "Read-only file system" in result.output or "Permission denied" in result.output
    assert not os.path.exists("/usr/pwned") and not os.path.exists("/etc/pwned") and not os.path.exists("/pwned")
    assert sandbox.run("ls /usr/pwned /etc/pwned /pwned").exit_code != 0


def test_host_directories_are_not_visible(sandbox):
    here = os.path.dirname(os.path.abspath(__file__))
    assert sandbox.run(f"ls {here}").exit_code != 0
    assert sandbox.run(f"ls {sandbox.host_workspace}").exit_code != 0


def test_no_privileges_inside(sandbox):
    caps = sandbox.run("grep CapEff /proc/self/status").output.split()[1]
    assert int(caps, 16) == 0
    assert sandbox.run("mount -t tmpfs none /mnt").exit_code != 0
    if os.geteuid() == 0:  # a root host hands each sandbox a private unprivileged uid
        assert sandbox.run("id -u").output.strip() != "0"


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_through_file_paths_and_contents(sandbox, payload):
    tools.read_file(sandbox, payload)
    tools.write_file(sandbox, "f.txt", payload)
    tools.edit_file(sandbox, "f.txt", payload, payload + payload)
    tools.edit_file(sandbox, payload, "a", "b")
    assert sandbox.read_file("f.txt").decode() == payload + payload
    assert_not_pwned(sandbox)


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_through_search_and_git_parameters(sandbox, payload):
    sandbox.run("git init -q && echo hello > a.txt")
    tools.grep(sandbox, payload)
    tools.grep(sandbox, "hello", path=payload)
    tools.grep(sandbox, "hello", include=payload)
    tools.list_files(sandbox, path=payload)
    tools.list_files(sandbox, pattern=payload)
    tools.git(sandbox, "status", path=payload)
    tools.git(sandbox, "diff", path=payload)
    tools.run_tests(sandbox, "ls", path=payload)
    assert_not_pwned(sandbox)


def test_grep_pattern_that_looks_like_an_option_is_a_pattern(sandbox):
    sandbox.run("echo '--version' > opt.txt")
    result = tools.grep(sandbox, "--version")
    assert result.exit_code == 0 and "opt.txt:1:--version" in result.output


def test_huge_finite_output_is_truncated(sandbox):
    result = sandbox.run("head -c 1500000 /dev/zero | tr '\\0' y; echo; echo done")
    assert result.exit_code == 0 and result.truncated
    assert len(result.output) == HOSTILE.max_output_bytes


def open_descriptors():
    """What this process's file descriptors refer to (``socket:[inode]``, ``pipe:[inode]``, paths)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the descriptor listdir itself used
            continue
    return found


def descriptors_of(transport):
    """What the shell's connection holds open: the Docker attach socket, or the local pipes."""
    ends = [transport.sock] if hasattr(transport, "sock") else [transport.process.stdin, transport.process.stdout]
    return {os.readlink(f"/proc/self/fd/{end.fileno()}") for end in ends}


def test_endless_output_is_killed_once_it_overflows(sandbox):
    """Before: the killed shell's Docker connection stayed open until Python's cycle collector
    freed the SDK's wrapper of it, and the daemon, still pushing output into it, hung: the shell
    started after the kill failed ("cannot exec in a stopped state") and removing the container
    took 20 s."""
    gc.disable()  # the sandbox must close the connection itself, not leave it to the collector
    try:
        first = sandbox.run("yes")
        killed_shell = descriptors_of(sandbox._shell.transport)  # the shell started after the kill
        result = sandbox.run("yes")
        left_open = killed_shell & open_descriptors()
    finally:
        gc.enable()
    for each in (first, result):
        assert "more than" in each.error and each.truncated
        assert len(each.output) == HOSTILE.max_output_bytes
    assert left_open == set()
    assert_usable(sandbox)


def test_killing_the_parent_shell_restarts_it(sandbox):
    sandbox.run("cd /tmp")
    result = sandbox.run("kill -9 $$")
    assert "shell exited" in result.error
    assert sandbox.run("pwd").output == "/tmp\n"


def test_killing_every_process_it_can_does_not_reach_the_host(sandbox):
    host_process = subprocess.Popen(["sleep", "60"])
    try:
        result = sandbox.run("kill -9 -1; echo survived")
        assert result.output.endswith("survived\n")  # kill(-1) spares the caller: the shell
        assert host_process.poll() is None
        assert_usable(sandbox)
    finally:
        host_process.kill()
        host_process.wait()


def test_hijacking_the_shells_stdout_times_out_and_recovers(sandbox):
    result = sandbox.run("exec >/dev/null", timeout=1)
    assert result.error
    assert_usable(sandbox)


def test_file_size_limit(sandbox):
    result = sandbox.run("head -c 20000000 /dev/zero > big.bin; echo rc=$?")
    assert "rc=0" not in result.output
    assert (sandbox.host_workspace / "big.bin").stat().st_size <= HOSTILE.max_file_mb * 1024 * 1024


def test_nul_bytes_are_refused_with_a_clear_error(sandbox):
    assert "NUL" in sandbox.run("echo a\x00b").error
    assert tools.read_file(sandbox, "a\x00b").error


def test_background_daemon_does_not_survive_reset(sandbox):
    # the daemon signals it is up by a file; the loop waits on that, not on time, and yields the
    # CPU while it polls (a busy loop on a loaded machine could use up the command's 10 s)
    started = sandbox.run(
        "nohup setsid sh -c 'touch /tmp/up; exec sleep 600' >/dev/null 2>&1 & until [ -e /tmp/up ]; do sleep 0.05; done"
    )
    assert started.exit_code == 0, started  # a start cut short by the time limit takes the daemon with it
    assert sandbox.run("pgrep -f 'sleep 600'").exit_code == 0
    sandbox.reset()
    assert sandbox.run("pgrep -f 'sleep 600'").exit_code == 1


def test_filling_the_workspace_is_bounded_by_the_memory_cgroup(sandbox):
    if sandbox.backend != "docker":
        # not a component: the fixture runs both backends, and this bound is Docker's by design
        pytest.skip("the local workspace is on disk: only RLIMIT_FSIZE bounds each file, not the total")
    # the Docker workspace is RAM-backed and its pages are charged to the container
    result = sandbox.run("for i in $(seq 48); do head -c 8000000 /dev/zero > f$i || break; done")
    total = sum(f.stat().st_size for f in sandbox.host_workspace.iterdir())
    assert result.error or "No space" in result.output or "Cannot allocate" in result.output
    assert total <= (HOSTILE.memory_mb + 16) * 1024 * 1024
    assert_usable(sandbox)


@pytest.mark.parametrize(
    "url", ["file:///etc", "ext::sh -c touch% /tmp/pwned", "fd::17", "-uhelp", "--upload-pack=touch /tmp/x"]
)
def test_security_task_repository_urls_cannot_reach_host_files_or_programs(url):
    from agentsandbox.backends.base import SandboxError
    from agentsandbox.env import fetch_repo

    with pytest.raises(SandboxError, match="not allowed|does not exist"):
        fetch_repo(url)
    assert not os.path.exists("/tmp/pwned")


def test_security_protected_paths_must_be_relative_workspace_paths():
    from agentsandbox.env import TaskFilesError, protected_paths
    from knowlyrcore.models import TaskInfo

    for bad in (["../x"], ["/etc/passwd"], "test.py", [1]):
        with pytest.raises(TaskFilesError):
            protected_paths(TaskInfo(metadata={"protected_paths": bad}))
    assert protected_paths(TaskInfo(metadata={"protected_paths": ["tests/test_a.py"]})) == ["tests/test_a.py"]


def test_security_reply_is_found_when_other_output_lands_inside_the_sentinel():
    """bash may write the sentinel's newline and the rest separately; a background job's output can
    land in between. The reply must still end the request (this once hung a step until its timeout)."""
    from agentsandbox.shell import PersistentShell, Transport

    class Scripted(Transport):
        def __init__(self):
            self.chunks = []

        def send(self, data):
            nonce = data.split(b"\x00")[1]
            self.chunks = [b"hi\n", b"\n", b"3 passed\n", b"\x00" + nonce + b":4:/workspace\x00"]

        def recv(self, timeout):
            return self.chunks.pop(0) if self.chunks else None

        def close(self):
            pass

    shell = PersistentShell(Scripted(), "greeting", max_output_bytes=1000, overflow_bytes=10_000)
    out = shell.run("true", timeout=1)
    # the newline right before the sentinel is taken for its own
    assert (out.exit_code, out.cwd, out.output) == (4, "/workspace", "hi\n\n3 passed")
    transport = shell.transport
    transport.send = lambda data: transport.chunks.extend([b"ok\n\n\x00" + data.split(b"\x00")[1] + b":0:/w\x00"])
    assert shell.run("true", timeout=1).output == "ok\n"


def test_security_host_side_writes_are_bounded_like_writes_from_inside(sandbox):
    # the host writes write_file/edit_file content itself, so RLIMIT_FSIZE would not stop it
    big = "x" * (HOSTILE.max_file_mb * 1024 * 1024 + 1)
    result = tools.call_tool(sandbox, "write_file", {"path": "big.txt", "content": big})
    assert result.error and "max_file_mb" in result.error
    assert not (sandbox.host_workspace / "big.txt").exists()
    assert_usable(sandbox)
