"""Process trees from /proc: a worker's descendants (also those that left its session), their states, and one
signal to many. Nothing here imports torch."""

from __future__ import annotations

import os
import signal
import time


def stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read().decode(errors="replace")
        return s[s.rindex(")") + 2:].split()
    except (OSError, ValueError):
        return None


def _children(pid: int) -> list[int] | None:
    """The children of every thread of `pid` (/proc/PID/task/TID/children), or None where the kernel lacks them."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except (OSError, ValueError):
            continue
    return out


def descendants(root: int, zombies: bool = False) -> list[int]:
    """Every live process below `root`; `zombies`: the dead ones not yet reaped too. By the kernel's lists of
    children where it has them, else by parent links over all of /proc."""
    fast = _children(root)
    if fast is not None:
        out: list[int] = []
        todo = fast
        while todo:
            p = todo.pop()
            st = stat(p)
            if st is None or (st[0] in ("Z", "X") and not zombies):
                continue
            out.append(p)
            more = _children(p)
            if more is None:
                break
            todo += more
        else:
            return out
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        st = stat(int(name))
        if st is None or (st[0] in ("Z", "X") and not zombies):  # dead (an init that does not reap keeps them)
            continue
        children.setdefault(int(st[1]), []).append(int(name))
    out = []
    todo = list(children.get(root, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def session_members(sid: int) -> list[int]:
    """PIDs of the processes in session `sid` (Linux /proc; empty elsewhere)."""
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
                pids.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def kill_session(sid: int) -> None:
    for _ in range(3):  # a dying ninja may still fork: sweep until the session is empty
        members = [p for p in session_members(sid) if p != os.getpid()]
        if not members:
            return
        signal_all(members, signal.SIGKILL)
        time.sleep(0.05)


def wanted_ns(pids: list[int]) -> dict[int, int] | None:
    """Nanoseconds each live thread of `pids` spent on a CPU or runnable, waiting for one (the kernel's
    `/proc/PID/task/TID/schedstat`: run time, run-queue wait), by thread id. A thread kept busy adds about its wall
    time whatever the machine's load; a sleeping one adds nothing. Threads that ended are not listed. None where no
    schedstat could be read."""
    out: dict[int, int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    run, wait = f.read().split()[:2]
                out[int(tid)] = int(run) + int(wait)
            except (OSError, ValueError):
                continue
    return out or None
