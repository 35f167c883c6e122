"""The worker pool: single-use device workers have their replacements started ahead, so a candidate rarely
waits for a fresh process (torch import, CUDA context, warm-up)."""

from __future__ import annotations

import threading
import time

import pytest
from eval_helpers import pid_exists

from evaluator.processes import pool as pool_mod
from evaluator.processes.environment import scrubbed_env
from evaluator.processes.handle import Spec, WorkerError
from evaluator.processes.pool import Pool


def _spec(role: str) -> Spec:
    return Spec(role, tuple(scrubbed_env({"KLSP_DEVICE": "cpu"}).items()))


def _wait(pred, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def _idle_ready(pool: Pool) -> int:
    with pool._lock:
        return sum(1 for w in pool._idle if not w.dead)


def test_single_use_pool_keeps_its_spares_and_starts_replacements_at_acquire() -> None:
    pool = Pool(_spec("runner"), size=1, warm=2, single_use=True)
    seen: set[int] = set()
    try:
        pool.refill_async()
        _wait(lambda: _idle_ready(pool) == 2)  # spares beyond `size` for a single-use pool
        w = pool.acquire()
        assert w.wait_ready().device == "cpu"
        # the replacement is started now, while `w` is busy: two spares again before `w` is given back
        _wait(lambda: _idle_ready(pool) == 2 and pool._spawning == 0)
        assert len(pool.pids()) == 3
        pool.release(w, tainted=True)  # candidate code ran in it: killed, never reused
        _wait(lambda: not pid_exists(w.pid) or w.proc.poll() is not None, timeout=10)
        for _ in range(3):  # several cycles never overshoot the spares
            w = pool.acquire()
            seen.add(w.pid)
            pool.release(w, tainted=True)
        _wait(lambda: _idle_ready(pool) == 2 and pool._spawning == 0)
        time.sleep(0.5)
        assert len(pool.pids()) == 2, pool.pids()
        seen |= set(pool.pids())
    finally:
        pool.close()
    time.sleep(0.5)
    assert not [p for p in seen if pid_exists(p)], "workers outlived close()"


def test_reused_pool_spares_never_exceed_its_size() -> None:
    pool = Pool(_spec("recorder"), size=1, warm=3, single_use=False)
    try:
        assert pool.warm == 1
    finally:
        pool.close()


def test_missing_spares_start_together_not_one_after_another() -> None:
    pool = Pool(_spec("runner"), size=1, warm=3, single_use=True)
    try:
        pool.refill_async()
        # all three processes exist before the first of them has finished starting (torch import: seconds)
        _wait(lambda: len(pool.pids()) == 3, timeout=5)
        assert _idle_ready(pool) < 3
        _wait(lambda: _idle_ready(pool) == 3 and pool._spawning == 0)
    finally:
        pool.close()


def test_callers_queued_for_the_device_get_their_runners_started_ahead() -> None:
    import threading

    pool = Pool(_spec("runner"), size=1, warm=0, single_use=True, ahead=2)
    got: list[int] = []
    try:
        first = pool.acquire()  # the one slot, held: three more callers queue behind it
        threads = [threading.Thread(target=lambda: (got.append(w.pid), pool.release(w, tainted=True))
                                    if (w := pool.acquire()) else None) for _ in range(3)]
        for t in threads:
            t.start()
        _wait(lambda: pool._waiting == 3, timeout=10)
        # two started ahead (ahead=2), besides the busy one, while the queue waits for the slot
        _wait(lambda: len(pool.pids()) == 3 and _idle_ready(pool) == 2)
        pool.release(first, tainted=True)
        for t in threads:
            t.join(timeout=120)
        assert len(got) == 3 and len(set(got)) == 3  # a fresh process each
        # nobody waits any more: nothing is kept beyond `warm` (0), each runner holds a CUDA context on a GPU
        _wait(lambda: not pool.pids() and pool._spawning == 0, timeout=30)
    finally:
        pool.close()


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_on_the_cpu_a_timed_round_stops_compile_workers_too(tmp_path) -> None:
    """On a CPU device, compile workers (recorders, builders: spares starting up or compiling another candidate)
    take the cores a timed call runs on: the gate stops them for the round and lets them go on after it."""
    from eval_helpers import fast_settings

    from evaluator import Evaluator

    with Evaluator(fast_settings(str(tmp_path / "cache"), warm_workers=1)) as ev:
        ev._start(None)
        assert ev._recorders is not None and ev._builders is not None
        _wait(lambda: _idle_ready(ev._recorders) >= 1 and _idle_ready(ev._builders) >= 1)
        compile_pids = ev._recorders.pids() + ev._builders.pids()
        members = [p for w in ev._recorders.live_workers() + ev._builders.live_workers() for p in w.members.pids()]
        assert compile_pids and members
        with ev._gate.exclusive():
            assert all(_state(p) in ("T", "t", "gone") for p in members), [(p, _state(p)) for p in members]
        time.sleep(0.2)
        assert not any(_state(p) in ("T", "t") for p in members), [(p, _state(p)) for p in members]


def test_a_caller_takes_the_worker_already_starting_and_misses_in_a_row_keep_more_spares(monkeypatch) -> None:
    """Verdicts in a row faster than a runner starts: a caller that finds no idle spare takes the one already
    starting (not a fresh one of its own, which would be ready later), and the pool keeps BURST_MAX spares more
    while callers keep finding none, started at the miss (while that caller still waits: started only once it
    has its worker, they were late for the next caller, and every other verdict of a run waited for a start);
    once nobody has missed for BURST_IDLE_S, the extra spares go."""
    monkeypatch.setattr(pool_mod, "BURST_IDLE_S", 60.0)
    pool = Pool(_spec("runner"), size=2, warm=1, single_use=True, ahead=2)
    try:
        pool.refill_async()
        _wait(lambda: _idle_ready(pool) == 1 and pool._spawning == 0)
        a = pool.acquire()  # the spare; its replacement starts now
        _wait(lambda: len(pool.pids()) == 2, timeout=10)
        starting = set(pool.pids()) - {a.pid}
        got: dict[str, object] = {}
        t = threading.Thread(target=lambda: got.setdefault("b", pool.acquire()))
        t.start()  # none idle yet: it waits for the one starting, not another
        _wait(lambda: pool._claims == 1 or "b" in got, timeout=10)
        most, until, seen = 0, time.monotonic() + 90, set(starting)
        while pool._claims == 1 and time.monotonic() < until:  # what runs while it waits: `a`, the one it waits
            # for, and the burst's spares
            pids = pool.pids()
            most = max(most, len(pids))
            seen |= set(pids)
            time.sleep(0.01)
        t.join(timeout=90)
        b = got["b"]
        # a worker that was starting while it waited: the one started before, or a burst's spare where that one
        # was ready first (a loaded machine starts them in any order), never one started after for itself
        assert b.pid in seen - {a.pid}, (b.pid, seen)
        assert b.wait_ready().device == "cpu"
        assert pool._burst == 2
        assert most >= 2 + pool_mod.BURST_MAX, most
        _wait(lambda: _idle_ready(pool) == 3 and pool._spawning == 0)  # warm 1 + two spares more for the run
        pool.release(a, tainted=True)
        pool.release(b, tainted=True)
        assert _idle_ready(pool) == 3  # the run may go on: the spares stay
        monkeypatch.setattr(pool_mod, "BURST_IDLE_S", 1.0)  # nobody misses from now on (and nobody asks):
        _wait(lambda: pool._burst == 0 and not pool._burst_watch, timeout=10)  # back to `warm`
        _wait(lambda: _idle_ready(pool) == 1 and pool._spawning == 0)
        time.sleep(0.3)
        assert len(pool.pids()) == 1, pool.pids()
    finally:
        pool.close()


def test_a_caller_waiting_for_a_starting_worker_can_be_cancelled() -> None:
    pool = Pool(_spec("runner"), size=2, warm=1, single_use=True, ahead=1)
    cancel = threading.Event()
    try:
        pool.refill_async()
        _wait(lambda: pool._spawning == 1, timeout=10)
        threading.Timer(0.3, cancel.set).start()
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match="cancelled"):
            pool.acquire(cancel)  # waits for the spare that is starting (a runner takes seconds), then is cancelled
        assert 0.25 < time.monotonic() - t0 < 1.5
        assert pool._claims == 0 and pool._slots.acquire(blocking=False)  # its claim and its slot given back
        pool._slots.release()
    finally:
        pool.close()


