"""The device-idle probe of every timed request, from a trusted process of its own (GPU).

The evaluator's clock of a request stops once a probe sees the device idle. Probed from the process that did the
work, a request pays nothing for it; probed from another process, it pays the GPU's switch from the worker's
context to the prober's. The candidate's requests run in its runner, the reference's in the referee: with the
referee probing, every candidate request paid a context switch in and out that no reference request paid (about
0.3–0.4 ms a request on an H200, measured: 615 µs for a request in another process against 179 µs in the
prober's own), a bias against every candidate that no harness measure took off. A prober that is neither makes
both sides pay the switch to the worker that does the calls and back to the prober. Measured on an H200 since, with
each request's span in parts (`KLSP_DEBUG_TIMING`), the reference's own code as the candidate: waking, delivery,
work and the probe cost both sides alike; stopping the runner that had just answered cost more than stopping an
already stopped one (now the referee that answered is stopped too), and 25–100 µs a request is still the
candidate's more than the reference's.

One per evaluator, a bare referee worker (torch and its CUDA context, no reference loaded), asked one probe at a
time; where it cannot be had the referee probes, as before, and the verdict says nothing different.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .. import messages as M
from .handle import Worker, WorkerError, WorkerFailed
from .pool import Pool


class Prober:
    def __init__(self, pool: Pool, on_worker: Callable[[Worker], None]) -> None:
        self.pool = pool
        self.on_worker = on_worker  # told of the worker (the evaluator kills it when it closes)
        self.worker: Worker | None = None
        self.failed = ""
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        w = self.worker
        return w.pid if w is not None and not w.dead else None

    def _get(self, cancel: threading.Event | None) -> Worker | None:
        if self.failed:
            return None
        if self.worker is not None and not self.worker.dead:
            return self.worker
        try:
            w = self.pool.acquire(cancel)
            self.on_worker(w)
            w.wait_ready(cancel=cancel)
        except WorkerError as e:
            if e.kind != "cancelled":  # a cancelled evaluation leaves the prober to the next one
                self.failed = e.message
            return None
        self.worker = w
        return w

    def idle(self, cancel: threading.Event | None = None, bound_s: float = M.IDLE_BOUND_S) -> M.IdleReport | None:
        """The prober's view: the device idle (see trusted/idle.py), or None where there is no prober (the caller
        asks its referee)."""
        with self._lock:
            w = self._get(cancel)
            if w is None:
                return None
            try:
                rep, fds = w.ask(M.RefereeOps.idle, M.IdleAsk(bound_s=bound_s), timeout=bound_s + 30.0,
                                 cancel=cancel)
            except (WorkerError, WorkerFailed) as e:
                self.failed = str(getattr(e, "message", e))
                self.pool.release(w, tainted=True)
                self.worker = None
                return None
            return rep
