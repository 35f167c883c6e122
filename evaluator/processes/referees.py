"""The referees kept per reference: one trusted worker holds one loaded reference and serves every candidate of
it. At most MAX_REFEREES are kept (least recently used goes first, never one in use); a referee that failed a
request is retired: given to no new candidate, dropped once the candidates using it are done."""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from .. import messages as M
from ..errors import EvaluatorClosed, EvaluatorError, ReferenceFailed
from ..profiles import library_kernels, summarise_least
from ..settings import EvalSettings
from ..shared import pysource
from . import devmon, memory
from .gate import Cancelled, DeviceGate, Race
from .handle import Worker, WorkerError, WorkerFailed
from .pool import Pool

MAX_REFEREES = 3
LOAD_WAIT_S = 600.0  # how long a reference that ran out of device memory waits for this process's evaluations'
LOAD_GUESS = 2 << 30  # device memory a reference's first load in this process is admitted with
LOAD_ADMIT_S = 30.0  # how long a load waits for other processes' memory before it tries (ours: until they end)
LOAD_OTHERS_WAIT_S = 120.0  # how long a load that ran out of memory other processes hold waits for it, all tries
SUPERSEDED_KEPT = 256  # superseded references remembered (their compile ahead never begins)
_TRIED = re.compile(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB|B)\b")
_UNIT = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, "B": 1}


@functools.lru_cache(maxsize=64)
def reference_key(reference_src: str) -> str:
    """Which referee serves a reference: its code, not its text. Sources whose syntax trees are equal (they differ
    in comments, blank lines, layout, quotes: an editor's format on save) run the same, so a referee loaded, compiled
    and measured for one serves the other; any change to the code (a docstring's included) is another reference.
    What such a referee says of line numbers is the first text's. A source that does not parse is keyed by its text
    (its load fails and says why)."""
    try:
        code = ast.dump(pysource.parse(reference_src), include_attributes=False)
    except (SyntaxError, ValueError, RecursionError):
        code = "text:" + reference_src
    return hashlib.sha256(code.encode()).hexdigest()


@dataclass
class RefereeHandle:
    """A referee worker with a reference loaded (reused for every candidate of the same reference). Every field is
    the reference's (or the handle's lifetime): what one candidate finds lives on its own device session."""

    worker: Worker
    key: str
    info: M.ReferenceLoaded  # the referee's report of the loaded reference (sizes, init arguments, device memory)
    init_seed: int
    roofline: M.RooflineReport | None = None  # asked once: ahead (`compile_ahead`), else by the first candidate timed
    summary: dict | None = None  # the reference's profile, by class (profiles.summarise)
    library_kernels: set[str] = field(default_factory=set)  # kernel identifiers its library operators launch
    users: int = 0  # device stages using it now (it is not evicted meanwhile)
    compiled: bool = False
    compile_error: str = ""
    compiling: bool = False  # torch.compile of it asked ahead of its first candidate's timing, not answered yet
    compile_s: float = 0.0  # how long the referee's torch.compile of it took (its own clock)
    # torch.compile of it timed per call, by the first of its candidates timed with nothing else seen on the
    # device (its runner frozen, as for every reference request): a fact of the reference, reused by the next
    compiled_call_ms: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)  # one request at a time
    race: Race = field(default_factory=Race)  # its candidates being timed at the same time
    retired: bool = False  # it failed a request: given to no new candidate, dropped once its users are done
    released: bool = False  # its worker went back to the pool (once: a second release would free a slot twice)
    closed: bool = False  # its evaluator closed and kills it: a request it fails meanwhile is cancelled, not ours


@dataclass
class _Ahead:
    """A reference's torch.compile ahead, asked and not ended: what to begin it again with, and its own stop."""

    reference_src: str
    gate: DeviceGate
    limits: dict | None
    h: RefereeHandle
    stop: threading.Event = field(default_factory=threading.Event)
    begun: bool = False  # the referee was asked (its worker dies if it is stopped now)


