"""Resource limits bound the host, not just each process (issue #11, finding 5).

Before: the local backend's ``tmp_mb`` did not bound /tmp (2 GB went into host shared memory),
``memory_mb`` was an address-space limit per process (four 800 MB processes ran under 1 GB),
``unshare -Ur id`` made the agent root of a new namespace, and Docker's tmpfs had no inode
limit. Each test drives a real sandbox (bubblewrap or Docker) with small limits; the
seccomp program is also checked instruction by instruction, for both architectures, by a
small BPF interpreter below.
"""

import errno
import struct
from contextlib import contextmanager

import pytest

from agentsandbox.backends import BACKENDS, seccomp
from agentsandbox.backends.local import scratch_mode
from agentsandbox.config import SandboxConfig
from agentsandbox.testing import leftovers, require_backend

BOTH = pytest.mark.parametrize("backend", ["local", "docker"])


@contextmanager
def sandbox_with(backend: str, **limits):
    require_backend(backend)
    sandbox = BACKENDS[backend](SandboxConfig(timeout=30, **limits))
    try:
        sandbox.start()
        yield sandbox
    finally:
        sandbox.close()
    assert leftovers(sandbox) == []


@pytest.mark.integration
@BOTH
def test_security_writing_more_than_tmp_mb_into_tmp_fails(backend):
    if backend == "local" and scratch_mode() == "disk":
        # not a component: the backend works, with the weaker bound it reports for this user
        pytest.skip("an ordinary user with bubblewrap < 0.9 has no sized tmpfs: /tmp is on disk")
    with sandbox_with(backend, tmp_mb=8) as sandbox:
        # Docker's /var/tmp lies on its read-only root; the local one is a symlink to /tmp
        for scratch in ("/tmp", "/var/tmp", "/dev/shm") if backend == "local" else ("/tmp", "/dev/shm"):
            result = sandbox.run(f"head -c 16M /dev/zero > {scratch}/fill; echo rc=$?; stat -c %s {scratch}/fill")
            assert "No space left on device" in result.output, scratch
            assert "rc=1" in result.output
            assert int(result.output.split()[-1]) <= 8 * 1024 * 1024
            sandbox.run(f"rm -f {scratch}/fill")
        assert sandbox.run("echo still-alive").output == "still-alive\n"


@pytest.mark.integration
@BOTH
def test_security_tmp_holds_at_most_tmp_inodes_files(backend):
    if backend == "local" and scratch_mode() != "tmpfs":
        # not a component: a privilege this user lacks; the backend reports the bound it keeps
        pytest.skip("only root can mount the local backend's tmpfs with an inode limit")
    with sandbox_with(backend, tmp_inodes=64) as sandbox:
        for scratch in ("/tmp", "/dev/shm"):
            result = sandbox.run(f"cd {scratch} && for i in $(seq 200); do : > f$i || break; done; ls | wc -l")
            assert "No space left on device" in result.output, scratch
            assert int(result.output.split()[-1]) <= 64
            sandbox.run(f"rm -f {scratch}/f*")


#: Two processes each hold 80 MiB (< memory_mb=128) until killed; the driver waits until each
#: holds its memory or is dead, then reports how many hold it at once and how the others ended.
HOGS = """
import os, subprocess, sys, time
hog = "import os, time\\nb = bytearray(80 << 20)\\nopen(f'/tmp/held-{os.getpid()}', 'w').close()\\ntime.sleep(60)\\n"
procs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(2)]
held = lambda p: os.path.exists(f"/tmp/held-{p.pid}")
while not all(held(p) or p.poll() is not None for p in procs):
    time.sleep(0.01)
# a process killed to make room may not be reaped yet when the other one holds
deadline = time.monotonic() + 2
while sum(held(p) and p.poll() is None for p in procs) > 1 and time.monotonic() < deadline:
    time.sleep(0.01)
print("holding", sum(held(p) and p.poll() is None for p in procs), "exits", [p.poll() for p in procs])
for p in procs:
    p.kill()
    p.wait()
"""


@pytest.mark.integration
@BOTH
def test_security_memory_mb_bounds_all_processes_together(backend):
    with sandbox_with(backend, memory_mb=128) as sandbox:
        if backend == "local" and sandbox._cgroup is None:
            # not a component: the host gives this user no writable cgroup; enforced_limits says why
            pytest.skip(f"no cgroup here: {sandbox.enforced_limits['memory']}")
        sandbox.write_file("hogs.py", HOGS)
        result = sandbox.run("python3 hogs.py")
        assert "holding 1 exits" in result.output, result.output  # the other was OOM-killed
        assert "-9" in result.output
        assert sandbox.run("echo still-alive").output == "still-alive\n"


@pytest.mark.integration
@BOTH
def test_security_no_new_namespaces_inside_the_sandbox(backend):
    with sandbox_with(backend) as sandbox:
        result = sandbox.run("unshare -Ur id")
        assert result.exit_code != 0
        assert "uid=0" not in result.output
        assert sandbox.run("unshare -n true").exit_code != 0


#: Each call the filter must refuse, made directly (no unshare binary in the way); a fork
#: (clone without namespace flags) must still work.
SYSCALLS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(result):
    return ctypes.get_errno() if result == -1 else 0
