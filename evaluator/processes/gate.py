"""Evaluator side: who may use the device when, for candidates evaluated side by side (best-of-n).

- Verification needs no exclusive device: up to `shared` candidates verify at once, each in its own arena.
- A timed round, a profiled call and the contention check run alone: no other verification meanwhile, and every
  other live runner of this evaluator frozen, spares starting up included, so nothing of another candidate's competes for the
  device or the cores while one is timed, and nothing of one can touch another's timing. Timing waits for the
  verifications in flight; new verifications wait while a timing round is queued (rounds are short).
- Across processes (`lease.py`, a GPU's host-wide lease): a verification takes a turn, a timed round the exclusive
  side, so another evaluator's timing never runs beside this one's verification, nor this one's beside it.
- `Race`: the candidates of one reference being timed at the same time. A candidate stops timing as soon as its
  interval shows it cannot be the best (successive halving): the upper end of its speedup's 95 % interval is below
  the lower end of another's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any


class Cancelled(Exception):
    pass


class DeviceGate:
    def __init__(self, shared: int) -> None:
        self.max_shared = max(1, shared)
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0
        self._runners: dict[int, Any] = {}  # id -> live runner Worker (stopped while another candidate is timed)
        self._pools: list[Any] = []  # pools whose every other worker (spares starting up too) stops meanwhile
        self.waited_s = 0.0
        self.lease: Any = None  # lease.DeviceLease: the device's host-wide lease (other processes' timing), if any

    def add_pool(self, pool: Any) -> None:
        with self._cond:
            self._pools.append(pool)

    def register(self, key: int, runner: Any) -> None:
        with self._cond:
            self._runners[key] = runner

    def unregister(self, key: int) -> None:
        with self._cond:
            self._runners.pop(key, None)

    def _wait(self, ok: Any, cancel: threading.Event | None) -> float:
        t0 = time.perf_counter()
        while not ok():
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            self._cond.wait(0.1)
        return time.perf_counter() - t0

    @contextmanager
    def shared(self, cancel: threading.Event | None = None) -> Iterator[float]:
        with self._cond:
            waited = self._wait(lambda: not self._exclusive and not self._waiting_exclusive
                                and self._shared < self.max_shared, cancel)
            self._shared += 1
        # and a turn of the host lease: another process's timed round never runs beside this verification (nor this
        # beside it); other turns (other verifications, a local model's tokens) may
        host = self.lease.turn(cancel) if self.lease is not None else nullcontext()
        try:
            t0 = time.perf_counter()
            with host:
                yield waited + (time.perf_counter() - t0)
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self, me: int | None = None, cancel: threading.Event | None = None,
                  note: Callable[[float, list[str]], None] | None = None) -> Iterator[float]:
        """The device to one candidate: no verification of this evaluator's, every other runner frozen, and (with a
        host lease) no other process's timing or local model's turn. `note(seconds, holders)` hears how long it
        waited for other processes' timing, and whose."""
        with self._cond:
            self._waiting_exclusive += 1
            try:
                waited = self._wait(lambda: not self._exclusive and self._shared == 0, cancel)
            finally:
                self._waiting_exclusive -= 1
            self._exclusive = True
            mine = self._runners.get(me) if me is not None else None
            others = [r for k, r in self._runners.items() if k != me]
            pools = list(self._pools)
        for pool in pools:  # spare runners starting up (torch import, a CUDA context) compete for the device too
            for w in pool.live_workers():
                if w is not mine and all(w is not o for o in others):
                    others.append(w)
        stopped = []
        host = self.lease.exclusive(cancel, who="kernel-lsp evaluator") if self.lease is not None else nullcontext()
        try:
            held = host.__enter__()
            if held is not None and held.waited_s > 0.001:  # every wait: rounds are short, their waits add up
                waited += held.waited_s
                if note is not None:
                    note(held.waited_s, list(held.holders))
        except BaseException:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
            raise
        try:
            for r in others:
                try:
                    r.freeze()  # a hold of the gate's: the runner's own session may hold it frozen too
                    stopped.append(r)
                except Exception:  # noqa: BLE001, S112  (a runner that died meanwhile)
                    continue
            yield waited
        finally:
            for r in stopped:
                try:
                    r.thaw()
                except Exception:  # noqa: BLE001, S110
                    pass
            host.__exit__(None, None, None)
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class Race:
    """The candidates of one reference timed at the same time: their speedups' intervals, to stop timing the ones
    that cannot be the best."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._board: dict[int, tuple[float, float, float]] = {}  # key -> (speedup, low, high)

    def post(self, key: int, speedup: float, low: float, high: float) -> None:
        with self._lock:
            self._board[key] = (speedup, low, high)

    def leave(self, key: int) -> None:
        with self._lock:
            self._board.pop(key, None)

    def hopeless(self, key: int) -> str:
        """"" or why this candidate cannot be the best of those being timed."""
        with self._lock:
            me = self._board.get(key)
            if me is None:
                return ""
            best = max(((k, v) for k, v in self._board.items() if k != key), key=lambda kv: kv[1][1], default=None)
        if best is None or best[1][1] <= me[2]:
            return ""
        return (f"timing stopped early: at most {me[2]:.2f}x eager (95 % interval), another candidate of this "
                f"reference is at least {best[1][1]:.2f}x")
