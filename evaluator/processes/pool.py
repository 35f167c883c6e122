"""Parent side: pools of worker processes of one spec (handle.py: one worker). Nothing here imports torch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .handle import Spec, Worker, WorkerError

BURST_MAX = 2  # spares kept beyond `warm` while callers keep finding none idle (each holds memory; on a GPU a context)
BURST_IDLE_S = 30.0  # a burst of demand ends when no caller found the pool without an idle worker for this long


class Pool:
    """Workers of one spec: at most `size` busy at once, `warm` idle ones kept started in the background.

    `single_use` workers are killed after every job (candidate code leaves no state behind); others are reused
    up to `max_jobs` times and replaced after any failure.

    A caller that finds no idle worker takes the next one already starting rather than starting its own (which
    would be ready later, and slow the others' start on a busy machine). A single-use pool whose callers keep
    finding no idle worker (verdicts in a row faster than a worker starts) keeps BURST_MAX (at most `ahead`) more
    spares, started at that miss, while the demand lasts; spares beyond `warm` that stay idle for BURST_IDLE_S go.
    A caller that knows n callers are coming (a job's n candidates: `expect`) has spares for them started at once,
    at most `ahead` beyond `warm`, kept until they have their workers or it says none is coming any more.
    """

    def __init__(self, spec: Spec, size: int, warm: int, single_use: bool, max_jobs: int = 25,
                 ahead: int = 0) -> None:
        self.spec = spec
        self.kind = spec.role
        self.size = max(1, size)
        self.warm = max(0, warm if single_use else min(warm, self.size))
        # single-use pools: besides `warm`, one worker started ahead for each caller queued for a slot (at most
        # `ahead`), so eight candidates waiting for the device find their fresh runners started, not one by one
        self.ahead = max(0, ahead) if single_use else 0
        self._waiting = 0
        self._spawning = 0
        self._claims = 0  # callers waiting for a worker that is starting
        self._burst = 0  # spares kept beyond `warm` while callers keep finding none idle (single-use pools)
        self._last_short = 0.0  # when a caller last found no idle worker
        self._burst_watch = False  # a thread ends the burst once nobody has missed for BURST_IDLE_S
        self._expected: list[list[int]] = []  # callers announced (`expect`) and not yet served, one count per caller
        self.single_use = single_use
        self.max_jobs = max_jobs
        self._slots = threading.Semaphore(self.size)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # a started worker became idle, or a start failed
        self._idle: list[Worker] = []
        self._all: set[Worker] = set()
        self._closed = False

    @property
    def env(self) -> dict[str, str]:
        return dict(self.spec.env)

    @property
    def closed(self) -> bool:
        """Closed by its evaluator: a worker that died after this was killed by us, not by its own fault."""
        return self._closed

    def _spawn(self) -> Worker:
        w = Worker(self.spec)
        with self._lock:
            if self._closed:
                w.kill()
                raise WorkerError("cancelled", "the evaluator is closed")
            self._all.add(w)
        return w

    def _target(self) -> int:
        return self.warm + max(min(self._waiting, self.ahead), self._burst, self._announced()) + self._claims

    def _announced(self) -> int:
        """Spares beyond `warm` for the callers announced and not yet served (`expect`), at most `ahead`."""
        return min(max(0, sum(c[0] for c in self._expected) - self.warm), self.ahead)

    def _refill(self) -> None:
        """Start the missing idle workers all at once (not one after another), then wait for each."""
        with self._lock:
            pending = max(0, self._target() - len(self._idle) - self._spawning)
            self._spawning += pending
        started: list[Worker] = []
        try:
            for _ in range(pending):
                started.append(self._spawn())
        except Exception:  # noqa: BLE001  (closed meanwhile, or no process could start: the next acquire says why)
            pass
        finally:
            with self._lock:
                self._spawning -= pending - len(started)
                self._ready.notify_all()
        for w in started:
            ok = True
            try:
                w.wait_ready()
            except Exception:  # noqa: BLE001  (it died, or the pool closed its channel meanwhile: not a spare)
                ok = False
            with self._lock:
                self._spawning -= 1
                self._ready.notify_all()
                if ok and not self._closed and len(self._idle) < self._target():  # not if its caller left
                    self._idle.append(w)
                    continue
                self._all.discard(w)
            w.kill()

    def refill_async(self) -> None:
        if (self.warm or self.ahead) and not self._closed:
            threading.Thread(target=self._refill, name=f"klsp-{self.kind}-refill", daemon=True).start()

    def acquire(self, cancel: threading.Event | None = None) -> Worker:
        if not self._slots.acquire(blocking=False):
            with self._lock:
                self._waiting += 1
            try:
                if self.ahead:
                    self.refill_async()
                while not self._slots.acquire(timeout=0.1):
                    if cancel is not None and cancel.is_set():
                        raise WorkerError("cancelled", "cancelled while waiting for a worker")
                    if self._closed:
                        raise WorkerError("cancelled", "the evaluator is closed")
            finally:
                with self._lock:
                    self._waiting -= 1
        try:
            w = self._take(cancel)
            if w is None:
                w = self._spawn()
            with self._lock:  # one announced caller served (the oldest announcement's)
                for c in self._expected:
                    if c[0]:
                        c[0] -= 1
                        break
            if self.single_use:
                self.refill_async()  # its replacement starts now, while this worker does its job
            return w
        except BaseException:
            self._slots.release()
            raise

    @contextmanager
    def expect(self, n: int) -> Iterator[None]:
        """n callers are coming (a job's candidates, being written or compiled): spares for them start now, so the
        last of them does not wait for a start the first ones' acquires began (seconds, where their verdicts come
        a second apart); at most `ahead` beyond `warm` (each holds memory, on a GPU a context). Kept until they
        have their workers or the block ends; a pool without spares wanted (`ahead` 0) starts none."""
        count = [max(0, int(n))]
        if self.single_use and self.ahead and count[0] > self.warm:
            with self._lock:
                self._expected.append(count)
            self.refill_async()
        try:
            yield
        finally:
            with self._lock:
                self._expected = [c for c in self._expected if c is not count]
                if not self._closed:
                    self._trim()

    def _take(self, cancel: threading.Event | None) -> Worker | None:
        """An idle worker; else the next one of those starting (none left unclaimed: None, start your own)."""
        with self._lock:
            claimed = False
            try:
                while True:
                    if self._closed:
                        raise WorkerError("cancelled", "the evaluator is closed")
                    while self._idle:
                        c = self._idle.pop(0)
                        if not c.dead and c.proc.poll() is None:
                            return c
                        self._forget(c)
                    if cancel is not None and cancel.is_set():
                        raise WorkerError("cancelled", "cancelled while waiting for a worker")
                    if not claimed:
                        if self.single_use and self.ahead and self.warm:  # demand outran the spares: keep more
                            # while it lasts (a pool with no spares wanted, `warm` 0, keeps none), started now: a
                            # worker takes seconds to start, a verdict in a row less than one, so spares started
                            # only once this caller has its worker would be late for the next caller, and the one
                            # after it would find them ready (every other verdict waiting for a start)
                            self._burst = min(self.ahead, BURST_MAX)
                            self._last_short = time.monotonic()
                            if not self._burst_watch:
                                self._burst_watch = True
                                threading.Thread(target=self._end_burst, name=f"klsp-{self.kind}-burst",
                                                 daemon=True).start()
                        if self._spawning <= self._claims:
                            return None
                        self._claims += 1
                        claimed = True
                        if self._burst:
                            self.refill_async()  # (its thread takes the lock once this caller waits below)
                    elif self._spawning < self._claims:  # a start failed: not enough left for every claim
                        return None
                    self._ready.wait(0.1)
            finally:
                if claimed:
                    self._claims -= 1

    def release(self, w: Worker, tainted: bool) -> None:
        """Give a worker back. `tainted`: it did a job (a single-use pool then replaces it)."""
        keep = (not w.dead and not self._closed and w.jobs < self.max_jobs and w.proc.poll() is None
                and not (self.single_use and tainted))
        if keep:
            with self._lock:
                self._idle.append(w)
        else:
            w.kill()
            with self._lock:
                self._forget(w)
        with self._lock:  # workers started ahead for callers who no longer wait: not kept idle (each holds memory)
            self._trim()
        self._slots.release()
        self.refill_async()

    def _trim(self) -> None:
        """Idle workers beyond what is wanted now go (under the lock)."""
        extra = [] if self._waiting else self._idle[self.warm + max(self._burst, self._announced()):]
        del self._idle[len(self._idle) - len(extra):]
        for x in extra:
            self._forget(x)

    def _end_burst(self) -> None:
        """Once nobody has found the pool without an idle worker for BURST_IDLE_S, the burst's spares go (even if
        no other verdict comes: each holds memory, on a GPU a context beside the user's other work)."""
        wait = BURST_IDLE_S
        while True:
            time.sleep(max(0.05, min(wait, 1.0)))
            with self._lock:
                wait = BURST_IDLE_S - (time.monotonic() - self._last_short)
                if self._closed or wait <= 0:
                    self._burst = 0
                    self._burst_watch = False
                    if not self._closed:
                        self._trim()
                    return

    def _forget(self, w: Worker) -> None:
        w.kill()
        self._all.discard(w)

    def live_workers(self) -> list[Worker]:
        with self._lock:
            return [w for w in self._all if not w.dead]

    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._all if not w.dead]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for w in workers:
            w.kill()
