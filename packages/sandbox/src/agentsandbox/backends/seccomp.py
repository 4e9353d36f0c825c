"""A seccomp filter for the local backend, handed to bubblewrap's ``--seccomp FD``.

Namespaces are the door to most kernel attack surface an unprivileged process has: inside
``unshare -Ur`` a process is uid 0 with every capability over its new namespaces (mount
tmpfs, create netfilter tables, ...). The sandbox has no use for them, nor for the calls
that act on other processes or on the kernel itself. The filter returns ``EPERM`` for:

- ``unshare`` and ``clone`` with any ``CLONE_NEW*`` flag (a plain fork or thread is fine),
  ``setns``; ``clone3`` gets ``ENOSYS`` (its flags sit behind a pointer a filter cannot
  read, and libc then falls back to ``clone``);
- mounting (``mount``, ``umount2``, ``pivot_root``, ``chroot``, the new mount API);
- other processes and the kernel: ``ptrace``, ``process_vm_readv/writev``, ``keyctl`` and
  its key calls, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*`` (its
  operations bypass seccomp), ``open_by_handle_at``, module, kexec, swap, reboot, ``acct``.

Everything else is allowed. The program is built here with ``struct`` (no libseccomp): it
checks the architecture first — another ABI (i386 ``int 0x80``, x32) numbers its syscalls
differently and would walk past the list, so it kills the process — then compares the
syscall number. x86_64 and aarch64 are supported; elsewhere ``filter_program`` returns None.

Example:
    >>> len(filter_program("x86_64")) % 8
    0
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = 32-bit word of seccomp_data at offset k
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: A == k ? jt : jf
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K: A >= k ? jt : jf
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K: A & k ? jt : jf
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000

# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # args[0]'s low word (little-endian); clone flags fit in it

#: CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
_X32_SYSCALL_BIT = 0x40000000

#: Syscalls refused outright, by name (numbers per architecture below).
DENIED = (
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
)
#: Syscalls refused only when their first argument asks for a new namespace.
NAMESPACE_FLAGGED = ("clone", "unshare")

# From asm/unistd_64.h (x86_64) and asm-generic/unistd.h (aarch64).
_SYSCALLS = {
    "x86_64": {
        "clone": 56,
        "unshare": 272,
        "clone3": 435,
        "setns": 308,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "move_mount": 429,
        "open_tree": 428,
        "mount_setattr": 442,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "open_by_handle_at": 304,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "acct": 163,
    },
    "aarch64": {
        "clone": 220,
        "unshare": 97,
        "clone3": 435,
        "setns": 268,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "move_mount": 429,
        "open_tree": 428,
        "mount_setattr": 442,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "open_by_handle_at": 265,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "swapon": 224,
        "swapoff": 225,
        "reboot": 142,
        "acct": 89,
    },
}
#: AUDIT_ARCH_* (linux/audit.h): EM_X86_64 / EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    # struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }; jumps skip jt/jf insns
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program(machine: str | None = None) -> bytes | None:
    """The filter as raw ``struct sock_filter`` bytes (what ``bwrap --seccomp`` reads), or None."""
    machine = machine or platform.machine()
    numbers = _SYSCALLS.get(machine)
    if numbers is None:
        return None
    eperm = _ERRNO | errno.EPERM
    prog = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ, _AUDIT_ARCH[machine], jt=1),
        _insn(_RET, _KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
    ]
    if machine == "x86_64":  # the x32 ABI shares AUDIT_ARCH_X86_64 but sets this bit
        prog += [_insn(_JGE, _X32_SYSCALL_BIT, jf=1), _insn(_RET, _ERRNO | errno.ENOSYS)]
    for name in DENIED:
        prog += [_insn(_JEQ, numbers[name], jf=1), _insn(_RET, eperm)]
    prog += [_insn(_JEQ, numbers["clone3"], jf=1), _insn(_RET, _ERRNO | errno.ENOSYS)]
    for name in NAMESPACE_FLAGGED:
        # not this syscall: skip the 4 insns of its flag check, the accumulator still holds nr
        prog += [
            _insn(_JEQ, numbers[name], jf=4),
            _insn(_LD_W_ABS, _ARG0_LOW),
            _insn(_JSET, CLONE_NEW_FLAGS, jf=1),
            _insn(_RET, eperm),
            _insn(_RET, _ALLOW),
        ]
    prog.append(_insn(_RET, _ALLOW))
    return b"".join(prog)


def describe() -> str:
    """One line for ``enforced_limits``: what the filter refuses on this machine."""
    if filter_program() is None:
        return f"none: no filter for {platform.machine()} (x86_64 and aarch64 only)"
    return (
        "seccomp: new namespaces (unshare/clone CLONE_NEW*, setns), mount, ptrace, keyctl, bpf, "
        "perf_event_open, io_uring, modules, kexec refused with EPERM"
    )
