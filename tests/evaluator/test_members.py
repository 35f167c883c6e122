"""The sandbox's processes, whole: membership beyond the worker's own tree, freezing, CPU time of every member.

A stand-in sandbox: a root process that is its descendants' subreaper (as bubblewrap's init is in its PID
namespace), a worker below it, and helpers that are not the worker's children (made the way
`clone(CLONE_PARENT)` or a double fork makes them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from evaluator.processes import proctree
from evaluator.processes.members import CPU_COUNTERS, Members
from evaluator.stages.device.time import evened

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux /proc")

# The root: becomes a subreaper, starts the "worker", reaps whatever is orphaned to it, and prints pids on request.
ROOT = textwrap.dedent(r'''
    import ctypes, os, signal, subprocess, sys, time
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans below come to us (bwrap's init)
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
    print(worker.pid, flush=True)
    while True:
        try:
            os.waitpid(-1, 0)  # reap (their CPU time goes into ours, as an init's does)
        except ChildProcessError:
            time.sleep(0.05)
''')

# The worker: spins in a helper that it orphans (the helper's parent becomes the root, not the worker).
WORKER_ORPHAN = textwrap.dedent(r'''
    import os, sys, time
    if os.fork() == 0:
        if os.fork() == 0:
            t = time.time()
            while True:  # the helper: busy until killed
                pass
        os._exit(0)
    os.wait()
    while True:
        time.sleep(0.05)
''')


def _orphaning_worker(helpers: int, burn_s: float, then: str, between: str = "", done: bool = False) -> str:
    """A worker that makes `helpers` helpers one after another, each orphaned to the root (a double fork: its parent
    becomes the root, not the worker), each burning `burn_s` of CPU and then doing `then`; `between` after each,
    and "done" printed after the last where `done`."""
    return textwrap.dedent(f'''
        import os, sys, time
        for _ in range({helpers}):
            if os.fork() == 0:
                if os.fork() == 0:
                    t = time.process_time()
                    while time.process_time() - t < {burn_s}:
                        pass
                    {then}
                os._exit(0)
            os.wait()
            {between or "pass"}
        {'print("done", flush=True)' if done else ""}
        while True:
            time.sleep(0.05)
    ''')


# The worker: a helper that burns 0.4 s of CPU, then exits and is reaped by the root.
WORKER_DIES = _orphaning_worker(1, 0.4, "os._exit(0)")


def _start(worker_code: str) -> tuple[subprocess.Popen, int]:
    root = subprocess.Popen([sys.executable, "-c", ROOT, worker_code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert root.stdout is not None
    worker = int(root.stdout.readline())
    return root, worker


def _stop(root: subprocess.Popen) -> None:
    """Everything the stand-in started (one process group: none of them makes its own)."""
    for _ in range(3):
        try:
            os.killpg(root.pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    root.wait(timeout=10)


def _wait_for(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def _state(pid: int) -> str:
    st = proctree.stat(pid)
    return st[0] if st else "X"


def test_a_helper_outside_the_workers_tree_is_a_member_and_freezes_with_it() -> None:
    root, worker = _start(WORKER_ORPHAN)
    try:
        m = Members(root.pid, keep=(root.pid,))

        def orphaned() -> bool:
            others = [p for p in m.pids() if p != worker]
            return len(others) == 1 and int((proctree.stat(others[0]) or ["", "0"])[1]) == root.pid

        _wait_for(orphaned)  # the helper's parent is the root, not the worker
        helper = next(p for p in m.pids() if p != worker)
        assert worker not in proctree.descendants(helper)
        m.freeze()
        assert all(_state(p) == "T" for p in m.pids()), [(p, _state(p)) for p in m.pids()]
        assert _state(root.pid) != "T"  # the sandbox's own machinery keeps running
        c0 = m.cpu_ns()
        time.sleep(0.3)
        assert m.cpu_ns() - c0 < 20_000_000  # frozen: the busy helper uses nothing
        m.thaw()
        assert all(_state(p) != "T" for p in m.pids())
        c0 = m.cpu_ns()
        _wait_for(lambda: m.cpu_ns() - c0 > 100_000_000)  # running again (as fast as a loaded host lets it): its
        # time is the sandbox's
    finally:
        _stop(root)


def test_the_cpu_time_of_a_helper_that_exited_stays_in_the_sum() -> None:
    root, worker = _start(WORKER_DIES)
    try:
        m = Members(root.pid, keep=(root.pid,))
        c0 = m.cpu_ns()
        _wait_for(lambda: len(m.pids()) == 2)  # the helper runs
        _wait_for(lambda: len(m.pids()) == 1)  # ... and is gone, reaped by the root
        used = m.cpu_ns() - c0
        # the worker alone (its own clock and its reaped children) misses it: the old accounting
        assert used > 300_000_000, used
    finally:
        _stop(root)


def _short_requests(m: Members, step) -> tuple[list[float], list[float]]:
    """Readings of the sandbox's CPU time 5 ms apart, as a clock of short requests takes them: each one's total and
    its part of processes that ended unseen (ms). `step(i)` runs before request i; False: no more."""
    raw: list[float] = []
    unseen: list[float] = []
    last = m.cpu()
    i = 0
    while step(i):
        time.sleep(0.005)
        now = m.cpu()
        d = now - last
        raw.append(d.total_ns / 1e6)
        unseen.append(d.unseen_ns / 1e6)
        last = now
        i += 1
    return raw, unseen


# The worker: 150 short helpers one after another, each orphaned to the root, burning 2 ms of CPU and exiting (a
# helper per call that does the call's work); then it says so.
WORKER_SHORT_HELPERS = _orphaning_worker(150, 0.002, "os._exit(0)", "time.sleep(0.002)", done=True)


def test_short_helpers_that_exit_are_on_a_clock_of_short_requests() -> None:
    """/proc gives an ended process's time in whole clock ticks (10 ms), so a 5 ms request's difference of it is 0
    most times: the median of such requests left a helper that exits within each one nearly off the clock. Its
    part, kept apart, is spread evenly: the requests' median then carries it."""
    root, worker = _start(WORKER_SHORT_HELPERS)
    try:
        m = Members(root.pid, keep=(root.pid,))
        os.set_blocking(root.stdout.fileno(), False)
        start = m.cpu()
        end = time.monotonic() + 30

        def more(_: int) -> bool:
            assert time.monotonic() < end, "the worker never finished"
            return not (root.stdout.readline() or "").startswith("done")

        raw, coarse = _short_requests(m, more)
        total = (m.cpu() - start).total_ns / 1e6
        assert total > 150 * 2 * 0.9, total  # every helper's time is in the sandbox's sum
        share = total / len(raw)
        fair = sorted(evened(raw, coarse))[len(raw) // 2]
        assert fair > 0.5 * share, (fair, share, sorted(raw)[len(raw) // 2])
    finally:
        _stop(root)


# The worker: 20 helpers orphaned to the root, each burning 30 ms of CPU, then idle (time used before a
# clock starts, in processes the clock then sees end).
WORKER_PRELOADED = _orphaning_worker(20, 0.03, "time.sleep(3600)")


def test_time_a_process_had_before_it_ended_is_never_spread_over_the_requests() -> None:
    """Time a process had used when last seen alive moves, as it ends, from its exact clock into the tick-counted
    time of ended processes. Spread evenly, it would lower the requests in which such processes end and raise the
    others: with them ending in most requests, the median would fall below the work done (here none; it was -12 ms
    a request). Only what no reading saw is spread."""
    root, worker = _start(WORKER_PRELOADED)
    try:
        m = Members(root.pid, keep=(root.pid,))

        def burnt(p: int) -> bool:
            try:
                return time.clock_gettime_ns(((~p) << 3) | 2) >= 29_000_000
            except OSError:
                return False

        _wait_for(lambda: sum(burnt(p) for p in m.pids() if p != worker) == 20)
        helpers = [p for p in m.pids() if p != worker]

        def end_one(i: int) -> bool:  # a helper ends in 20 of 33 requests
            if i % 5 in (0, 2, 3) and helpers:
                h = helpers.pop()
                os.kill(h, signal.SIGKILL)
                _wait_for(lambda: proctree.stat(h) is None)  # reaped by the root: its time is the root's now
            return i < 33

        raw, unseen = _short_requests(m, end_one)
        assert not helpers
        median = sorted(evened(raw, unseen))[len(raw) // 2]
        assert abs(median) < 3.0, (median, raw, unseen)
        assert abs(sum(raw)) < 25.0, raw  # nothing ran: the total moves by the ticks' truncation only
    finally:
        _stop(root)


# The worker: ignores SIGCHLD (its children are reaped by the kernel as they end, and their CPU time is added to
# no one's in /proc), then, once told, three children that burn 0.1 s of CPU each.
WORKER_IGNORES_SIGCHLD = textwrap.dedent(r'''
    import os, signal, sys, time
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    go = "{go}"
    while not os.path.exists(go):
        time.sleep(0.01)
    kids = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            t = time.process_time()
            while time.process_time() - t < 0.1:
                pass
            os._exit(0)
        kids.append(pid)
    while any(os.path.exists(f"/proc/{{k}}") for k in kids):  # gone as they end: nobody waits for them
        time.sleep(0.01)
    open(go + ".done", "w").close()
    while True:
        time.sleep(0.05)
''')


def test_children_reaped_without_a_trace_are_counted(tmp_path) -> None:
    """A process that ignores SIGCHLD has its children reaped by the kernel without their CPU time going to anyone
    in /proc (measured: 0 ticks for 0.3 s of work): the sum over the members never saw them. The kernel's
    inherited counters, opened while the sandbox is frozen, count them."""
    go = tmp_path / "go"
    root, worker = _start(WORKER_IGNORES_SIGCHLD.format(go=go))
    try:
        m = Members(root.pid, keep=(root.pid,))
        _wait_for(lambda: len(m.pids()) == 1)
        m.freeze()
        m.count_from_now()
        if m.cpu_source != CPU_COUNTERS:
            pytest.skip(m.cpu_how)
        c0 = m.cpu()
        m.thaw()
        go.touch()
        _wait_for(lambda: (tmp_path / "go.done").exists())
        used = (m.cpu() - c0).total_ns
        assert used > 270_000_000, used
    finally:
        m.close()
        _stop(root)


def test_a_member_that_continues_another_cannot_undo_the_freeze() -> None:
    # two helpers that SIGCONT each other in a loop: the freeze stops both and they stay stopped
    code = textwrap.dedent(r'''
        import os, signal
        a = os.getpid()
        b = os.fork()
        while True:
            try:
                os.kill(a if b == 0 else b, signal.SIGCONT)
            except ProcessLookupError:
                pass
    ''')
    root, worker = _start(code)
    try:
        m = Members(root.pid, keep=(root.pid,))
        _wait_for(lambda: len(m.pids()) == 2)
        m.freeze()
        time.sleep(0.2)
        assert all(_state(p) == "T" for p in m.pids()), [(p, _state(p)) for p in m.pids()]
    finally:
        _stop(root)


def test_a_member_in_a_kernel_wait_with_its_stop_pending_counts_as_stopped() -> None:
    # the worker waits in the kernel, uninterruptibly (state D), as a process does in a driver call (a CUDA context
    # being made): here a vfork parent whose child never execs. A SIGSTOP stays pending until it leaves the kernel,
    # and it runs none of its code before stopping: frozen. (Seen stopped only as "T", it was never seen stopped, the
    # freeze failed after its bound, and the sandbox was left half-stopped.)
    code = textwrap.dedent(r'''
        import ctypes
        libc = ctypes.CDLL(None)
        if libc.vfork() == 0:
            libc.pause()
            libc._exit(0)
    ''')
    root, worker = _start(code)
    try:
        m = Members(root.pid, keep=(root.pid,))
        _wait_for(lambda: len(m.pids()) == 2 and _state(worker) == "D")
        t0 = time.monotonic()
        m.freeze()
        assert time.monotonic() - t0 < 1.0
        child = next(p for p in m.pids() if p != worker)
        assert _state(child) == "T" and _state(worker) == "D"
        with open(f"/proc/{worker}/status") as f:
            pending = {k: int(v, 16) for k, v in (ln.split(":") for ln in f if ln.startswith(("SigPnd", "ShdPnd")))}
        assert any(v & (1 << (signal.SIGSTOP - 1)) for v in pending.values()), pending
        m.thaw()
        _wait_for(lambda: _state(child) != "T")
    finally:
        _stop(root)


def test_a_freeze_that_fails_leaves_the_worker_running_and_holding_nothing() -> None:
    # a gate's freeze of another worker (a spare starting, a builder) that fails must not leave it stopped: the caller
    # got no hold to undo, so nothing would ever continue it
    from evaluator.processes.handle import Worker
    from evaluator.processes.members import FreezeError

    class Stuck:
        def __init__(self) -> None:
            self.thawed = 0

        def freeze(self) -> None:
            raise FreezeError("1 process(es) of the candidate's sandbox would not stay stopped")

        def thaw(self) -> None:
            self.thawed += 1

    w = Worker.__new__(Worker)
    w._holds, w._hold_lock, w.members = 0, __import__("threading").Lock(), Stuck()
    with pytest.raises(FreezeError):
        w.freeze()
    assert w._holds == 0 and w.members.thawed == 1
    w._holds = 1  # held by someone else already: a failed second hold leaves the first as it was
    with pytest.raises(FreezeError):
        w.freeze()
    assert w._holds == 1 and w.members.thawed == 1


WORKER_SLEEPS = "import time\nwhile True:\n    time.sleep(0.05)\n"
WORKER_SPINS = "while True:\n    pass\n"
WORKER_HOPS = "import os, time\nwhile True:\n    if os.fork():\n        os._exit(0)\n    time.sleep(0.01)\n"


def _stops_withheld(monkeypatch, until: float | None) -> None:
    """SIGSTOPs reach the members only from `until` (monotonic) on, never where None: the way a process with its stop
    pending waits, on a loaded host, for a CPU to stop on (or keeps being continued, when it spins meanwhile)."""
    real = proctree.signal_all

    def signal_all(pids, sig):
        if sig != signal.SIGSTOP or (until is not None and time.monotonic() >= until):
            return real(pids, sig)
        return None

    monkeypatch.setattr(proctree, "signal_all", signal_all)


def test_a_member_that_waits_for_a_cpu_past_the_bound_using_none_is_stopped_not_blamed(monkeypatch) -> None:
    from evaluator.processes import members as mm
    monkeypatch.setattr(mm, "FREEZE_WAIT_S", 0.3)
    root, worker = _start(WORKER_SLEEPS)
    try:
        m = Members(root.pid, keep=(root.pid,))
        _wait_for(lambda: len(m.pids()) == 1)
        t0 = time.monotonic()
        _stops_withheld(monkeypatch, until=t0 + 1.2)
        m.freeze()  # not a FreezeError at the bound: it used no CPU, it only had not stopped yet
        assert time.monotonic() - t0 >= 1.1
        assert _state(worker) == "T"
        m.thaw()
    finally:
        _stop(root)


@pytest.mark.parametrize("worker_code, load_wait_s, cpu_allowed_ms, candidates, says", [
    # waiting for a CPU on a loaded host: the host's doing
    (WORKER_SLEEPS, 1.0, 250, False, "using almost no CPU meanwhile"),
    # running its own code while being stopped (a member keeps continuing it)
    (WORKER_SPINS, 60.0, 250, True, "ms of CPU and started 0 more"),
    # each process gone before its stop reaches it, a new one in its place (any CPU allowed: its births decide)
    (WORKER_HOPS, 5.0, 10**6, True, "would not stay stopped"),
], ids=["idle", "running", "hopping"])
def test_a_member_never_stopped_is_judged_by_what_it_does_meanwhile(monkeypatch, worker_code: str,
                                                                    load_wait_s: float, cpu_allowed_ms: int,
                                                                    candidates: bool, says: str) -> None:
    from evaluator.processes import members as mm
    monkeypatch.setattr(mm, "FREEZE_WAIT_S", 0.3)
    monkeypatch.setattr(mm, "FREEZE_LOAD_WAIT_S", load_wait_s)
    monkeypatch.setattr(mm, "FREEZE_RUN_NS", cpu_allowed_ms * 1_000_000)
    root, worker = _start(worker_code)
    try:
        m = Members(root.pid, keep=(root.pid,))
        _wait_for(lambda: len(m.pids()) >= 1)
        _stops_withheld(monkeypatch, until=None)
        t0 = time.monotonic()
        with pytest.raises(mm.FreezeError) as e:
            m.freeze()
        assert e.value.candidates is candidates and says in str(e.value), str(e.value)
        assert candidates or "load average" in str(e.value), str(e.value)
        assert 0.3 <= time.monotonic() - t0 < 30
    finally:
        _stop(root)


@pytest.mark.parametrize("candidates", [True, False])
def test_a_freeze_that_fails_is_tampered_only_by_the_candidates_doing(candidates: bool) -> None:
    import uuid

    from evaluator import messages as M
    from evaluator.processes.members import FreezeError
    from evaluator.processes.referees import RefereeHandle
    from evaluator.settings import EvalSettings
    from evaluator.stages.device.session import DeviceSession, Stop

    class Runner:
        dead = False

        def freeze(self) -> None:
            raise FreezeError("1 process(es) of the candidate's sandbox ...", candidates=candidates)

    info = M.ReferenceLoaded(init_args=[], in_bytes=0, out_bytes=0, ref_mutates=False, slots_max=1, set_bytes=0)
    handle = RefereeHandle(worker=None, key="k", info=info, init_seed=1)  # type: ignore[arg-type]
    s = DeviceSession(EvalSettings(device="cpu"), handle, None, f"cuda-test-{uuid.uuid4().hex[:8]}",  # type: ignore[arg-type]
                      "salt", None, lambda stage, what: None, profile=False, time_it=False)
    s.runner = Runner()  # type: ignore[assignment]
    with pytest.raises(Stop) as e:
        s._freeze("time")
    assert e.value.status == ("tampered" if candidates else "infra_error"), e.value.message
    assert candidates or "not the candidate's" in e.value.message
