"""A reference that runs out of device memory while this process's other evaluations hold some waits for it to go
back and loads again (evaluations started side by side take turns); with nothing of this process holding memory it
fails at once, as the reference's own failure."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from evaluator import messages as M
from evaluator.errors import ReferenceFailed
from evaluator.processes import memory
from evaluator.processes.handle import WorkerFailed
from evaluator.processes.referees import Referees
from evaluator.settings import EvalSettings

OOM = "OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has 3.27 GiB free"


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


def test_a_broken_reference_is_not_retried() -> None:
    r, pool, ledger = referees(["broken"])
    ledger.admit(1, memory.Hold(0), free=lambda: 1, used=lambda p: 0, bound_s=0)
    with pytest.raises(ReferenceFailed, match="torhc"):
        r.get("REFERENCE", None)
    assert len(pool.given) == 1
    ledger.release(1)
