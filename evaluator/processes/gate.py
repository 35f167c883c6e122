"""Evaluator side: who may use the device when, for candidates evaluated side by side (best-of-n).

- Verification needs no exclusive device: up to `shared` candidates verify at once, each in its own arena.
- A timed round, a profiled call and the contention check run alone: no other verification meanwhile, and every
  other live runner of this evaluator frozen, spares starting up included, so nothing of another candidate's competes for the
  device or the cores while one is timed, and nothing of one can touch another's timing. Timing waits for the
  verifications in flight; new verifications wait while a timing round is queued (rounds are short).
- Across processes (`lease.py`, a GPU's host-wide lease): a verification takes a turn, a timed round the exclusive
  side, so another evaluator's timing never runs beside this one's verification, nor this one's beside it.
- The exclusive side goes to the candidate that first asked for it, and it keeps its place between its rounds
  (GRACE_S after each): its rounds are not shared out with candidates that began timing after it, so the first
  verdict comes first (the device's work is the same; verdicts come in the order their timing began). A candidate's
  place is its own until its device stage ends (`leave`).
- `Race`: the candidates of one reference being timed at the same time, or lately. A candidate stops timing as soon
  as its interval shows it cannot be the best (successive halving): the upper end of its speedup's 95 % interval is
  below the lower end of another's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any


class Cancelled(Exception):
    pass


# A candidate between two of its timed rounds (its last round's figures looked at, the next asked for) keeps its place
# in line this long: its next round goes before a later candidate's first. Rounds take 0.2-0.4 s; the step between
# them takes milliseconds.
GRACE_S = 0.1


class DeviceGate:
    def __init__(self, shared: int) -> None:
        self.max_shared = max(1, shared)
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0
        self._runners: dict[int, Any] = {}  # id -> live runner Worker (stopped while another candidate is timed)
        self._since: dict[int, float] = {}  # id -> when it first asked for the exclusive side: its place in line
        self._asking: dict[object, float] = {}  # who waits for the exclusive side now -> its place in line
        self._gave_back: dict[int, float] = {}  # id -> when it last gave the exclusive side back
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
        """Its runner is gone (nothing of it to stop while another candidate is timed); its place in line stays."""
        with self._cond:
            self._runners.pop(key, None)

    def leave(self, key: int) -> None:
        """Its device stage ended: its place in line goes."""
        with self._cond:
            self._runners.pop(key, None)
            self._since.pop(key, None)
            self._gave_back.pop(key, None)
            self._cond.notify_all()

    def _first_in_line(self, place: float) -> float:
        """0 when nobody before `place` asks for the exclusive side or is between two of its rounds, else how long
        to wait before looking again."""
        if min(self._asking.values()) < place:
            return 0.1
        now = time.monotonic()
        grace = [GRACE_S - (now - self._gave_back.get(k, -GRACE_S)) for k, since in self._since.items()
                 if since < place and k not in self._asking]
        return max([g for g in grace if g > 0], default=0.0)

    def _wait(self, later: Callable[[], float], cancel: threading.Event | None) -> float:
        """Wait, under the condition, until `later()` is 0 (else it says how long before looking again); the
        seconds waited."""
        t0 = time.perf_counter()
        while (pause := later()) > 0:
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            self._cond.wait(pause)
        return time.perf_counter() - t0

    @contextmanager
    def shared(self, cancel: threading.Event | None = None) -> Iterator[float]:
        with self._cond:
            waited = self._wait(lambda: 0.0 if not self._exclusive and not self._waiting_exclusive
                                and self._shared < self.max_shared else 0.1, cancel)
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
            token: object = object() if me is None else me
            place = time.monotonic() if me is None else self._since.setdefault(me, time.monotonic())
            self._asking[token] = place
            try:
                waited = self._wait(lambda: self._first_in_line(place) if not self._exclusive and self._shared == 0
                                    else 0.1, cancel)
            finally:
                self._waiting_exclusive -= 1
                del self._asking[token]
                self._cond.notify_all()  # the next in line may go once the side is free
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
                if me is not None and me in self._since:
                    self._gave_back[me] = time.monotonic()
                self._cond.notify_all()


RACE_KEEP_S = 60.0  # how long a candidate that passed every check stays in its reference's race after its verdict


class Race:
    """The candidates of one reference timed at the same time, or lately: their speedups' intervals, to stop timing
    the ones that cannot be the best. A candidate timed after another (the gate lets the first in line finish its
    rounds) is compared with the other's last interval, for RACE_KEEP_S after the other's verdict, where that
    candidate passed every check (one caught after its timing leaves nothing behind)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._board: dict[int, tuple[float, float, float]] = {}  # key -> (speedup, low, high)
        self._done: dict[int, tuple[float, tuple[float, float, float]]] = {}  # key -> (left at, its last interval)

    def post(self, key: int, speedup: float, low: float, high: float) -> None:
        with self._lock:
            if key not in self._board:
                self._done.pop(key, None)  # (a key is an object's id: one that left may have had the same)
            self._board[key] = (speedup, low, high)

    def leave(self, key: int, keep: bool = False) -> None:
        with self._lock:
            last = self._board.pop(key, None)
            now = time.monotonic()
            for k in [k for k, (at, _) in self._done.items() if now - at > RACE_KEEP_S]:
                del self._done[k]
            if keep and last is not None:
                self._done[key] = (now, last)

    def hopeless(self, key: int) -> str:
        """"" or why this candidate cannot be the best of those being timed (or timed lately)."""
        with self._lock:
            me = self._board.get(key)
            if me is None:
                return ""
            now = time.monotonic()
            others = [(k, v) for k, v in self._board.items() if k != key]
            others += [(k, v) for k, (at, v) in self._done.items() if k != key and now - at <= RACE_KEEP_S]
            best = max(others, key=lambda kv: kv[1][1], default=None)
        if best is None or best[1][1] <= me[2]:
            return ""
        return (f"timing stopped early: at most {me[2]:.2f}x eager (95 % interval), another candidate of this "
                f"reference is at least {best[1][1]:.2f}x")