class Referees:
    """The kept referees, by reference. `lock` is the evaluator's own (its close takes them all, under it, in the
    same step as it closes); `pool` is the referee pool, set when the evaluator starts."""

    def __init__(self, settings: EvalSettings, lock: threading.Lock) -> None:
        self.settings = settings
        self.lock = lock
        # whether verdicts wait for a reference's torch.compile: the setting, until the evaluator's start decides it
        # for its device (where nobody compiles ahead, each verdict's stage compiles and waits); its stages read it
        self.compiled_wait = settings.compiled_wait
        self.pool: Pool | None = None
        self.device = "cpu"  # the evaluator's device (its memory ledger's name), set when it starts
        self.monitor: devmon.DeviceMonitor = devmon.DeviceMonitor("not a GPU")  # per-process device memory
        self.footprint: dict[str, int] = {}  # device memory each reference's referee held after its last load
        self.our_pids: Callable[[], set[int]] = set  # the evaluator's own workers (never "other processes")
        self.closed = False
        self.stop = threading.Event()  # set when the evaluator closes: work started in the background ends
        self._loading: dict[str, threading.Lock] = {}  # one load at a time per reference
        # candidates on their way to a verdict, by reference, and the compiles ahead put off until they are done
        # (`compiled_wait` off: `on_its_way`)
        self._on_its_way: dict[str, int] = {}
        self._put_off: dict[str, tuple[str, DeviceGate, dict | None]] = {}
        self._ahead: dict[str, _Ahead] = {}  # compiles ahead asked and not ended, by reference
        # references whose document moved on (`superseded`): no compile ahead of theirs begins until one of them is
        # current again (named in a later `superseded`'s `by`); the oldest forgotten beyond SUPERSEDED_KEPT
        self._superseded: OrderedDict[str, None] = OrderedDict()
        self._kept: OrderedDict[str, RefereeHandle] = OrderedDict()

    def pids(self) -> list[int]:
        return [h.worker.pid for h in list(self._kept.values()) if not h.worker.dead]

    def close(self) -> list[RefereeHandle]:
        """The evaluator closes: every kept referee, forgotten (the caller kills them), and none kept from now on
        (one loading meanwhile is killed). Call it under `lock`."""
        self.closed = True
        self.stop.set()
        for a in self._ahead.values():
            a.stop.set()
        handles = list(self._kept.values())
        for h in handles:
            h.closed = True
        self._kept.clear()
        return handles

    def get(self, reference_src: str, cancel: threading.Event | None, use: bool = False) -> RefereeHandle:
        """The referee holding this reference (loaded on first use; at most MAX_REFEREES kept). One load per
        reference at a time; different references load side by side (a best-of-n corpus of many tasks does not
        wait for each task's referee in turn). `use`: count the caller as a user (not evicted until it is done)."""
        key = reference_key(reference_src)
        with self.lock:
            loading = self._loading.setdefault(key, threading.Lock())
        while not loading.acquire(timeout=0.1):
            if cancel is not None and cancel.is_set():
                raise WorkerError("cancelled", "cancelled")
        try:
            with self.lock:
                h = self._kept.get(key)
                if h is not None and not h.worker.dead and not h.retired:
                    self._kept.move_to_end(key)
                    if use:
                        h.users += 1
                    return h
                if h is not None:
                    del self._kept[key]
                evict = []
                for k, old in list(self._kept.items()):  # the least recently used, unless in use
                    if len(self._kept) < MAX_REFEREES - 1:
                        break
                    if old.users == 0 and not old.released:
                        del self._kept[k]
                        old.released = True
                        evict.append(old)
            assert self.pool is not None
            for old in evict:
                self.pool.release(old.worker, tainted=True)
            if evict:
                self._ledger().freed()
            try:
                w, res, init_seed = self._load(reference_src, key, cancel)
            except WorkerError:
                if self.closed:  # its worker was killed by the close, not by anything of the reference's
                    raise EvaluatorClosed() from None
                raise
            h = RefereeHandle(worker=w, key=key, info=res, init_seed=init_seed)
            with self.lock:
                if self.closed:
                    w.kill()
                    raise EvaluatorClosed()
                self._kept[key] = h
                if use:
                    h.users += 1
            return h
        finally:
            loading.release()

    def _ledger(self) -> memory.MemoryLedger:
        return memory.ledger(self.device)

    def _load(self, reference_src: str, key: str, cancel: threading.Event | None
              ) -> tuple[Worker, M.ReferenceLoaded, int]:
        """A fresh referee with the reference loaded. On a GPU with a per-process view, the load is admitted like a
        candidate (memory.py): it holds what this reference took when it last loaded in this process (LOAD_GUESS
        the first time) until it is loaded, so it does not take memory promised to candidates admitted before it.
        One that runs out of device memory while this process's other evaluations hold some waits until some goes
        back and loads again (needing what it held when it ran out, and more), up to LOAD_WAIT_S: evaluations
        started side by side take turns rather than fail. One that ran out while other processes held the memory it
        lacked (NVML) waits for it up to LOAD_OTHERS_WAIT_S (posted on the host-wide board, so their idle referees
        go) and loads again; past that, the failure is theirs, named, never the reference's."""
        assert self.pool is not None
        ledger = self._ledger()
        t0 = time.monotonic()
        others_until: float | None = None
        while True:
            mark = ledger.releases()  # before the load: memory that goes back meanwhile counts
            loading: list[int] = []
            self._admit_load(key, loading, cancel)
            w = self.pool.acquire(cancel)
            loading.append(w.pid)
            try:
                w.wait_ready(cancel=cancel)
                init_seed = secrets.randbits(31)
                res, fds = w.ask(M.RefereeOps.load,
                                 M.LoadReference(reference_src=reference_src, settings=asdict(self.settings),
                                                 init_seed=init_seed),
                                 timeout=max(self.settings.run_timeout, 120.0), cancel=cancel)
                for fd in fds:
                    os.close(fd)
                self.footprint[key] = max(self.footprint.get(key, 0), self._used({w.pid}))
                return w, res, init_seed
            except WorkerError:
                self.pool.release(w, tainted=True)
                raise
            except WorkerFailed as e:
                held = self._used({w.pid})  # what it had when it ran out: the next load needs more than that
                self.pool.release(w, tainted=True)
                ledger.release(id(loading), freed=False)  # not held while it waits for others' memory
                text = (e.failed.error or "the reference failed").strip()
                if memory.OUT_OF_MEMORY.search(text) and held:
                    self.footprint[key] = max(self.footprint.get(key, 0), 2 * held)
                left = LOAD_WAIT_S - (time.monotonic() - t0)
                oom = bool(memory.OUT_OF_MEMORY.search(text))
                if oom and left > 0 and (
                        ledger.releases() != mark  # memory went back while it loaded: at once
                        or (self._others_hold_memory(key) and ledger.wait_release(mark, left, cancel))):
                    continue
                others = self._held_by_others(held, text, {w.pid}) if oom else None
                if others is not None:
                    need, theirs = others
                    if others_until is None:
                        others_until = time.monotonic() + LOAD_OTHERS_WAIT_S
                    if ledger.wait_free(("load", key), need, self._free, min(left, others_until - time.monotonic()),
                                        lambda: self.shed(key), cancel):
                        continue
                    raise EvaluatorError(f"the reference ran out of device memory: it held {held / 2**30:.1f} GB and "
                                         f"needed about {need / 2**30:.1f} GB {theirs} (waited "
                                         f"{time.monotonic() - t0:.0f} s for it); not the reference's doing") from None
                raise ReferenceFailed(text.splitlines()[0][:400], e.failed.traceback or text) from None
            finally:
                ledger.release(id(loading))  # loaded (its memory taken, in free memory from now) or gone

    def _used(self, pids: set[int]) -> int:
        return devmon.memory_of(self.monitor, pids)

    def _held_by_others(self, held: int, text: str, gone: set[int]) -> tuple[int, str] | None:
        """A load ran out of device memory holding `held` bytes, its error `text`: (what it needs, who held the
        rest) where it would have fit the device beside nothing but this process's own and other processes hold
        memory (NVML); None where it would not (the reference is too big for the device) or nobody else holds
        any (the reference's own failure). `gone`: its worker's pids (released, maybe still listed)."""
        m = _TRIED.search(text)
        need = held + (int(float(m.group(1)) * _UNIT[m.group(2)]) if m else 0)
        got = self.monitor.free_bytes() if self.monitor.available else None
        if got is None:
            return None
        ours = self.our_pids() | set(self.pids()) | gone
        listed = devmon.neighbours(self.monitor, set())  # every process NVML lists
        if not held and not ours & {n.pid for n in listed}:  # none of ours listed: its pids may not be ours to read
            return None
        theirs = [n for n in listed if n.pid not in ours and n.memory > 0]
        if not theirs or need > got[1] - self._used(ours - gone):  # too big even with only ours beside it
            return None
        return need, f"of the device's {got[1] / 2**30:.1f} GB, other processes held the rest: " + \
            ", ".join(map(str, theirs[:3]))

    def _free(self) -> int | None:
        """The device's free bytes by NVML (None where it cannot tell)."""
        got = self.monitor.free_bytes() if self.monitor.available else None
        return None if got is None else got[0]

    def _admit_load(self, key: str, loading: list[int], cancel: threading.Event | None) -> None:
        """GPU with a per-process view: wait until the memory this load needs is free of other holders' promises
        (held under `id(loading)` until the load ends; `loading` gets the worker's pid once there is one)."""
        if not self.monitor.available:
            return

        def free() -> int:
            got = self.monitor.free_bytes()
            return got[0] if got else 1 << 62

        def shed(_: memory.Waiting) -> None:
            self.shed(key)

        try:
            self._ledger().admit(id(loading), memory.Hold(self.footprint.get(key, LOAD_GUESS), lambda: set(loading)),
                                 free, self._used, LOAD_ADMIT_S, cancel, on_wait=shed)
        except memory.AdmitCancelled:
            raise WorkerError("cancelled", "cancelled") from None

    def shed(self, keep: str = "") -> None:
        """Kept referees nobody uses go back (their memory for evaluations that wait for it), but `keep`'s and any
        answering a request now (a reference's profile)."""
        with self.lock:
            idle = [h for k, h in self._kept.items() if h.users == 0 and k != keep and not h.lock.locked()]
        for h in idle:
            self.drop(h)

    def _others_hold_memory(self, key: str) -> bool:
        """This process's other evaluations hold device memory that will go back: candidates admitted, or other
        references' referees in use."""
        with self.lock:
            busy = any(h.users > 0 for k, h in self._kept.items() if k != key)
        return busy or self._ledger().held() > 0

    def let_go(self, h: RefereeHandle) -> int:
        """The one device stage using `h` gives it up while it waits for device memory (`memory.MemoryLedger.admit`'s
        `on_yield`): it goes now, unless another stage uses it or it answers a request (its torch.compile ahead).
        Returns the device memory it held (what its last load took, or what it holds now; at least LOAD_GUESS),
        0 when it stays."""
        with self.lock:
            if h.users != 1 or h.lock.locked() or h.compiling or h.released or self._kept.get(h.key) is not h:
                return 0
            h.users = 0
        size = max(self.footprint.get(h.key, 0), self._used({h.worker.pid}), LOAD_GUESS)
        self.drop(h)
        return size

    def done_with(self, h: RefereeHandle) -> None:
        """A device stage is done with `h`: it goes back now when its worker died, when it is beyond the kept ones
        and unused (a new reference may be waiting for its slot), or when it was retired and is unused."""
        with self.lock:
            h.users -= 1
            surplus = h.users == 0 and len(self._kept) > MAX_REFEREES  # beyond the kept ones: its slot
            retired = h.retired and h.users == 0
        if h.worker.dead or surplus or retired:  # goes back now (a new reference may be waiting for one)
            self.drop(h)

    def profile(self, h: RefereeHandle, reference_src: str, gate: DeviceGate,
                cancel: threading.Event | None) -> M.ReferenceProfile:
        """The reference's profile, taken by its referee alone on the device (the gate's exclusive side); a referee
        whose worker failed is dropped."""
        try:
            with gate.exclusive(None, cancel), h.lock:
                try:
                    res, _ = h.worker.ask(M.RefereeOps.profile, M.ProfileReference(reference_src=reference_src,
                                                                        settings=asdict(self.settings)),
                                          timeout=self.settings.run_timeout, cancel=cancel)
                except WorkerError as e:
                    self.drop(h)
                    raise EvaluatorError(f"profiling the reference: {e.message}") from None
                except WorkerFailed as e:
                    raise EvaluatorError(f"profiling the reference: {e.failed.error}") from None
        except Cancelled:
            raise EvaluatorError("cancelled") from None
        return res

    def holds(self, reference_src: str) -> bool:
        """A referee holds this reference now (loaded, not retired)."""
        h = self._kept.get(reference_key(reference_src))
        return h is not None and not h.retired and not h.worker.dead

    def compile_ahead(self, reference_src: str, gate: DeviceGate, limits: dict | None = None) -> bool:
        """torch.compile of a kept reference, started now in the background (its candidates' timing compares with
        it): on an H200 it took 11-13 s of the first candidate's time stage, while the referee sat idle through that
        candidate's own compile stage. Taken on the gate's shared side, so no timing of this evaluator runs beside
        it, and under the referee's lock, as any request. A failure is left to the first candidate timed, which asks
        again and says what failed. Then, with the device's `limits`, the reference's other facts its first
        candidate would otherwise pay for: its roofline (the time stage's bound) and what its forward runs (the
        kernel check's summary, a profile of it). False: nothing started (not kept, already compiled or compiling)."""
        key = reference_key(reference_src)
        with self.lock:
            if key in self._superseded:  # its document moved on: the device is the newer version's
                return False
            if not self.compiled_wait and self._on_its_way.get(key):
                self._put_off[key] = (reference_src, gate, limits)  # begun when its candidates are done
                return False
            h = self._kept.get(key)
            if h is None or self.closed or h.worker.dead or h.retired or h.compiled or h.compile_error or \
                    h.compiling:
                return False
            h.compiling = True
            a = self._ahead[key] = _Ahead(reference_src, gate, limits, h)
        threading.Thread(target=self._compile, args=(a,), name="klsp-reference-compile", daemon=True).start()
        return True

    @contextmanager
    def on_its_way(self, reference_src: str, arrived: bool = True) -> Iterator[None]:
        """A candidate of this reference on its way to a verdict (`arrived`: its build or its evaluation has begun;
        not: a job's candidates are still being written). With `compiled_wait` off, a compile ahead of the reference
        asked meanwhile is put off until none is (it would hold the referee and the device for seconds, the time of
        their verdicts), then begun; one under way when a candidate arrives is stopped and put off alike (a referee
        that had begun it goes, and its candidates load the reference again: a second or less, where the compile's
        rest would be seconds). One under way while candidates are only being written goes on: the model's time
        may be enough for it."""
        key = reference_key(reference_src)
        with self.lock:
            self._on_its_way[key] = self._on_its_way.get(key, 0) + 1
            a = self._stop_ahead(key) if arrived and not self.compiled_wait else None
            if a is not None:
                self._put_off[key] = (a.reference_src, a.gate, a.limits)
        try:
            yield
        finally:
            with self.lock:
                left = self._on_its_way.pop(key) - 1
                if left:
                    self._on_its_way[key] = left
                later = None if left else self._put_off.pop(key, None)
            if later is not None and not self.closed:
                self.compile_ahead(*later)

    def superseded(self, reference_src: str, by: Iterable[str] = ()) -> None:
        """No candidate of this reference is expected any more (its document holds the references `by` now): its
        compile ahead under way stops, and none begins again (one put off until its candidates are done, one asked
        later), until it is current again (named in a later call's `by`). It would hold the device through the
        newer version's preparation and first candidates. Left alone where one of `by` runs the same code, where a
        candidate of it holds its referee now, or where its candidates on their way wait for it (`compiled_wait`).
        With `compiled_wait` off, a job of it still running has its later verdicts without the figure."""
        key = reference_key(reference_src)
        now = {reference_key(b) for b in by}
        with self.lock:
            for k in now:
                self._superseded.pop(k, None)
            if key in now:
                return
            self._superseded[key] = None
            self._superseded.move_to_end(key)
            while len(self._superseded) > SUPERSEDED_KEPT:
                self._superseded.popitem(last=False)
            self._put_off.pop(key, None)
            if not (self.compiled_wait and self._on_its_way.get(key)):  # (its verdicts would compile it)
                self._stop_ahead(key)

    def _stop_ahead(self, key: str) -> _Ahead | None:
        """Stop the reference's compile ahead, under `lock`: the one stopped, if one was under way and nobody uses
        its referee. A referee asked to compile already is retired (its worker is killed once the compile's thread
        has let go of the gate and the referee); one that was not may be asked again at once."""
        a = self._ahead.get(key)
        if a is None or a.h.users:
            return None
        a.stop.set()
        del self._ahead[key]
        if a.begun:
            a.h.retired = True
        else:
            a.h.compiling = False
        return a

    def _compile(self, a: _Ahead) -> None:
        h, gate, limits = a.h, a.gate, a.limits
        try:
            with gate.shared(a.stop), h.lock:
                with self.lock:
                    if h.compiled or h.compile_error or h.retired or h.worker.dead or self.closed or a.stop.is_set():
                        return
                    a.begun = True
                # stopped: its worker is killed below, once the gate and the referee are let go (a device process's
                # teardown takes seconds, which nobody should wait for)
                res, fds = h.worker.ask(M.RefereeOps.compile, M.Empty(),
                                        timeout=max(300.0, self.settings.run_timeout), cancel=a.stop,
                                        kill_on_cancel=False)
                for fd in fds:
                    os.close(fd)
                h.compile_error, h.compiled, h.compile_s = res.error, not res.error, res.seconds
        except (Cancelled, WorkerError, WorkerFailed):
            return
        finally:
            with self.lock:
                if self._ahead.get(h.key) is a:  # (one stopped is no longer there: its referee may compile again)
                    del self._ahead[h.key]
                    h.compiling = False
            if a.stop.is_set() and a.begun:  # its worker, stopped in the middle of the request, goes
                if self.closed:
                    h.worker.kill()  # (the close kills the kept ones; one retired meanwhile may not be among them)
                else:
                    self.drop(h)
        if limits is not None:
            self._facts(h, gate, limits)

    def _facts(self, h: RefereeHandle, gate: DeviceGate, limits: dict) -> None:
        """The reference's roofline and its summary (what its forward runs), asked ahead of its first candidate's
        time and profile steps, which ask only for what is still missing. The referee's own work on the reference
        (trusted; nothing of a candidate's runs in it): the same answers whoever asks first. A failure leaves them to
        the first candidate, which asks again and says what failed."""
        try:
            with gate.shared(self.stop), h.lock:
                if h.retired or h.worker.dead or self.closed:
                    return
                if h.roofline is None:
                    h.roofline = h.worker.ask(M.RefereeOps.roofline, M.RooflineAsk(limits=limits),
                                              timeout=self.settings.run_timeout, cancel=self.stop)[0]
                if h.summary is None:
                    raw = h.worker.ask(M.RefereeOps.summary, M.Empty(), timeout=self.settings.run_timeout,
                                       cancel=self.stop)[0].events
                    h.summary, h.library_kernels = summarise_least(raw), library_kernels(raw)
        except (Cancelled, WorkerError, WorkerFailed):
            pass

    def drop(self, h: RefereeHandle) -> None:
        with self.lock:
            if self._kept.get(h.key) is h:
                del self._kept[h.key]
            if h.released:
                return
            h.released = True
        if self.pool is not None:
            self.pool.release(h.worker, tainted=True)
            self._ledger().freed()
