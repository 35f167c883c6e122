"""Device memory promised to the candidates this process evaluates on a device: admission before a candidate is
imported.

Free memory alone admits too many: candidates started at once all see the same free figure before any of them has
allocated, and then run out side by side. So a candidate holds what its task needs (from the reference's layout)
from admission until its device stage ends, and one is admitted only when the free memory, less what the holders
admitted before it have not yet taken, covers its need. What a holder has taken is what NVML lists for its
processes where there is a per-process view (plus what was allocated for it elsewhere and said so: its arena, which
the referee allocates); without one, none (its whole need counts as still to come, and free memory already shows
what it took: admission is then stricter than it needs to be, never looser).

A candidate waits while holders of this process are live (they end, each under its own timeouts); with none left,
it waits for other processes' memory up to a bound and then goes ahead (running out of memory then is named as
theirs: `DeviceSession._memory_held_by_others`).

Evaluations take their referee and their admission in turns, first come first served (`take_turn`): an evaluation
whose referee is loaded and kept for it while it waits for admission holds that referee's memory, so evaluations of
different tasks that each loaded theirs and then all waited for admission would wait for each other (each referee
pinned by its waiting candidate) until the bound, and then run out of memory side by side. In turns, only the one
at the head of the line holds a referee while it waits; the rest hold nothing of the device until their turn.

Across processes (two editors, an editor and a sweep on one GPU), a wait for other processes' memory is posted on
the device's host-wide board (`board`: `lease.DeviceLease.want`), and every process that watches the board (`watch`)
lets its idle referees go while anyone else waits: referees kept for later candidates (20 GB for a 6 GB task) are
never what another process's evaluation waits for until its bound.

What a process admitted and its evaluations have not yet allocated is a promise, posted on the same board
(`lease.DeviceLease.reserve`, rewritten every WATCH_S as its holders take it) and left alone by every other
process's admissions, which decide one at a time on the host (`lease.DeviceLease.admitting`): two processes that
read the same free memory at once never both admit into it. Without that (seen on an 80 GB card, three test groups
side by side), each admitted its candidate, both ran short mid-run, and each waited out its bound for memory the
other held.

A referee kept for the evaluation that waits is not idle, and two processes can each hold what the other waits for
(each the referee of the candidate it admits; on a card that fits one big task at a time). The board says when each
wait began: an admission that has waited YIELD_AFTER_S for other processes' memory while another process's wait
began before its own gives way once (`on_yield`: its referee goes) and waits on for its need and what it gave back,
keeping its place: the first to wait goes first, and neither waits out its bound for the other.

An admitted evaluation that runs short mid-run (its referee's check ran out: `wait_free(running=True)`) goes before
every evaluation still waiting to be admitted, which cannot start before memory goes back anyway: admissions of
this process that wait for it let their referees go at once, and on the board its wait counts as begun before any.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|std::bad_alloc|MemoryError"
                           r"|can't allocate memory|cannot allocate memory", re.IGNORECASE)


ON_WAIT_AGAIN_S = 5.0  # a waiting admission calls its `on_wait` this often
WATCH_S = 1.0  # how often a process that keeps idle referees looks whether another process waits for memory
WANT_AFTER_S = 1.0  # a wait for other processes' memory this long is posted on the board (not a passing shortfall)
WANT_AGAIN_S = 1.0  # how often a waiting admission rewrites its want on the board (it goes stale after 5 s)
YIELD_AFTER_S = 4.0  # a wait for other processes' memory this long gives way to one that began before it (the other
# processes' idle referees have gone by then: what is still held is held for their waiting candidates)


class Board(Protocol):
    """The device's host-wide board of memory wanted (`lease.DeviceLease`)."""

    def want(self, need: int, since: float | None = None) -> None: ...

    def wanted_by_others(self) -> int: ...

    def wanted_before(self, since: float) -> int: ...

    def reserve(self, pending: int) -> None: ...

    def reserved_by_others(self) -> int: ...

    def admitting(self) -> AbstractContextManager[None]: ...


class AdmitCancelled(Exception):
    pass


@dataclass
class Hold:
    need: int
    pids: Callable[[], set[int]] = field(default=lambda: set())
    taken: int = 0  # of `need`, what was allocated for it outside its processes (its arena, in the referee)


@dataclass
class Admission:
    free: int  # device memory free when it was admitted (measured before the candidate was imported)
    waited_s: float = 0.0
    holders_waited_for: int = 0  # holders of this process it waited for
    timed_out: bool = False  # admitted without its memory, after waiting for other processes' up to the bound
    since: float = 0.0  # when its wait began (time.time()): its place among other processes' waits
    regain: int = 0  # what it gave way with (`on_yield`) and was admitted with room to take back
    reserved: int = 0  # the most other processes' admitted evaluations had yet to take while it waited


