"""Sandboxed side: what a candidate worker does to itself at start-up, before any candidate code runs (the parent's
half of the sandbox, bubblewrap's namespaces and cgroups, is `evaluator/processes/sandbox.py`).

Root drops to `nobody`, `no_new_privs`, resource limits (core files off, file size; address space for workers
without CUDA), the parent-death signal, and Landlock: writes only in the worker's folder (and build folder); without
namespaces also reads only in system and Python folders, and no signals outside the sandbox. Landlock is not applied
to GPU workers: the CUDA driver fails to start under it (error 304 on an H200).
"""

from __future__ import annotations

import ctypes
import os
import signal

from ..processes.sandbox import NOBODY, SYSTEM_READ, gpu_devices, landlock_abi
from ..shared.policy import WorkerPolicy

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1

# Landlock access rights (linux/landlock.h)
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_LL_REMOVE_DIR, _LL_REMOVE_FILE, _LL_MAKE_CHAR, _LL_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
_LL_MAKE_REG, _LL_MAKE_SOCK, _LL_MAKE_FIFO, _LL_MAKE_BLOCK, _LL_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
_LL_REFER, _LL_TRUNCATE, _LL_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_LL_SCOPE_ABSTRACT_UNIX, _LL_SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock(abi: int, read: list[str], write: list[str], restrict_reads: bool) -> str:
    """Restrict this process (and its future children): returns "" or why it failed."""
    if abi <= 0:
        return "no Landlock"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    read_acc = _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR
    write_acc = (_LL_WRITE_FILE | _LL_REMOVE_DIR | _LL_REMOVE_FILE | _LL_MAKE_CHAR | _LL_MAKE_DIR | _LL_MAKE_REG
                 | _LL_MAKE_SOCK | _LL_MAKE_FIFO | _LL_MAKE_BLOCK | _LL_MAKE_SYM)
    if abi >= 2:
        write_acc |= _LL_REFER
    if abi >= 3:
        write_acc |= _LL_TRUNCATE
    handled = write_acc | (read_acc if restrict_reads else 0)
    attr = _RulesetAttr(handled_access_fs=handled, handled_access_net=0,
                        scoped=(_LL_SCOPE_SIGNAL | _LL_SCOPE_ABSTRACT_UNIX) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    fd = libc.syscall(444, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        return f"landlock_create_ruleset: errno {ctypes.get_errno()}"
    try:
        def allow(path: str, access: int) -> None:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                return
            try:
                is_dir = os.path.isdir(path)
                acc = access if is_dir else access & (_LL_EXECUTE | _LL_READ_FILE | _LL_WRITE_FILE | _LL_TRUNCATE)
                rule = _PathBeneath(allowed_access=acc & handled, parent_fd=pfd)
                if libc.syscall(445, ctypes.c_int(fd), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            finally:
                os.close(pfd)

        if restrict_reads:
            for p in read:
                allow(p, read_acc)
        for p in write:
            allow(p, write_acc | (read_acc if restrict_reads else 0))
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if libc.syscall(446, ctypes.c_int(fd), ctypes.c_uint32(0)) < 0:
            return f"landlock_restrict_self: errno {ctypes.get_errno()}"
    except OSError as e:
        return str(e)
    finally:
        os.close(fd)
    return ""


def harden(policy: WorkerPolicy) -> list[str]:
    """Called by a worker at start-up, before any candidate code: returns what could not be applied."""
    import resource

    problems: list[str] = []
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # no orphan when the evaluator dies
    workdir = policy.workdir
    writable = [workdir, *policy.writable, "/dev/null"]
    gpu = policy.gpu
    if gpu:
        writable += [d for d in gpu_devices() if os.path.exists(d)]
    # resource limits
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, policy.max_file_bytes)]
    if not gpu:  # CUDA reserves huge virtual ranges; an address-space limit would break it
        try:
            phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            limits.append((resource.RLIMIT_AS, max(8 << 30, int(phys * 1.5))))
        except (ValueError, OSError):
            pass
    for what, value in limits:
        try:
            _, hard = resource.getrlimit(what)
            v = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(what, (v, v))
        except (ValueError, OSError) as e:
            problems.append(f"rlimit {what}: {e}")
    in_namespace = policy.namespaces
    # drop root (the folders we may write were given to nobody by the parent)
    if os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        except OSError as e:
            problems.append(f"could not drop root: {e}")
    try:
        os.chdir(workdir)
    except OSError as e:
        problems.append(f"chdir {workdir}: {e}")
    abi = landlock_abi()
    read = [*SYSTEM_READ, *policy.read_paths, *policy.readable, workdir, *policy.writable]
    if gpu:  # the CUDA driver fails to start under Landlock (error 304, seen on an H200): namespaces only
        problems.append("landlock: not applied to GPU workers")
    else:
        err = _landlock(abi, read, writable, restrict_reads=not in_namespace)
        if err:
            problems.append(f"landlock: {err}")
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    return problems