def test_callers_announced_have_their_workers_started_at_once_and_kept_until_they_come() -> None:
    """A job that says n candidates are coming (`expect`) has n spares ready before its candidates ask (at most
    `ahead` beyond `warm`), so the last of them does not wait for a start the first ones' acquires began; what was
    started for callers that never came goes once the job says so."""
    pool = Pool(_spec("runner"), size=4, warm=1, single_use=True, ahead=2)
    taken = []
    try:
        pool.refill_async()
        _wait(lambda: _idle_ready(pool) == 1 and pool._spawning == 0)
        with pool.expect(1):  # no more than `warm` covers: nothing started for it
            time.sleep(0.3)
            assert len(pool.pids()) == 1
        with pool.expect(5):  # warm 1 + at most `ahead` 2 more
            _wait(lambda: _idle_ready(pool) == 3 and pool._spawning == 0)
            time.sleep(0.3)
            assert len(pool.pids()) == 3, pool.pids()
            for _ in range(3):  # each finds a worker ready, none waits for a start
                t0 = time.monotonic()
                w = pool.acquire()
                assert w.wait_ready().device == "cpu" and time.monotonic() - t0 < 1.0
                taken.append(w)
            _wait(lambda: pool._spawning == 0 and _idle_ready(pool) == 2)  # warm 1 + 1 for the two still announced
            time.sleep(0.3)
            assert _idle_ready(pool) == 2 and len(pool.pids()) == 5, pool.pids()
        # the block ended with two announced callers that never came: back to `warm` once the busy ones are back
        for w in taken:
            pool.release(w, tainted=True)
        _wait(lambda: _idle_ready(pool) == 1 and pool._spawning == 0 and len(pool.pids()) == 1, timeout=30)
        assert not pool._expected
    finally:
        pool.close()
