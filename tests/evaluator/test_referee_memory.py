"""A reference that runs out of device memory while this process's other evaluations hold some waits for it to go
back and loads again (evaluations started side by side take turns); with nothing of this process holding memory it
fails at once, as the reference's own failure."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from eval_helpers import Board

from evaluator import messages as M
from evaluator.errors import ReferenceFailed
from evaluator.processes import memory
from evaluator.processes.handle import WorkerFailed
from evaluator.processes.referees import Referees
from evaluator.settings import EvalSettings

OOM = "OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has 3.27 GiB free"
ARENA_OOM = "DriverError: cuMemCreate: CUDA driver error 2 (out of memory)"


class FakeWorker:
    def __init__(self, n: int, outcome: str) -> None:
        self.n, self.outcome, self.dead, self.pid = n, outcome, False, 10_000 + n

    def wait_ready(self, cancel: threading.Event | None = None) -> None:
        pass

    def ask(self, op: M.Op, req: M.Req, **kw: object) -> tuple[object, list[int]]:
        assert op is M.RefereeOps.load
        if self.outcome == "oom":
            raise WorkerFailed(M.Failed(error=OOM, error_type="OutOfMemoryError"))
        if self.outcome == "broken":
            raise WorkerFailed(M.Failed(error="NameError: name 'torhc' is not defined"))
        return {"loaded by": self.n}, []


class FakePool:
    """Hands out workers whose loads go as `outcomes` say, in turn."""

    def __init__(self, outcomes: list[str]) -> None:
        self.outcomes = list(outcomes)
        self.given: list[FakeWorker] = []
        self.released: list[tuple[int, bool]] = []

    def acquire(self, cancel: threading.Event | None = None) -> FakeWorker:
        w = FakeWorker(len(self.given), self.outcomes.pop(0))
        self.given.append(w)
        return w

    def release(self, w: FakeWorker, tainted: bool) -> None:
        self.released.append((w.n, tainted))


def referees(outcomes: list[str]) -> tuple[Referees, FakePool, memory.MemoryLedger]:
    r = Referees(EvalSettings(device="cpu"), threading.Lock())
    r.device = f"test-{uuid.uuid4().hex[:8]}"
    pool = FakePool(outcomes)
    r.pool = pool  # type: ignore[assignment]
    return r, pool, memory.ledger(r.device)


def test_out_of_memory_waits_for_this_process_to_give_memory_back() -> None:
    r, pool, ledger = referees(["oom", "ok"])
    ledger.admit(1, memory.Hold(0), free=lambda: 1, used=lambda p: 0, bound_s=0)  # another candidate holds memory
    got: dict[str, object] = {}

    def load() -> None:
        t0 = time.monotonic()
        got["h"] = r.get("REFERENCE", None, use=True)
        got["s"] = time.monotonic() - t0

    t = threading.Thread(target=load)
    t.start()
    time.sleep(0.4)
    assert t.is_alive(), "it should wait while another evaluation holds memory"
    ledger.release(1)
    t.join(10)
    h = got["h"]
    assert h.info == {"loaded by": 1}  # the second worker, after the release
    assert got["s"] >= 0.4
    assert pool.released == [(0, True)]  # the one that ran out went back tainted


def test_memory_given_back_during_the_load_is_not_waited_for_again() -> None:
    r, pool, ledger = referees(["oom", "ok"])
    ledger.admit(1, memory.Hold(0), free=lambda: 1, used=lambda p: 0, bound_s=0)
    real_ask = FakeWorker.ask

    def ask_then_release(self: FakeWorker, op: M.Op, req: M.Req, **kw: object) -> tuple[object, list[int]]:
        if self.n == 0:
            ledger.release(1)  # the other evaluation ends while this load runs out of memory
        return real_ask(self, op, req, **kw)

    FakeWorker.ask = ask_then_release  # type: ignore[method-assign]
    try:
        t0 = time.monotonic()
        h = r.get("REFERENCE", None)
    finally:
        FakeWorker.ask = real_ask  # type: ignore[method-assign]
    assert h.info == {"loaded by": 1}
    assert time.monotonic() - t0 < 2.0


def test_out_of_memory_with_nothing_of_ours_holding_memory_fails_at_once() -> None:
    r, pool, _ = referees(["oom"])
    t0 = time.monotonic()
    with pytest.raises(ReferenceFailed, match="out of memory"):
        r.get("REFERENCE", None)
    assert time.monotonic() - t0 < 2.0
    assert len(pool.given) == 1



NOTEBOOK = 4_200_000  # another process on the device (a notebook's tensors); above any pid_max (2**22),
# so no process of the machine running the tests lends it a name


def _crowded(outcomes: list[str], notebook_gb: int) -> tuple[Referees, FakePool, memory.MemoryLedger, Board]:
    """Referees on a 10 GB device where a notebook holds `notebook_gb`; each referee that runs out of memory held
    1 GB and asked for 6 GB more (OOM's text)."""
    from evaluator.processes.devmon import FakeMonitor

    r, pool, ledger = referees(outcomes)
    r.monitor = FakeMonitor(memory={NOTEBOOK: notebook_gb * GB}, total=10 * GB)
    real_acquire = pool.acquire

    def acquire(cancel: threading.Event | None = None) -> FakeWorker:
        w = real_acquire(cancel)
        r.monitor.memory[w.pid] = 1 * GB  # its context and what it allocated before it ran out
        return w

    pool.acquire = acquire  # type: ignore[method-assign]
    pool.release = lambda w, tainted: (pool.released.append((w.n, tainted)),  # type: ignore[method-assign]
                                       r.monitor.memory.pop(w.pid, None))
    ledger.board = board = Board()
    return r, pool, ledger, board


def test_a_load_out_of_memory_another_process_holds_waits_for_it_and_loads_again() -> None:
    # a notebook's 8 GB leave 2 of 10: the reference (7 GB) would fit beside nothing else; its load waits for the
    # notebook's memory, says so on the board (other evaluators let their idle referees go), and loads again
    r, pool, _, board = _crowded(["oom", "ok"], notebook_gb=8)
    threading.Timer(1.5, lambda: r.monitor.memory.pop(NOTEBOOK)).start()
    t0 = time.monotonic()
    h = r.get("REFERENCE", None)
    assert h.info == {"loaded by": 1} and 1.4 < time.monotonic() - t0 < 10
    assert board.posted and board.posted[0] == 5 * GB and board.posted[-1] == 0, board.posted  # 7 needed, 2 free


def test_a_load_out_of_memory_another_process_keeps_is_its_fault_never_the_references(monkeypatch) -> None:
    from evaluator.errors import EvaluatorError
    from evaluator.processes import referees as R

    monkeypatch.setattr(R, "LOAD_OTHERS_WAIT_S", 1.5)
    r, pool, _, _ = _crowded(["oom"] * 3, notebook_gb=8)
    with pytest.raises(EvaluatorError) as e:
        r.get("REFERENCE", None)
    assert not isinstance(e.value, ReferenceFailed), "the reference did nothing wrong"
    assert str(e.value).startswith("the reference ran out of device memory: it held 1.0 GB and needed about 7.0 GB "
                                   f"of the device's 10.0 GB, other processes held the rest: pid {NOTEBOOK} (8.0 GB) "
                                   "(waited "), str(e.value)
    # a reference too big for the device whatever runs beside it stays the reference's own failure
    r, pool, _, _ = _crowded(["oom"], notebook_gb=1)
    r.monitor.total = 6 * GB
    with pytest.raises(ReferenceFailed, match="out of memory"):
        r.get("REFERENCE", None)


def test_a_broken_reference_is_not_retried() -> None:
    r, pool, ledger = referees(["broken"])
    ledger.admit(1, memory.Hold(0), free=lambda: 1, used=lambda p: 0, bound_s=0)
    with pytest.raises(ReferenceFailed, match="torhc"):
        r.get("REFERENCE", None)
    assert len(pool.given) == 1
    ledger.release(1)


def test_a_load_waits_for_memory_promised_to_a_candidate_and_learns_its_footprint() -> None:
    """With a per-process view, a load is admitted like a candidate: it does not start while the free memory,
    less what an admitted candidate has not yet taken, is short of what the reference needs; once loaded, what
    its referee holds is what this reference is admitted with the next time."""
    from evaluator.processes.devmon import FakeMonitor

    gb = 1 << 30
    r, pool, ledger = referees(["ok"])
    mon = FakeMonitor(total=10 * gb)
    r.monitor = mon
    ledger.admit(7, memory.Hold(9 * gb, lambda: {99}), free=lambda: 10 * gb, used=lambda p: 0, bound_s=0)
    got: dict[str, object] = {}
    t = threading.Thread(target=lambda: got.setdefault("h", r.get("REFERENCE", None)))
    t.start()
    time.sleep(0.5)
    assert t.is_alive() and not pool.given, "the load waits: 9 of 10 GB are promised and not taken"
    mon.memory[99] = 9 * gb  # the candidate took its memory: nothing promised is left to come ...
    time.sleep(0.5)
    assert t.is_alive() and not pool.given, "... and 1 GB free is less than a first load is admitted with"
    real_acquire = pool.acquire

    def acquire(cancel: threading.Event | None = None) -> FakeWorker:
        w = real_acquire(cancel)
        mon.memory[w.pid] = 3 * gb  # what the referee holds once loaded
        return w

    pool.acquire = acquire  # type: ignore[method-assign]
    ledger.release(7)
    del mon.memory[99]
    t.join(10)
    assert got["h"].info == {"loaded by": 0}
    assert not ledger.held(), "the load's hold ends with the load"
    assert list(r.footprint.values()) == [3 * gb], "the next load of this reference is admitted with 3 GB"


def test_shed_lets_idle_referees_go_but_not_one_in_use_or_kept_for() -> None:
    r, pool, ledger = referees(["ok", "ok"])
    a = r.get("A", None, use=True)
    b = r.get("B", None)
    mark = ledger.releases()
    r.shed(keep=b.key)
    assert not pool.released and ledger.releases() == mark, "one in use and the one kept for stay"
    r.shed()
    assert pool.released == [(b.worker.n, True)], "the idle one goes"
    assert ledger.releases() == mark + 1, "whoever waits for memory tries again"
    assert r.get("A", None) is a



def test_a_referee_is_let_go_for_another_process_only_by_its_one_user_and_never_mid_request() -> None:
    r, pool, ledger = referees(["ok", "ok"])
    a = r.get("A", None, use=True)
    r.footprint[a.key] = 20 * GB
    again = r.get("A", None, use=True)  # a second candidate of the same task uses it too
    assert again is a and r.let_go(a) == 0 and not pool.released
    r.done_with(again)
    with a.lock:  # answering a request (its torch.compile ahead)
        assert r.let_go(a) == 0 and not pool.released
    mark = ledger.releases()
    assert r.let_go(a) == 20 * GB  # what its last load took
    assert pool.released == [(a.worker.n, True)] and ledger.releases() == mark + 1 and not r.holds("A")
    assert a.users == 0  # given up: its stage is no longer its user
    b = r.get("A", None, use=True)  # loaded again for it
    assert b is not a and r.holds("A") and b.users == 1

# -- a referee that runs out of device memory while it checks a candidate's output ----------------------------------

GB = 1 << 30


class Monitor:
    """NVML's per-process view as the test sets it."""

    available = True

    def __init__(self, procs: dict[int, int]) -> None:
        self.procs = procs

    def processes(self) -> dict[int, int]:
        return dict(self.procs)

    def free_bytes(self) -> tuple[int, int] | None:
        return None  # not known: the referee is asked


class CheckingReferee:
    """Its checks run out of memory while `free` (bytes, a function of time) is under `needs`."""

    pid = 20_000
    dead = False

    def __init__(self, free: object, needs: int) -> None:
        self.free, self.needs, self.asked = free, needs, []

    def ask(self, op: M.Op, req: M.Req, **kw: object) -> tuple[object, list[int]]:
        self.asked.append(op.name)
        free = self.free()  # type: ignore[operator]
        if op is M.RefereeOps.memory:
            return M.MemoryReport(free=free, total=140 * GB), []
        if op is M.RefereeOps.check and free < self.needs:
            raise WorkerFailed(M.Failed(error=OOM, error_type="OutOfMemoryError"))
        if op is M.RefereeOps.stage and free < self.needs:
            raise WorkerFailed(M.Failed(error=OOM, error_type="OutOfMemoryError"))
        if op is M.RefereeOps.open_arena:
            if free < self.needs:
                raise WorkerFailed(M.Failed(error=ARENA_OOM, error_type="DriverError"))
            return M.ArenaOpened(arena=1, nbytes=self.needs, layout=None, slots=1), []  # type: ignore[arg-type]
        return M.Checked(results=[]), []


class Runner:
    pid, dead = 30_000, False

    def processes(self) -> list[int]:
        return [self.pid]


def session(ref: CheckingReferee, procs: dict[int, int]) -> tuple[object, Board, list[int]]:
    from evaluator.processes.referees import RefereeHandle
    from evaluator.stages.device.session import DeviceSession

    info = M.ReferenceLoaded(init_args=[], in_bytes=6 * GB, out_bytes=6 * GB, ref_mutates=False, slots_max=1,
                             set_bytes=12 * GB, free_bytes=0, total_bytes=140 * GB)
    handle = RefereeHandle(worker=ref, key="k", info=info, init_seed=1)  # type: ignore[arg-type]
    s = DeviceSession(EvalSettings(device="cpu"), handle, None, f"cuda-test-{uuid.uuid4().hex[:8]}",  # type: ignore[arg-type]
                      "salt", None, lambda stage, what: None, profile=False, time_it=False)
    board = Board()
    memory.ledger(s.device).board = board
    shed: list[int] = []
    s.shed_referees = lambda: shed.append(1)
    s.monitor = Monitor(procs)  # type: ignore[assignment]
    s.runner = Runner()  # type: ignore[assignment]
    return s, board, shed


def test_a_check_out_of_memory_waits_for_other_processes_memory_and_is_asked_again() -> None:
    t0 = time.monotonic()
    ref = CheckingReferee(lambda: 2 * GB if time.monotonic() - t0 < 1.5 else 40 * GB, needs=13 * GB)
    s, board, shed = session(ref, {})
    got = s._referee(M.RefereeOps.check, M.Check(arena=0, items=[], precision=False))
    assert isinstance(got, M.Checked)
    assert ref.asked.count("check") == 2 and not s.ref.retired
    assert time.monotonic() - t0 >= 1.4
    # what it lacked was posted for other processes (their idle referees go) and withdrawn; ours went first
    assert board.posted and board.posted[0] == s._check_bytes() - 2 * GB and board.posted[-1] == 0, board.posted
    assert shed


def test_a_check_still_out_of_memory_after_the_wait_is_other_processes_doing(monkeypatch) -> None:
    from evaluator.stages.device import session as sm
    monkeypatch.setattr(sm, "REFEREE_MEMORY_WAIT_S", 1.0)
    ref = CheckingReferee(lambda: 2 * GB, needs=13 * GB)
    s, _, _ = session(ref, {ref.pid: 8 * GB, Runner.pid: 2 * GB, NOTEBOOK: 120 * GB})
    with pytest.raises(sm.Stop) as e:
        s._referee(M.RefereeOps.check, M.Check(arena=0, items=[], precision=False))
    assert e.value.status == "infra_error" and "not the candidate's fault" in e.value.message
    assert str(NOTEBOOK) in e.value.message and s.ref.retired


def test_a_check_waiting_for_memory_lets_another_candidate_of_its_referee_give_its_arena_back(monkeypatch) -> None:
    """Two candidates of one reference side by side: the first's check runs out of memory that the second's arena
    holds. The second, done, needs the referee's turn to close that arena: the wait gives the turn back, so the
    memory comes back and the check is asked again, never an `infra_error` after the whole wait."""
    from evaluator.stages.device import session as sm
    monkeypatch.setattr(sm, "REFEREE_MEMORY_WAIT_S", 20.0)
    closed = threading.Event()
    ref = CheckingReferee(lambda: 40 * GB if closed.is_set() else 2 * GB, needs=13 * GB)
    s, _, _ = session(ref, {})

    def other_candidate_done() -> None:
        while "check" not in ref.asked:
            time.sleep(0.01)
        with s.ref.lock:  # as `DeviceStage` closes its arena: in the referee's turn
            ref.asked.append("close_arena")
            closed.set()

    t0 = time.monotonic()
    other = threading.Thread(target=other_candidate_done)
    other.start()
    got = s._referee(M.RefereeOps.check, M.Check(arena=0, items=[], precision=False))
    other.join(5)
    assert isinstance(got, M.Checked) and not s.ref.retired
    assert ref.asked.count("check") == 2 and ref.asked.index("close_arena") < len(ref.asked) - 1, ref.asked
    assert time.monotonic() - t0 < 10  # not the whole wait
    assert not s.ref.lock.locked()


def test_a_candidate_that_fills_the_device_owns_the_referees_out_of_memory(monkeypatch) -> None:
    from evaluator.stages.device import session as sm
    monkeypatch.setattr(sm, "REFEREE_MEMORY_WAIT_S", 1.0)
    ref = CheckingReferee(lambda: 2 * GB, needs=13 * GB)
    s, _, _ = session(ref, {ref.pid: 8 * GB, Runner.pid: 128 * GB})  # far beyond what its task needs
    with pytest.raises(sm.Stop) as e:
        s._referee(M.RefereeOps.check, M.Check(arena=0, items=[], precision=False))
    assert e.value.status == "runtime_error" and "the candidate's processes held 128.0 GB" in e.value.message


def test_a_clocked_reference_request_out_of_memory_is_not_asked_again() -> None:
    from evaluator.stages.device import session as sm
    ref = CheckingReferee(lambda: 2 * GB, needs=13 * GB)
    s, _, _ = session(ref, {})
    with pytest.raises(sm.Stop) as e:
        s._referee(M.RefereeOps.stage, M.RunReference(arena=0, which="eager", items=[]))
    assert e.value.status == "infra_error" and ref.asked == ["stage"] and s.ref.retired


def test_an_arena_out_of_memory_after_admission_waits_for_the_memory_and_is_allocated_again() -> None:
    """Another process took the memory between the admission's look and the arena's allocation (nothing of the
    candidate runs yet): the referee is asked again once the arena's bytes are free, and the verdict goes on."""
    from evaluator.stages.device.load import Load

    t0 = time.monotonic()
    ref = CheckingReferee(lambda: 2 * GB if time.monotonic() - t0 < 1.5 else 40 * GB, needs=12 * GB)
    s, board, shed = session(ref, {})
    s.__class__ = Load
    opened, fds = s._open_arena(1)
    assert isinstance(opened, M.ArenaOpened) and fds == []
    assert ref.asked.count("open_arena") == 2 and time.monotonic() - t0 >= 1.4
    assert board.posted and board.posted[0] == 12 * GB - 2 * GB and board.posted[-1] == 0, board.posted
    assert shed and any("allocated it on try 2" in w for w in s.out.warnings), s.out.warnings


def test_an_arena_still_out_of_memory_after_the_wait_names_who_held_it(monkeypatch) -> None:
    from evaluator.stages.device import load as lm
    from evaluator.stages.device import session as sm

    monkeypatch.setattr(lm, "REFEREE_MEMORY_WAIT_S", 1.0)
    ref = CheckingReferee(lambda: 2 * GB, needs=12 * GB)
    s, _, _ = session(ref, {ref.pid: 8 * GB, NOTEBOOK: 120 * GB})
    s.__class__ = lm.Load
    s.free_at_start, s.arena_slots = 30 * GB, 1
    with pytest.raises(sm.Stop) as e:
        s._open_arena(1)
    assert e.value.status == "infra_error" and "not the candidate's fault" in e.value.message
    assert str(NOTEBOOK) in e.value.message and "tried" in e.value.message, e.value.message
    assert ref.asked.count("open_arena") >= 2


class BusyReferee(CheckingReferee):
    """Each request waits `busy` seconds first, as behind the reference's torch.compile ahead."""

    def __init__(self, busy: float) -> None:
        super().__init__(lambda: 100 * GB, needs=0)
        self.busy = busy

    def ask(self, op: M.Op, req: M.Req, **kw: object) -> tuple[object, list[int]]:
        time.sleep(self.busy)
        return super().ask(op, req, **kw)


class FreeMonitor(Monitor):
    def free_bytes(self) -> tuple[int, int]:
        return 100 * GB, 140 * GB


@pytest.mark.parametrize("nvml", [True, False])
def test_a_busy_referee_is_not_reported_as_a_wait_for_memory(nvml: bool) -> None:
    from evaluator.stages.device.load import Load

    ref = BusyReferee(busy=0.8)
    s, _, _ = session(ref, {})
    s.__class__ = Load
    from evaluator.processes import devmon
    s.monitor = FreeMonitor({}) if nvml else devmon.DeviceMonitor("no NVML")
    s._admit()
    try:
        assert s.admitted and not [w for w in s.out.warnings if "waited" in w], s.out.warnings
        # with NVML, free memory is read from it: the busy referee is not asked at all
        assert ref.asked == ([] if nvml else ["memory"])
    finally:
        s._release_memory()