CLONE_NEWUSER, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x40000000, 17
pid = libc.syscall(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
print("clone_newuser", errno_of(pid))
print("unshare_newnet", errno_of(libc.unshare(CLONE_NEWNET)))
print("mount", errno_of(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
print("ptrace", errno_of(libc.ptrace(0, 0, 0, 0)))
print("keyctl", errno_of(libc.syscall(250, 0, 0, 0, 0, 0)))
print("bpf", errno_of(libc.syscall(321, 0, 0, 0)))
child = os.fork()
if child == 0:
    os._exit(7)
print("fork", os.waitpid(child, 0)[1] >> 8)
"""


@pytest.mark.integration
def test_security_seccomp_refuses_namespaces_mount_ptrace_keyctl_bpf_locally():
    with sandbox_with("local") as sandbox:
        if seccomp.filter_program() is None:
            # not a component: the filter covers x86_64 and aarch64 only; describe() names this machine
            pytest.skip(seccomp.describe())
        sandbox.write_file("syscalls.py", SYSCALLS)
        seen = dict(line.split() for line in sandbox.run("python3 syscalls.py").output.splitlines())
        for name in ("clone_newuser", "unshare_newnet", "mount", "ptrace", "keyctl", "bpf"):
            assert seen[name] == str(errno.EPERM), (name, seen)
        assert seen["fork"] == "7"
        assert "seccomp" in sandbox.enforced_limits["syscalls"]


@pytest.mark.integration
def test_security_local_root_and_dev_are_read_only():
    with sandbox_with("local") as sandbox:
        for path in ("/x", "/dev/x", "/etc/x", "/var/x"):
            result = sandbox.run(f": > {path}")
            assert result.exit_code != 0, path
            assert "Read-only file system" in result.output or "Permission denied" in result.output


@pytest.mark.integration
def test_security_local_cgroup_holds_the_sandbox_and_goes_with_it():
    with sandbox_with("local", memory_mb=128, pids_limit=32) as sandbox:
        cgroup = sandbox._cgroup
        if cgroup is None:
            # not a component: the host gives this user no writable cgroup; enforced_limits says why
            pytest.skip(f"no cgroup here: {sandbox.enforced_limits['memory']}")
        sandbox.run("sleep 60 & echo started")
        procs = {path: (path / "cgroup.procs").read_text().split() for path in cgroup.dirs}
        assert all(len(pids) >= 3 for pids in procs.values()), procs  # bwrap, its init, bash, sleep
        assert "128 MiB for all processes" in sandbox.enforced_limits["memory"]
    assert not any(path.exists() for path in cgroup.dirs)


# -- the seccomp program itself, interpreted -------------------------------------------------

AUDIT_ARCH_I386 = 0x40000003
ALLOW, KILL = "allow", "kill"


def run_bpf(program: bytes, arch: int, nr: int, arg0: int = 0) -> str | int:
    """Evaluate a classic-BPF seccomp program on one syscall: ALLOW, KILL or an errno."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code in (0x15, 0x35, 0x45):
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == 0x06:
            if k == 0x7FFF0000:
                return ALLOW
            if k == 0x80000000:
                return KILL
            assert k & 0xFFFF0000 == 0x00050000
            return k & 0xFFFF
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize(
    ("machine", "arch", "clone", "unshare", "mount", "read"),
    [("x86_64", 0xC000003E, 56, 272, 165, 0), ("aarch64", 0xC00000B7, 220, 97, 40, 63)],
)
def test_security_seccomp_program_decisions(machine, arch, clone, unshare, mount, read):
    program = seccomp.filter_program(machine)
    assert len(program) % 8 == 0 and len(program) // 8 < 4096  # BPF_MAXINSNS
    sigchld, newuser, newns, files = 17, 0x10000000, 0x00020000, 0x00000400
    assert run_bpf(program, arch, read) == ALLOW
    assert run_bpf(program, arch, clone, sigchld) == ALLOW  # fork
    assert run_bpf(program, arch, clone, 0x3D0F00) == ALLOW  # pthread_create's flags
    assert run_bpf(program, arch, clone, newuser | sigchld) == errno.EPERM
    assert run_bpf(program, arch, unshare, newuser | newns) == errno.EPERM
    assert run_bpf(program, arch, unshare, files) == ALLOW
    assert run_bpf(program, arch, mount) == errno.EPERM
    assert run_bpf(program, arch, 435) == errno.ENOSYS  # clone3: libc falls back to clone
    assert run_bpf(program, AUDIT_ARCH_I386, 310) == KILL  # another ABI's numbers
    if machine == "x86_64":
        assert run_bpf(program, arch, 0x40000000 | 272) == errno.ENOSYS  # x32 unshare


@pytest.mark.integration
def test_security_docker_workspace_in_ram_holds_at_most_workspace_inodes_files():
    # Before: the workspace was a plain directory in the host's /dev/shm, and one sandbox took
    # 36% of the host's /dev/shm inodes. As root it is now a tmpfs of its own.
    import os

    with sandbox_with("docker", workspace_inodes=500, memory_mb=256) as sandbox:
        if not sandbox._own_mount:  # needs root and a mountable /dev/shm; enforced_limits says so
            # not a component: a privilege this user lacks, so the workspace stays on disk
            pytest.skip("the workspace is on disk or cannot be mounted here: no tmpfs of its own")
        result = sandbox.run("for i in $(seq 1 1000); do : > f$i || { echo stopped at $i; break; }; done")
        assert "No space left on device" in result.output and "stopped at" in result.output
        assert len(os.listdir(sandbox.host_workspace)) < 500
        sandbox.reset()  # a full workspace still resets (no inode left for the trash directory)
        assert sandbox.run("ls | wc -l").output.strip() == "0"