@dataclass(frozen=True)
class Waiting:
    """What a waiting admission waits for: the device's free memory, what this process's holders admitted before it
    have yet to take of it, its own need, and those holders (none: other processes' memory is what it waits for)."""
    free: int
    pending: int
    need: int
    holders: int
    waited_s: float
    reserved: int = 0  # what other processes' admitted evaluations have yet to take of the free memory

    def describe(self) -> str:
        gb = 2 ** 30
        whose = (f"{self.holders} evaluation(s) of this process still to take {self.pending / gb:.1f} GB of it"
                 if self.holders else "other processes hold the rest")
        if self.reserved:
            whose += f"; other processes' evaluations still to take {self.reserved / gb:.1f} GB of it"
        return f"{self.free / gb:.1f} GB free, {self.need / gb:.1f} GB needed; {whose}"


class Turn:
    """An evaluation's turn to take its referee and its admission; `end()` lets the next one go (more than once is
    harmless: a stage ends it once admitted, its caller again whatever happened)."""

    def __init__(self, ledger: MemoryLedger, token: object) -> None:
        self._ledger, self._token = ledger, token

    def end(self) -> None:
        self._ledger._end_turn(self._token)


class MemoryLedger:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held: dict[Hashable, Hold] = {}
        self._released = 0  # releases so far (memory that went back: a holder's, or a worker's that was let go)
        self._line: deque[object] = deque()  # evaluations waiting for their turn, the one whose turn it is first
        self.board: Board | None = None  # host-wide (set for a GPU): what other processes wait for
        # admissions of this process waiting for other processes' memory: (bytes, when its wait began)
        self._wants: dict[Hashable, tuple[int, float]] = {}
        self._starving: set[Hashable] = set()  # admitted evaluations of this process waiting for memory mid-run
        self._shedders: list[Callable[[], None]] = []  # each lets its evaluator's idle referees go
        self._watcher: threading.Thread | None = None
        self._used: Callable[[set[int]], int] | None = None  # what processes hold on the device (the last admit's)

    def take_turn(self, cancel: threading.Event | None = None) -> Turn:
        """Blocks until every evaluation that asked before this one has ended its turn (see the module's text)."""
        token = object()
        with self._cond:
            self._line.append(token)
            while self._line[0] is not token:
                if cancel is not None and cancel.is_set():
                    self._line.remove(token)
                    self._cond.notify_all()
                    raise AdmitCancelled()
                self._cond.wait(0.25)
        return Turn(self, token)

    def _end_turn(self, token: object) -> None:
        with self._cond:
            if token in self._line:
                self._line.remove(token)
                self._cond.notify_all()

    def waiting_turns(self) -> int:
        with self._cond:
            return max(0, len(self._line) - 1)

    def held(self) -> int:
        with self._cond:
            return len(self._held)

    def admit(self, key: Hashable, hold: Hold, free: Callable[[], int], used: Callable[[set[int]], int],
              bound_s: float, cancel: threading.Event | None = None,
              on_wait: Callable[[Waiting], None] | None = None, on_yield: Callable[[], int] | None = None,
              since: float | None = None) -> Admission:
        """Blocks until `hold.need` fits (see the module's text); then `key` holds it until `release(key)`.
        `free()`: the device's free bytes now; `used(pids)`: what those processes hold on it now (0 without a
        per-process view); `on_wait(waiting)`: now and then while it waits, with what it waits for; `on_yield()`:
        at most once, when another process's wait began first (see the module's text): lets memory kept for this
        evaluation go and returns how much, which it then waits for beside its need (`Admission.regain`;
        `hold.need` grows by it); `since`: when its wait began, where an earlier admission of the same evaluation
        began it (its place is kept)."""
        t0 = time.monotonic()
        since = time.time() if since is None else since
        end = t0 + bound_s
        waited_for: set[int] = set()
        again = posted = asked = t0
        regain, alone = 0, None  # alone: since when it waits for other processes' memory only
        promised = 0  # the most other processes' promises it saw while it waited
        try:
            while True:
                with self._deciding():
                    # other processes' promises before free memory: what they take meanwhile leaves the first and
                    # shows in the second (counted twice, never missed)
                    theirs = self._reserved_by_others()
                    f = free()  # outside the lock (a worker's answer): the decision below counts every holder since
                    post = False
                    with self._cond:
                        self._used = used
                        others = dict(self._held)
                        pending = sum(max(0, h.need - h.taken - used(h.pids())) for h in others.values())
                        room = f - pending - theirs
                        if room >= hold.need or (not others and time.monotonic() > end):
                            self._held[key] = hold
                            got = Admission(free=f, waited_s=time.monotonic() - t0, holders_waited_for=len(waited_for),
                                            timed_out=room < hold.need, since=since, regain=regain, reserved=promised)
                        else:
                            got, promised = None, max(promised, theirs)
                    if got is not None:
                        self._reserve()  # posted before another process decides
                        self._start_watcher()
                        return got
                with self._cond:
                    alone = None if others else alone or time.monotonic()
                    if others:
                        waited_for.update(others)
                        end = time.monotonic() + bound_s  # ours end under their own timeouts: the bound starts after
                        post = self._wants.pop(key, None) is not None  # waits for ours, not other processes'
                    elif time.monotonic() - t0 >= WANT_AFTER_S and (key not in self._wants
                                                                     or time.monotonic() >= posted):
                        # what other processes' memory must give
                        self._wants[key] = (hold.need - max(0, room), since)
                        post = True
                    board = self.board
                    starving = bool(others) and bool(self._starving)  # one it waits for waits for memory itself
                    give_way = on_yield is not None and time.monotonic() >= asked and (
                        starving or (alone is not None and board is not None
                                     and time.monotonic() - alone >= YIELD_AFTER_S))
                    if on_wait is not None and time.monotonic() >= again:
                        # again now and then: what it frees (idle referees) may have been busy before
                        on_wait(Waiting(free=f, pending=pending, need=hold.need, holders=len(others),
                                        waited_s=time.monotonic() - t0, reserved=theirs))
                        again = time.monotonic() + ON_WAIT_AGAIN_S
                    if cancel is not None and cancel.is_set():
                        raise AdmitCancelled()
                if post:
                    self._post()
                    posted = time.monotonic() + WANT_AGAIN_S
                if give_way and on_yield is not None:
                    asked = time.monotonic() + WANT_AGAIN_S
                    try:
                        first = starving or (board is not None and board.wanted_before(since) > 0)
                    except Exception:  # noqa: BLE001  (the board is best effort)
                        first = False
                    if first and (gave := on_yield()) > 0:  # nothing to give (its referee busy): asked again
                        regain = gave
                        hold.need += regain
                        on_yield = None
                        continue
                with self._cond:
                    self._cond.wait(0.25)
        finally:
            self.withdraw(key)

    def _deciding(self) -> AbstractContextManager[None]:
        """One admission decision at a time on the host (the board's), with none: nothing to wait for."""
        board = self.board
        if board is None:
            return nullcontext()
        try:
            return board.admitting()
        except Exception:  # noqa: BLE001  (the board is best effort)
            return nullcontext()

    def _reserved_by_others(self) -> int:
        board = self.board
        try:
            return board.reserved_by_others() if board is not None else 0
        except Exception:  # noqa: BLE001  (the board is best effort)
            return 0

    def _reserve(self) -> None:
        """What this process's holders have yet to take, on the host-wide board (other processes' admissions leave
        it to them)."""
        with self._cond:
            holds, used, board = list(self._held.values()), self._used, self.board
        if board is None:
            return
        pending = sum(max(0, h.need - h.taken - (used(h.pids()) if used is not None else 0)) for h in holds)
        try:
            board.reserve(pending)
        except Exception:  # noqa: BLE001  (the board is best effort)
            pass

    def want(self, key: Hashable, need: int, since: float | None = None) -> None:
        """Posts that `key` of this process waits for `need` bytes of other processes' memory (on the host-wide
        board, rewritten by each call: a want goes stale on the board after 5 s) until `withdraw(key)`; `since`:
        when its wait began (now, on its first call, when not given)."""
        with self._cond:
            began = self._wants.get(key, (0, time.time() if since is None else since))[1]
            self._wants[key] = (max(0, need), began)
        self._post()

    def withdraw(self, key: Hashable) -> None:
        with self._cond:
            gone = self._wants.pop(key, None) is not None
        if gone:
            self._post()

    def _post(self) -> None:
        """What this process's admissions wait for from other processes, on the host-wide board (nothing: gone)."""
        with self._cond:
            need, board = sum(n for n, _ in self._wants.values()), self.board
            since = min((s for _, s in self._wants.values()), default=None)
        if board is not None:
            board.want(need, since)

    def wait_free(self, key: Hashable, need: int, free: Callable[[], int | None], bound_s: float,
                  shed: Callable[[], None] | None = None, cancel: threading.Event | None = None,
                  running: bool = False) -> bool:
        """Waits until `free()` (the device's free bytes; None: it cannot tell) covers `need`, up to `bound_s`:
        what it lacks is posted on the host-wide board under `key` (other processes let their idle referees go),
        this process's idle referees go (`shed`), and it looks again as soon as memory of this process goes back,
        at least every WANT_AGAIN_S. True: it does; False: the bound passed, it was cancelled, or free memory
        cannot be told.

        `running`: an admitted evaluation waits mid-run (its referee's check ran out). It goes before every
        evaluation still waiting to be admitted, which can only start after memory goes back: admissions of this
        process waiting for it let their referees go at once (`admit`'s `on_yield`), and on the board its wait
        began before any other process's (they give way to it after YIELD_AFTER_S). Else two evaluations hold
        what the other needs: one admitted and short of memory for its check, one loaded and waiting for it."""
        end = time.monotonic() + bound_s
        if running:
            with self._cond:
                self._starving.add(key)
                self._cond.notify_all()
        try:
            while time.monotonic() < end and not (cancel is not None and cancel.is_set()):
                mark = self.releases()  # before it looks: memory that goes back meanwhile wakes it
                f = free()
                if f is None or f >= need:
                    return f is not None
                self.want(key, need - f, 0.0 if running else None)
                if shed is not None:
                    shed()
                self.wait_release(mark, min(WANT_AGAIN_S, max(0.0, end - time.monotonic())), cancel)
            return False
        finally:
            if running:
                with self._cond:
                    self._starving.discard(key)
            self.withdraw(key)

    def watch(self, shed: Callable[[], None]) -> Callable[[], None]:
        """`shed()` (an evaluator's: its idle referees go) is called every WATCH_S while another process waits for
        memory on this device; returns what stops it (the evaluator closes)."""
        with self._cond:
            self._shedders.append(shed)
        self._start_watcher()

        def stop() -> None:
            with self._cond:
                if shed in self._shedders:
                    self._shedders.remove(shed)
        return stop

    def _start_watcher(self) -> None:
        with self._cond:
            if self.board is not None and (self._watcher is None or not self._watcher.is_alive()):
                self._watcher = threading.Thread(target=self._watch, name="klsp-memory-watch", daemon=True)
                self._watcher.start()

    def _watch(self) -> None:
        """Every WATCH_S while this process keeps referees or holds memory: its promises rewritten on the board (what
        its holders took since leaves them), and its idle referees let go while another process waits for memory."""
        while True:
            time.sleep(WATCH_S)
            with self._cond:
                shedders, board, holding = list(self._shedders), self.board, bool(self._held)
                if not shedders and not holding:
                    self._watcher = None
                    return
            if holding:
                self._reserve()
            try:
                wanted = board.wanted_by_others() if board is not None and shedders else 0
            except Exception:  # noqa: BLE001  (the board is best effort: never the watcher's end)
                wanted = 0
            if wanted > 0:
                for shed in shedders:
                    try:
                        shed()
                    except Exception:  # noqa: BLE001  (an evaluator closing meanwhile)
                        pass

    def release(self, key: Hashable, freed: bool = True) -> None:
        """`key` holds nothing from now on; `freed`: count it as memory that went back (whoever waits for some
        tries again), not when the holder's own waiting for memory is what ends it."""
        with self._cond:
            gone = self._held.pop(key, None) is not None
            if gone:
                self._released += int(freed)
                self._cond.notify_all()
        if gone:
            self._reserve()

    def freed(self) -> None:
        """Memory of this process went back outside the holds (a referee let go): whoever waits may try again."""
        with self._cond:
            self._released += 1
            self._cond.notify_all()

    def releases(self) -> int:
        with self._cond:
            return self._released

    def wait_release(self, since: int, timeout: float, cancel: threading.Event | None = None) -> bool:
        """Blocks until memory went back after `releases()` was `since` (True), or `timeout` passed (False)."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._released == since:
                left = end - time.monotonic()
                if left <= 0 or (cancel is not None and cancel.is_set()):
                    return False
                self._cond.wait(min(left, 0.25))
            return True


_LEDGERS: dict[str, MemoryLedger] = {}
_LOCK = threading.Lock()


def ledger(device: str) -> MemoryLedger:
    """The ledger of one device (by its UUID or name) for this whole process: every evaluator in it shares it."""
    with _LOCK:
        return _LEDGERS.setdefault(device, MemoryLedger())
