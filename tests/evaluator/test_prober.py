"""The device-idle probe from a process of its own, and the referee woken like the runner: both sides of a timed
request pay the same fixed costs (a stopped process woken, the GPU's switch to the worker's context and back)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from typing import Any

from evaluator import messages as M
from evaluator.processes.handle import WorkerError
from evaluator.processes.prober import Prober
from evaluator.stages.device.session import stop_and_wait


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_worker_is_stopped_before_the_clock_and_woken_by_it() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        assert stop_and_wait(p.pid)
        assert _state(p.pid) == "T"
        p.send_signal(signal.SIGCONT)
        time.sleep(0.05)
        assert _state(p.pid) == "S"
    finally:
        p.kill()
        p.wait()
    assert not stop_and_wait(p.pid)  # gone: nothing to wake


class FakeWorker:
    def __init__(self, fail: bool = False) -> None:
        self.pid, self.dead, self.fail, self.asked = 77, False, fail, 0

    def wait_ready(self, cancel: Any = None) -> None:
        pass

    def ask(self, op: M.Op, req: Any, **kw: Any) -> tuple[Any, list[int]]:
        assert op is M.RefereeOps.idle
        self.asked += 1
        if self.fail:
            raise WorkerError("crashed", "signal 9")
        return M.IdleReport(idle=True, probes=2, waited_ms=0.1), []


class FakePool:
    def __init__(self, workers: list[FakeWorker]) -> None:
        self.workers, self.released = workers, []

    def acquire(self, cancel: Any = None) -> FakeWorker:
        return self.workers.pop(0)

    def release(self, w: FakeWorker, tainted: bool) -> None:
        self.released.append(w)


def test_the_prober_is_one_worker_asked_one_probe_at_a_time() -> None:
    w = FakeWorker()
    adopted: list[FakeWorker] = []
    pr = Prober(FakePool([w]), adopted.append)  # type: ignore[arg-type]
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(pr.idle())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None and r.idle for r in results) and w.asked == 4
    assert adopted == [w] and pr.pid == 77  # the evaluator kills it when it closes, and counts it as its own


def test_a_prober_that_fails_gives_way_to_the_referee() -> None:
    bad = FakeWorker(fail=True)
    pool = FakePool([bad])
    pr = Prober(pool, lambda w: None)  # type: ignore[arg-type]
    assert pr.idle() is None and pool.released == [bad]
    assert pr.idle() is None and bad.asked == 1  # not asked again: the referee probes from now on
