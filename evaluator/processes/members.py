"""Parent side: the processes of one sandbox — who they are, freezing them, and their CPU time, whole.

Everything a sandbox's processes do is the candidate's, whichever process did it: the worker, its threads, a child
it forked, a helper made with `clone(CLONE_PARENT)` (a child of the sandbox's init, not of the worker), a process
that exited. So membership is the sandbox, never the worker's process tree alone:

- **who**: the cgroup's processes where the worker has a cgroup (nothing inside can leave it), else every process
  below the sandbox's outermost process (bubblewrap, whose init reaps what the worker orphans), zombies included;
- **freeze / thaw**: the cgroup v2 freezer where it is delegated (atomic; a frozen task still dies of SIGKILL);
  otherwise SIGSTOP to every member, repeated until every member is seen stopped in two passes in a row with no
  signal sent between them (a member may fork, or SIGCONT another, while the first pass runs). The cgroup v1 freezer
  is not used: a task it froze ignores SIGKILL until thawed, so an evaluator killed meanwhile would leave its
  candidate frozen, holding its memory, for good;
- **CPU time**: the cgroup's own accounting (v1 `cpuacct.usage`, v2 `cpu.stat`), which keeps the time of members
  that exited, to the nanosecond; else the kernel's counters of CPU time (`count_from_now`: one per thread of every
  member, opened by the evaluator while the sandbox is frozen and inherited by every thread and process created
  after, which counts what those used however they ended: a child reaped without a trace because its parent ignores
  SIGCHLD, which /proc never shows, included); else the sum over the members of each one's CPU clock (every
  thread, to the nanosecond) and of the children it reaped (the sandbox's init reaps orphaned helpers, so their
  time stays in the sum). The kernel gives a reaped child's time (and a zombie's) to the clock tick only (10 ms where `CLK_TCK` is
  100): that part is kept apart (`CpuTime`), so that a clock made of many short requests can spread what no reading
  saw evenly instead of losing it (a helper that exits within each request moves the total only every few
  requests), and never spreads the time a process had when it was last seen alive.

Nothing here imports torch.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import threading
import time
from typing import NamedTuple

from .. import cpusampler
from ..shared.protocol import close_all
from . import proctree
from .cgroup import Cgroup

FREEZE_WAIT_S = 2.0  # the cgroup freezer's bound before signals are used instead; then the signals' bound
FREEZE_LOAD_WAIT_S = 30.0  # past that bound, how long members that use almost no CPU may take to be scheduled and stop
FREEZE_BORN_MAX = 2  # processes the members may start meanwhile (one in a fork as its stop came, and its own)
FREEZE_RUN_NS = 250_000_000  # CPU time the members may use past that bound: a process with its stop pending runs
# at most to its next return from the kernel (microseconds); one continued by another member runs its own code


class FreezeError(RuntimeError):
    """The sandbox's processes could not all be stopped. `candidates`: by the candidate's doing (its members kept
    running their own code while being stopped, one continuing another, or kept starting processes); False: the
    host was too busy to schedule them so they could stop, and they used almost no CPU and started nothing meanwhile
    (the machine's doing, not the candidate's)."""

    def __init__(self, message: str, candidates: bool = True) -> None:
        super().__init__(message)
        self.candidates = candidates


def _load() -> str:
    try:
        with open("/proc/loadavg") as f:
            one, five, _, runnable, _ = f.read().split()
        return f"load average {one} over 1 min, {five} over 5, {runnable.split('/')[0]} runnable now, " \
               f"{os.cpu_count()} CPUs"
    except (OSError, ValueError):
        return "load not readable"


def _state(pid: int) -> str:
    st = proctree.stat(pid)
    return st[0] if st else "X"


_SIGSTOP_BIT = 1 << (signal.SIGSTOP - 1)


def _stopped(pid: int) -> bool:
    """`pid` runs none of its code until continued: stopped (or gone), or in an uninterruptible wait in the kernel
    (a driver call: a CUDA context being made, a page of a large allocation) with its stop already under way, the
    SIGSTOP pending or another of its threads stopped: it stops as it leaves the kernel, before any code of its own
    runs. Without this, a process that sat in a driver call for longer than the freeze's bound was never seen
    stopped."""
    state = _state(pid)
    if state in ("T", "t", "Z", "X"):
        return True
    if state != "D":
        return False
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read().decode(errors="replace")
    except OSError:
        return True  # gone meanwhile
    for key in ("SigPnd", "ShdPnd"):
        m = re.search(rf"^{key}:\s*([0-9a-fA-F]+)", status, re.MULTILINE)
        if m and int(m.group(1), 16) & _SIGSTOP_BIT:
            return True
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return any(_state(int(t)) in ("T", "t") for t in tids)  # /proc/TID/stat: that thread's own state


def _cpu_clock_ns(pid: int) -> int | None:
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)  # its CPU clock (CPUCLOCK_SCHED), every thread
    except OSError:
        return None


class _LateStop:
    """What a sandbox's members do while a freeze waits past its signals' bound: the CPU time they use (each
    member's own clock from when it was first seen, and the sandbox's accounting, which also has the time of those
    that ended) and how many processes they start."""

    def __init__(self, members: Members, pids: list[int]) -> None:
        self.members = members
        self.start_ns = members.cpu_ns()
        self.known = set(pids)
        self.born = 0
        self.clocks: dict[int, tuple[int, int]] = {}  # pid: (first, last) reading of its CPU clock
        self.cpu_ns = 0

    def read(self, pids: list[int]) -> None:
        for p in pids:
            if p not in self.known:
                self.known.add(p)
                self.born += 1
            ns = _cpu_clock_ns(p)
            if ns is not None:
                self.clocks[p] = (self.clocks.get(p, (ns, ns))[0], ns)
        own = sum(last - first for first, last in self.clocks.values())
        self.cpu_ns = max(own, self.members.cpu_ns() - self.start_ns)


class CpuTime(NamedTuple):
    """A sandbox's CPU time so far (ns; differences of two readings are what it used between them).

    `exact_ns`: its live processes' clocks, to the nanosecond. `coarse_ns`: the time of processes that ended (reaped
    children's, zombies'), which /proc gives in whole clock ticks only. `moved_ns`: the last exact reading of every
    process seen alive that has ended since: its time moved from `exact_ns` into `coarse_ns` when it ended (the
    difference's `unseen_ns` is then what ended processes used that no reading saw, which is what a clock of short
    requests has to spread; time a process used before it was last seen is never in it)."""

    exact_ns: int = 0
    coarse_ns: int = 0
    moved_ns: int = 0

    @property
    def total_ns(self) -> int:
        return self.exact_ns + self.coarse_ns

    @property
    def unseen_ns(self) -> int:
        return self.coarse_ns - self.moved_ns

    def __sub__(self, other: object) -> CpuTime:  # type: ignore[override]
        assert isinstance(other, CpuTime)
        return CpuTime(self.exact_ns - other.exact_ns, self.coarse_ns - other.coarse_ns,
                       self.moved_ns - other.moved_ns)

    def plus(self, other: CpuTime) -> CpuTime:
        return CpuTime(self.exact_ns + other.exact_ns, self.coarse_ns + other.coarse_ns,
                       self.moved_ns + other.moved_ns)


TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
CPU_CGROUP, CPU_COUNTERS, CPU_SUM = "cgroup", "counters", "sum"


class Members:
    """The processes of one sandbox. `root`: its outermost process (the one the evaluator started); `keep`: pids
    that run the sandbox's own machinery (bubblewrap's processes), never stopped."""

    def __init__(self, root: int, cgroup: Cgroup | None = None, keep: tuple[int, ...] = ()) -> None:
        self.root = root
        self.cgroup = cgroup
        self.keep = set(keep)
        self.how = "cgroup freezer" if cgroup is not None and cgroup.can_freeze else "SIGSTOP to every member"
        self._cpu_lock = threading.Lock()
        self._counters: list[int] = []  # the kernel's CPU time counters (count_from_now)
        self._seen: dict[tuple[int, str], int] = {}  # the live members at the last reading: their CPU clocks
        self._moved_ns = 0  # see CpuTime.moved_ns
        # what measures its CPU time: CPU_CGROUP, CPU_COUNTERS (once counting), CPU_SUM; why the counters could not
        self.cpu_source = CPU_CGROUP if cgroup is not None and cgroup.cpu_ns() is not None else CPU_SUM
        self.counters_error = ""

    def all(self) -> list[int]:
        """Every process of the sandbox, bubblewrap's own included, zombies included (their time is the sum's)."""
        if self.cgroup is not None and self.cgroup.dirs:
            got = set(self.cgroup.pids())
            if got:
                return sorted(got)
        return [self.root, *proctree.descendants(self.root, zombies=True)]

    def pids(self) -> list[int]:
        """The processes that run the candidate's code (or could): every member but bubblewrap's."""
        return [p for p in self.all() if p not in self.keep and _state(p) not in ("Z", "X")]

    def count_from_now(self) -> None:
        """Count the sandbox's CPU time with the kernel's inherited counters from now on (where its cgroup does not
        account it). Call while every member is stopped, so that no thread is made between listing the threads and
        counting them; idempotent. Where counters cannot be opened (`perf_event_open` not allowed), the sum over the
        members stays the measure."""
        if self.cpu_source != CPU_SUM or self.counters_error:
            return
        fds: list[int] = []
        try:
            for p in self.all():
                try:
                    tids = [int(t) for t in os.listdir(f"/proc/{p}/task")]
                except OSError:
                    continue  # gone (a zombie reaped meanwhile)
                for tid in tids:
                    try:
                        fds.append(cpusampler.count_cpu(tid))
                    except OSError as e:
                        if e.errno != errno.ESRCH:  # a thread that ended meanwhile is no one to count
                            raise
        except OSError as e:
            close_all(fds)
            self.counters_error = e.strerror or str(e)
            return
        with self._cpu_lock:
            self._counters = fds
            self.cpu_source = CPU_COUNTERS

    @property
    def cpu_how(self) -> str:
        """What measures the sandbox's CPU time, in words (for a verdict's `checked`)."""
        if self.cpu_source == CPU_CGROUP:
            return "its cgroup's CPU accounting"
        if self.cpu_source == CPU_COUNTERS:
            return "the kernel's CPU time counters on its threads, inherited by every thread and process they made"
        return "the sum over its processes (those that ended: to the clock tick)" + (
            f"; the kernel's CPU counters could not be opened: {self.counters_error}" if self.counters_error else "")

    def close(self) -> None:
        with self._cpu_lock:
            close_all(self._counters)
            self._counters = []

    def cpu(self) -> CpuTime:
        """CPU time of the whole sandbox so far: what every member used, those that ended included."""
        if self.cpu_source == CPU_CGROUP and self.cgroup is not None:  # (a cgroup without accounting: not asked)
            ns = self.cgroup.cpu_ns()
            if ns is not None:
                return CpuTime(ns, 0)
        with self._cpu_lock:
            if self.cpu_source == CPU_COUNTERS:
                total = 0
                for fd in self._counters:
                    try:
                        total += cpusampler.read_count(fd)
                    except OSError:
                        pass
                return CpuTime(total, 0)
            exact = coarse = 0
            seen: dict[tuple[int, str], int] = {}
            for p in self.all():
                st = proctree.stat(p)
                if st is None:
                    continue  # gone meanwhile: its time is its reaper's now
                coarse += (int(st[13]) + int(st[14])) * TICK_NS  # the children it reaped
                own = _cpu_clock_ns(p)
                if own is None:  # a zombie: its clock is gone, /proc still has its ticks
                    coarse += (int(st[11]) + int(st[12])) * TICK_NS
                    continue
                exact += own
                seen[(p, st[19])] = own  # keyed by its start time too: a pid can be reused
            self._moved_ns += sum(ns for key, ns in self._seen.items() if key not in seen)
            self._seen = seen
            return CpuTime(exact, coarse, self._moved_ns)

    def cpu_ns(self) -> int:
        return self.cpu().total_ns

    def freeze(self) -> None:
        if self.cgroup is not None and self.cgroup.can_freeze and self.cgroup.freeze(True, FREEZE_WAIT_S):
            return
        quiet = 0
        t0 = time.monotonic()
        late: _LateStop | None = None  # what the members do once past the signals' bound
        while True:
            members = self.pids()
            running = [p for p in members if not _stopped(p)]
            if not running:
                quiet += 1
                if quiet == 2:
                    return
                continue
            quiet = 0
            waited = time.monotonic() - t0
            if waited >= FREEZE_WAIT_S:
                # Not stopped yet: on a loaded host a process whose stop is pending may wait that long for a CPU
                # to stop on. Waiting like that it uses none and starts nothing; one that a member keeps continuing
                # runs its own code.
                if late is None:
                    late = _LateStop(self, members)
                late.read(members)
                if late.cpu_ns > FREEZE_RUN_NS or late.born > FREEZE_BORN_MAX:
                    raise FreezeError(
                        f"{len(running)} process(es) of the candidate's sandbox would not stay stopped: over "
                        f"{waited - FREEZE_WAIT_S:.1f} s of being stopped its processes ran {late.cpu_ns / 1e6:.0f} "
                        f"ms of CPU and started {late.born} more")
                if waited >= FREEZE_WAIT_S + FREEZE_LOAD_WAIT_S:
                    raise FreezeError(
                        f"{len(running)} process(es) of the candidate's sandbox had not stopped after {waited:.0f} s, "
                        f"using almost no CPU meanwhile ({late.cpu_ns / 1e6:.0f} ms): waiting for a CPU on a host this busy "
                        f"({_load()})", candidates=False)
            proctree.signal_all(running, signal.SIGSTOP)
            time.sleep(0.005 if late is not None else 0.0002 if len(running) == 1 else 0.001)

    def thaw(self) -> None:
        if self.cgroup is not None and self.cgroup.can_freeze:
            self.cgroup.freeze(False, FREEZE_WAIT_S)
        proctree.signal_all(self.pids(), signal.SIGCONT)
