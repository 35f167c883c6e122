"""Evaluator side of the device stage for one candidate: the referee (trusted) and a fresh runner (sandboxed).

The runner is the candidate: whatever it sends is a claim. Every figure of the verdict is measured here or by the
referee, or checked against what was:

1. load: the runner maps the referee's arena, imports the candidate (extensions from the cache), builds ModelNew,
   moves it to the device, each a phase with its own timeout; after each, its tamper report (a claim: a second
   line of defence, never the only one);
2. verification trials: the referee writes inputs drawn from fresh random seeds (the task's distribution, a
   positional ramp, and, where the reference stays finite, signed and wide values), the runner runs forward and
   copies its outputs into the arena, the referee reads and compares them; a mismatch gets a second opinion
   against the exact (float64) answer before it is final (the referee's `_second_opinion`);
3. timing, by the evaluator's own clock: one timed request runs N calls on N fresh input sets the referee placed
   in the arena, each output into its own slot; the clock spans the request and, on a GPU, the referee's probe
   that the device is idle again (work the candidate left running counts); the runner is stopped by a signal when
   it replies, so nothing it deferred runs unseen; the referee reads the outputs of calls picked once the request
   is over; the reference's requests are the same loop in the referee, interleaved, with the runner stopped. The
   harness's own cost of a request of N calls (an identity "model" in the same loop, outputs copied alike) is
   measured the same way and taken off both. A time below what the hardware allows (the inputs' bytes at its
   highest bandwidth) is `tampered`;
4. one call under the profiler: the candidate's own code against library operators, class by class
   (profiles.py, kernelcheck.py), with what the evaluator knows of its sources and binaries; the profile is the
   candidate process's report and is checked against the outside clock. The result is the verdict's kernel
   finding (own code, library only, not checked), never its status: a correct candidate stays `correct`;
5. the runner is killed; on a GPU the reference is timed once more with the runner gone: where it ran markedly
   slower beside the runner, the speedup is taken against the reference alone, uncertain (`against_alone`).
"""

from __future__ import annotations

import math
import os
import random
import re
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ... import cpusampler, kernelcheck
from ... import messages as M
from ... import verdict as V
from ...processes import devmon
from ...processes.gate import Cancelled, DeviceGate, Race
from ...processes.members import FreezeError
from ...processes.pool import Pool, Worker, WorkerError, WorkerFailed
from ...profiles import Own, check_against_clock, library_kernels, summarise_least
from ...settings import EvalSettings
from ...timing import median_ci, stats
from ...variants import DESCRIBE, OUT_OF_DISTRIBUTION
from ...verdict import Correctness, KernelCheck, Profile, ProfileOp, Timing, TimingStats

# How the kernel finding was measured, said in its message.
MEASURED = ("Measured: one call of its forward under the profiler (the candidate process's report, checked against "
            "the evaluator's clock); its own code is the kernels and operators of the binaries the evaluator built "
            "from its sources, never a library operator's")

OnStage = Callable[[str, str], None]

_CUDA_FATAL = re.compile(
    r"illegal memory access|illegal address|unspecified launch failure|misaligned address|illegal instruction"
    r"|device-side assert|cudaErrorLaunchFailure|AcceleratorError|CUDA error: an? |uncorrectable ECC", re.IGNORECASE)
_OOM = re.compile(r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|std::bad_alloc|MemoryError"
                  r"|can't allocate memory|cannot allocate memory", re.IGNORECASE)

IDLE_CPU_WINDOW_S = 0.25
IDLE_CPU_LIMIT = 0.3  # cores: a runner busier than this while it waits for a request left work running
CONTENTION_RATIO = 1.25
OVERHEAD_SHARE = 0.01  # a timed request holds enough calls that the harness's own cost is under 1 % of it
MAX_REQUEST_MS = 250.0  # ... but no request of many calls runs longer than this
PHYSICAL_MARGIN = 2.0  # faster than half the physical floor: impossible, whatever the task's algorithm
CHECK_SHARE = 0.15  # the share of a timed request's calls whose outputs the referee reads (at least one)
SPEEDUP_CI_FLOOR = 0.03  # a speedup known to better than ±3 % is quotable as a plain number
ARENA_SHARE = {True: 256 << 20, False: 64 << 20}  # one candidate's arena (GPU / CPU), of several side by side
# before every timed request, its worker has been idle this long (the runner always is, after the referee's fill;
# the referee would not be, and a process woken from a wait meets the scheduler differently from a busy one)
SETTLE_S = 0.002
ARENA_OPS = ("fill", "check", "stage", "go")  # referee requests that touch the memory a runner shares
QUIET_WAIT_MS = 20.0  # the device busy longer than this when it should be idle: whose work was it?
RACE_MIN_ROUNDS = 5
ADMIT_WAIT_S = 120.0  # how long a candidate waits for the device memory its task needs
SAMPLES_WANTED = 2000  # CPU: the evaluator's sampling of the profiled call, about this many samples per thread
SAMPLE_PERIOD_MIN_NS, SAMPLE_PERIOD_MAX_NS = 50_000, 2_000_000
_SAMPLING: str | None = None  # "" where this machine lets the evaluator sample its sandboxes, else why not
PROFILED_CALLS = 3  # each on its own fresh input set; each operator's least time is kept  # timed rounds before a candidate may be found unable to be the best


class Stop(Exception):
    """Ends the device stage with a status and a message (the stage that failed is `stage`)."""

    def __init__(self, status: str, message: str, stage: str, detail: str = "", log: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.stage, self.detail, self.log = status, message, stage, detail, log


@dataclass
class RefereeHandle:
    """A referee worker with a reference loaded (reused for every candidate of the same reference)."""

    worker: Worker
    key: str
    info: M.ReferenceLoaded  # the referee's report of the loaded reference (sizes, init arguments, device memory)
    init_seed: int
    roofline: M.RooflineReport | None = None  # asked once, by the first candidate timed
    summary: dict | None = None  # the reference's profile, by class (profiles.summarise)
    library_kernels: set[str] = field(default_factory=set)  # kernel identifiers its library operators launch
    users: int = 0  # device stages using it now (it is not evicted meanwhile)
    compiled: bool = False
    compile_error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)  # one request at a time
    race: Race = field(default_factory=Race)  # its candidates being timed at the same time
    retired: bool = False  # it failed a request: given to no new candidate, dropped once its users are done


@dataclass
class Outcome:
    status: str = V.CORRECT
    message: str = ""
    stages: list[tuple[str, bool, float, str, bool]] = field(default_factory=list)
    correctness: Correctness | None = None
    timing: Timing | None = None
    kernel: KernelCheck | None = None
    profile: Profile | None = None
    warnings: list[str] = field(default_factory=list)
    detail: str = ""
    log: str = ""
    load_s: float = 0.0
    checked: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    start_s: float = 0.0  # waiting for its runner to be ready
    waited_s: float = 0.0  # waiting for the device while other candidates had their turns


@dataclass
class Request:
    """One timed request's calls: input sets, output slots, seeds, and (once filled) their encoded arguments."""

    slots: list[int]
    outs: list[int]
    seeds: list[int]
    variant: str = "task"
    args: list[list] = field(default_factory=list)
    fresh: list[bool] = field(default_factory=list)

    def items(self) -> list[M.CallItem]:
        return [M.CallItem(slot=s, out=o, fresh=f, args=a) for s, o, f, a in zip(self.slots, self.outs, self.fresh,
                                                                               self.args)]


class DeviceStage:
    def __init__(self, settings: EvalSettings, referee: RefereeHandle, runners: Pool, device: str, salt: str,
                 cancel: threading.Event | None, on_stage: OnStage, profile: bool, time_it: bool) -> None:
        self.s = settings
        self.ref = referee
        self.runners = runners
        self.device = device
        self.gpu = device.startswith("cuda")
        self.salt = salt
        self.cancel = cancel
        self.on_stage = on_stage
        self.want_profile = profile
        self.time_it = time_it
        self.kernel_check = settings.kernel_check
        self.out = Outcome()
        self.runner: Worker | None = None
        self.layout: dict = {}  # of this candidate's own arena (set when it is opened)
        self.fixed_args = True  # the task's arguments have the same structure for every seed (calls can be staged)
        self.n_slots = 1
        self.arena = 0
        self.gate: DeviceGate | None = None
        self.race: Race | None = None
        self.nonce = secrets.token_hex(6)
        self.loaded: M.Loaded | None = None
        self.call_ms: list[float] = []  # outside-clock times of single verification calls (to size requests)
        self.start_s = 0.0  # waiting for this candidate's runner to be ready
        self.waited_s = 0.0  # waiting for the device (other candidates' turns)
        self.h_ref = 0.0
        self.frozen_cpu_ns: int | None = None  # the sandbox's CPU time when it was last frozen (CPU)
        self.free_at_start: int | None = None  # device memory free before this candidate was imported (GPU)
        self.timing_since = 0.0  # wall clock when its timing began (whose work was on the device since)
        self.lease_wait_s = 0.0  # waited for other processes' timing on this device (the host lease)
        self.lease_holders: set[str] = set()
        self.contention: list[str] = []  # other processes' work on the device while this candidate was timed
        self._contention_keys: set[object] = set()

    # set by the evaluator before run()
    candidate_src: str = ""
    cache_dir: str = ""
    device_label: str = ""
    limits: dict = {}  # noqa: RUF012  (the device's measured and specified limits, set by the evaluator)
    own_kernels: set[str] = set()  # noqa: RUF012  (__global__ identifiers of the sources the evaluator built)
    libraries: list[str] = []  # noqa: RUF012  (paths of the libraries the compile stage built or found)
    extension_names: set[str] = set()  # noqa: RUF012  (their load_inline names)
    monitor: devmon.DeviceMonitor = devmon.DeviceMonitor("not a GPU")  # whose work is on the device (NVML)
    our_pids: Callable[[], set[int]] | None = None  # the evaluator's own workers' processes (never neighbours)

    # -- requests ------------------------------------------------------------------------------------------------
    def _referee(self, op: M.Op[M.Req, M.Rep], req: M.Req | None = None, timeout: float | None = None) -> M.Rep:
        """One referee request (candidates side by side take turns: the referee answers one at a time)."""
        name = op.name
        self._locked(self.ref.lock)
        try:
            res, fds = self.ref.worker.ask(op, req or M.Empty(), timeout=timeout or self.s.run_timeout,
                                           cancel=self.cancel)
        except WorkerError as e:
            if e.kind == "cancelled":
                raise Stop(V.CANCELLED, "cancelled", name) from None
            if name in ARENA_OPS and self.runner is not None and re.search(r"SIGBUS|SIGSEGV", e.message):
                # a memory fault while the referee worked on the memory it shares with this candidate's runner:
                # the candidate's doing (nothing else holds that memory), never ours
                raise Stop(V.TAMPERED, f"the referee died of a memory fault working on the memory it shares with "
                                       f"the candidate ({name}: {e.message})", name, log=e.log_tail) from None
            raise Stop(V.INFRA_ERROR, f"the referee failed ({name}): {e.message}", name, log=e.log_tail) from None
        except WorkerFailed as e:
            self.ref.retired = True  # replaced, not reused: the candidates using it finish, new ones get a fresh one
            raise Stop(V.INFRA_ERROR, f"the referee failed ({name}): {e.failed.error}"[:600], name,
                       detail=e.failed.traceback) from None
        finally:
            self.ref.lock.release()
        for fd in fds:
            os.close(fd)
        return res

    def _runner(self, op: M.Op[M.Req, M.Rep], req: M.Req, stage: str, timeout: float, fds: list[int] | None = None,
                clocked: bool = False) -> M.Rep:
        """One runner request. The runner runs only while it answers one: thawed just before, frozen again as soon
        as it answers (`clocked`: the clock thaws and freezes it, inside its span)."""
        assert self.runner is not None
        runner, name = self.runner, op.name
        if not clocked:
            self._thaw()
        try:
            res, rfds = runner.ask(op, req, timeout=timeout, cancel=self.cancel, fds=fds)
        except WorkerError as e:
            self.out.log = e.log_tail
            if e.kind == "cancelled" or self.runners.closed:  # closed by its evaluator: we killed it
                raise Stop(V.CANCELLED, "cancelled", stage) from None
            if e.kind == "timeout":
                raise Stop(V.TIMEOUT, f"timeout after {timeout:g} s during {_phase(name, stage)}; "
                           "the worker was killed", stage, log=e.log_tail) from None
            if e.kind == "protocol":
                raise Stop(V.TAMPERED, f"the candidate's process broke the oracle's protocol ({e.message})", stage,
                           log=e.log_tail) from None
            if _CUDA_FATAL.search(e.log_tail or ""):
                first = next((ln for ln in e.log_tail.splitlines() if _CUDA_FATAL.search(ln)), e.message)
                raise Stop(V.CRASHED, f"{first.strip()[:300]} during {_phase(name, stage)} (the CUDA context is "
                           "poisoned; the worker was replaced)", stage, log=e.log_tail) from None
            raise Stop(V.CRASHED, f"{e.message} during {_phase(name, stage)}; the worker was replaced", stage,
                       log=e.log_tail) from None
        except WorkerFailed as e:
            raise self._failure(e.failed, name, stage) from None
        finally:
            if not clocked and not runner.dead:
                self._freeze(stage)
        for fd in rfds:
            os.close(fd)
        return res

    def _freeze(self, stage: str) -> None:
        """Every process of the runner's sandbox stopped (it runs only inside a request); the CPU time its sandbox
        has used so far, to find any it uses while frozen."""
        assert self.runner is not None
        try:
            self.runner.freeze()
        except FreezeError as e:
            raise Stop(V.TAMPERED, f"the candidate's processes would not stay stopped between requests ({e})",
                       stage) from None
        if not self.gpu:
            self.frozen_cpu_ns = self.runner.cpu_ns()

    def _thaw(self, pids: list[int] | None = None, cpu_now_ns: int | None = None) -> int:
        """Let the runner's sandbox run again; returns the CPU time (ns) it used while frozen (nothing, unless a
        process of it escaped the freeze: then the clocked request that follows is charged with it). `cpu_now_ns`:
        its CPU time read just before (the clock's start), so it is not read twice."""
        assert self.runner is not None
        off = 0
        if not self.gpu and self.frozen_cpu_ns is not None:
            now = self.runner.cpu_ns() if cpu_now_ns is None else cpu_now_ns
            off = max(0, now - self.frozen_cpu_ns)
        self.frozen_cpu_ns = None
        self.runner.thaw(pids)
        return off

    def _failure(self, f: M.Failed, op: str, stage: str) -> Stop:
        """A runner's failure report is a claim too: nothing it says makes a failure ours (infra_error), except
        memory that other processes held (which the referee measured)."""
        text = str(f.text or f.error or "failed")
        detail = str(f.detail or "")
        first = text.strip().splitlines()[0][:300] if text.strip() else "failed"
        where = _phase(op, stage)
        if f.kind == "build":
            return Stop(V.RUNTIME_ERROR, f"{first} (during {where})", stage, detail)
        if _CUDA_FATAL.search(text):
            return Stop(V.CRASHED, f"crashed: {first} during {where} (the CUDA context is poisoned; the worker was "
                        "replaced)", stage, detail)
        if _OOM.search(text):
            held = self._memory_held_by_others()
            if held:
                return Stop(V.INFRA_ERROR, f"out of memory during {where}, but {held}: not the candidate's fault",
                            stage, detail)
            return Stop(V.RUNTIME_ERROR, f"out of memory: {first} (during {where})", stage, detail)
        if f.kind != "exception":
            return Stop(V.RUNTIME_ERROR, f"the candidate's process failed during {where}: {first}", stage,
                        detail or str(f.traceback))
        return Stop(V.RUNTIME_ERROR, f"{first} (during {where})", stage, detail)

    def _need_bytes(self) -> int:
        """Device memory a candidate of this task needs, from the reference's layout: its arena's inputs and outputs,
        a copy of each for its own use, and 1 GB for its context and libraries."""
        return 2 * self.ref.info.in_bytes + 4 * self.ref.info.out_bytes + (1 << 30)

    def _memory_held_by_others(self) -> str:
        """On a GPU: if memory that others held before the candidate was imported explains the out-of-memory, say
        so (the candidate's own allocations came after that measure, so they are never "other processes")."""
        free = self.free_at_start
        total = self.ref.info.total_bytes
        if not total or free is None:
            return ""
        need = self._need_bytes()
        if free < need:
            held = devmon.neighbours(self.monitor, {self.ref.worker.pid})
            who = f": {', '.join(map(str, held[:3]))}" if held else ""
            return (f"only {free / 2**30:.1f} GB of {total / 2**30:.1f} GB were free when the candidate started "
                    f"(other processes held the rest{who}; this task needs about {need / 2**30:.1f} GB)")
        return ""

    def _admit(self) -> None:
        """GPU: wait (up to ADMIT_WAIT_S) until the device has the memory this task needs before the candidate is
        imported, rather than fail with out of memory; measured before the import, so what the candidate allocates
        itself is never counted as other processes' memory."""
        if not self.gpu:
            return
        end = time.monotonic() + ADMIT_WAIT_S
        waited = False
        while True:
            self.free_at_start = self._referee(M.RefereeOps.memory).free
            if self.free_at_start >= self._need_bytes() or time.monotonic() > end:
                break
            if not waited:
                waited = True
                self.on_stage("compile", "waiting for device memory")
            if self.cancel is not None and self.cancel.wait(0.5):
                raise Stop(V.CANCELLED, "cancelled", "load")
            if self.cancel is None:
                time.sleep(0.5)
        if waited:
            self.out.warnings.append(f"waited for device memory before loading ({self._memory_note()})")

    def _memory_note(self) -> str:
        free = self.free_at_start or 0
        return f"{free / 2**30:.1f} GB free, {self._need_bytes() / 2**30:.1f} GB needed"

    def _state(self, after: str) -> None:
        """The runner's tamper report: believed when it confesses, never needed for a verdict to hold."""
        res = self._runner(M.RunnerOps.state, M.Empty(), after, 30.0)
        self.out.warnings += [f"{w} (after {after})" for w in res.warnings if
                              f"{w} (after {after})" not in self.out.warnings]
        if res.tampered:
            raise Stop(V.TAMPERED, f"the candidate changed torch's or the oracle's state during {after}: "
                                   + "; ".join(res.tampered)[:800], after)

    # -- the stage -------------------------------------------------------------------------------------------------
    def _locked(self, lock: threading.Lock) -> None:
        while not lock.acquire(timeout=0.1):
            if self.cancel is not None and self.cancel.is_set():
                raise Stop(V.CANCELLED, "cancelled", "verify")

    def run(self, gate: DeviceGate, race: Race | None = None) -> Outcome:
        """The load phase runs beside other candidates' device stages; verification beside other verifications
        (the gate's shared side); each timed round, the profiled call and the contention check alone on the
        device, with every other live runner stopped (the gate's exclusive side)."""
        t_all = time.perf_counter()
        self.gate, self.race = gate, race
        try:
            try:
                self.runner = self.runners.acquire(self.cancel)
                t0 = time.perf_counter()
                self.runner.wait_ready(cancel=self.cancel)
                self.start_s = time.perf_counter() - t0
            except WorkerError as e:
                if e.kind == "cancelled" or self.runners.closed:  # the evaluator closed and killed it while it started
                    raise Stop(V.CANCELLED, "cancelled", "load") from None
                raise Stop(V.INFRA_ERROR, f"could not start a runner: {e.message}", "load", log=e.log_tail) from None
            self._load()
            gate.register(id(self), self.runner)
            self.on_stage("verify", "waiting for the device")
            try:
                with gate.shared(self.cancel) as waited:
                    self.waited_s += waited
                    t0 = time.perf_counter()
                    self._verify()
                    self.out.stages.append(("verify", True, time.perf_counter() - t0,
                                            self.out.correctness.message if self.out.correctness else "",
                                            False))
                self.out.checked.append("verify(outputs read from shared memory by the referee)")
                if not self.time_it:
                    self._idle_checks("verification")
                if self.time_it:
                    t0 = time.perf_counter()
                    self._time()
                    self.out.stages.append(("time", True, time.perf_counter() - t0, _timing_note(self.out.timing),
                                            False))
                    self.out.checked.append("time(the evaluator's clock around each request, to the device idle)"
                                            if self.gpu else "time(the worker's CPU time per request, read by the "
                                                             "evaluator from the kernel)")
                else:
                    self.out.stages.append(("time", True, 0.0, "not asked for", True))
                if self.kernel_check or self.want_profile:
                    t0 = time.perf_counter()
                    with gate.exclusive(id(self), self.cancel, self._note_wait) as waited:
                        self.waited_s += waited
                        self._profile()
                    self.out.stages.append(("profile", True, time.perf_counter() - t0,
                                            self.out.kernel.message[:200] if self.out.kernel else "", False))
                self._state("the whole run")
                self.out.not_checked.append("tamper report (the candidate's process reports its own state)")
                self._end_checks()
            except Cancelled:
                raise Stop(V.CANCELLED, "cancelled", "verify") from None
        except Stop as st:
            self.out.status, self.out.message = st.status, st.message
            self.out.detail = st.detail or self.out.detail
            self.out.log = st.log or self.out.log
            if st.stage in ("verify", "time", "profile"):
                self.out.stages.append((st.stage, False, time.perf_counter() - t_all, st.message, False))
        finally:
            gate.unregister(id(self))
            if race is not None:
                race.leave(id(self))
            if self.runner is not None:
                self.runners.release(self.runner, tainted=True)
            if self.arena and not self.ref.worker.dead:
                try:  # this candidate's arena goes back to the device (another verdict may need it)
                    with self.ref.lock:
                        self.ref.worker.ask(M.RefereeOps.close_arena, M.ArenaRef(arena=self.arena), timeout=30.0)
                except (WorkerError, WorkerFailed):
                    pass
        if self.out.status == V.CORRECT and self.out.kernel is None:
            self.out.kernel = KernelCheck(finding=V.KERNEL_NOT_CHECKED, message=(
                "not checked: the kernel check is off (setting kernel_check)" if not self.kernel_check
                else "not checked: no profile of its forward was taken"))
        self.out.start_s, self.out.waited_s = self.start_s, self.waited_s
        if self.lease_wait_s > 0.05:
            self.out.warnings.append(self._lease_warning())
        return self.out

    def _load(self) -> None:
        assert self.runner is not None
        self.on_stage("compile", "loading the candidate on the device")
        t0 = time.perf_counter()
        self._admit()
        slots = self.ref.info.slots_max or 1
        if slots > 1:  # an arena of its own, of a share of the budget: candidates side by side fit
            share = ARENA_SHARE[self.gpu]
            if self.gpu and self.ref.info.total_bytes:  # 1/64 of the device: 2 GB on an H200, 256 MB on 16 GB
                share = max(256 << 20, min(2 << 30, self.ref.info.total_bytes // 64))
            slots = max(2, min(slots, share // max(1, self.ref.info.set_bytes)))
        self._locked(self.ref.lock)
        try:
            opened, fds = self.ref.worker.ask(M.RefereeOps.open_arena, M.OpenArena(slots=slots), timeout=60.0,
                                              cancel=self.cancel)
        except (WorkerError, WorkerFailed) as e:
            cancelled = isinstance(e, WorkerError) and e.kind == "cancelled"
            raise Stop(V.CANCELLED if cancelled else V.INFRA_ERROR,
                       "cancelled" if cancelled else f"the referee failed: {e}", "load") from None
        finally:
            self.ref.lock.release()
        self.arena, self.layout, self.n_slots = opened.arena, opened.layout, opened.slots
        try:
            self._runner(M.RunnerOps.attach, M.Attach(nbytes=opened.nbytes, layout=self.layout), "load", 60.0, fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        if self.runner.cgroup is not None:  # now that the task's size is known: what a candidate may hold
            io = self.ref.info.in_bytes + self.ref.info.out_bytes
            floor = (8 << 30) if self.gpu else (2 << 30)  # CUDA's libraries are big
            self.runner.cgroup.set_memory(min(self.runner.spec.memory_bytes or (1 << 62), max(floor, 4 * io + (1 << 30))))
        self.loaded = self._runner(M.RunnerOps.load,
                                   M.LoadCandidate(candidate_src=self.candidate_src, salt=self.salt,
                                                   cache_dir=self.cache_dir, nonce=self.nonce),
                                   "load", self.s.run_timeout)
        self._state("import")
        self._runner(M.RunnerOps.init, M.InitModel(init_args=self.ref.info.init_args, seed=self.ref.init_seed), "load",
                     self.s.run_timeout)
        self._runner(M.RunnerOps.to_device, M.Empty(), "load", self.s.run_timeout)
        self._state("ModelNew(...)")
        self.out.load_s = time.perf_counter() - t0

    # -- the outside clock -----------------------------------------------------------------------------------------
    def _clocked(self, fn: Callable[[], Any], stage: str, stop_runner: bool, who: Worker | None = None,
                 wall: bool = False) -> tuple[float, Any]:
        """(ms, result): the evaluator's clock from sending the request `fn` makes to `who` until its answer
        arrived (before the answer is decoded: the same cost for a long reply and a short one) and, on a GPU,
        until the device was idle again by the referee's probe (its clock is this one: CLOCK_MONOTONIC).
        The candidate's sandbox is thawed just after the clock starts and stopped as soon as `fn` returns (before
        anything reads the outputs; on a GPU before the probe, so that nothing more is queued), then frozen whole.
        `stop_runner` (the reference's requests): the same signals to the runner, already stopped. `wall`: on the CPU too, the wall time from sending to
        the answer (the bound of anything measured in wall time inside the request, such as a profile's events:
        the worker's CPU time is less than that whenever other processes share the cores)."""
        assert self.runner is not None
        mine = who is self.runner
        who = who or self.ref.worker
        pids = self.runner.processes()  # listed before the clock starts, on both sides alike
        c0 = who.cpu_ns() if not self.gpu else 0
        t0 = time.perf_counter()
        off_ns = self._thaw(pids, c0 if not self.gpu else None) if mine else 0
        try:
            res = fn()
            t_reply = who.reply_at
            if mine or stop_runner:  # at once, before the probe: a signal to each process listed (on the
                self.runner.stop_now(pids)  # reference's side they are stopped already: the same cost, no effect)
            if self.gpu:
                since = time.time() - (time.perf_counter() - t0)
                idle = self._referee(M.RefereeOps.idle, timeout=90.0)
                if not idle.idle or idle.probes > 2:
                    self._busy_device(idle, since, stage, "after the candidate's request returned" if mine else
                                      "after the reference's request returned", on_clock=True)
                return (max(t_reply, idle.idle_at) - t0) * 1e3, res
        finally:
            if mine and self.runner is not None and not self.runner.dead:
                self._freeze(stage)  # every member seen stopped (a process it started meanwhile included)
        if wall:
            return (t_reply - t0) * 1e3, res
        # the CPU's clock: the CPU time of the whole sandbox (of the referee for the reference's requests), which
        # another process's load does not inflate; whatever the sandbox did while frozen (nothing, unless a process
        # escaped the freeze) is charged to this request too
        return (who.cpu_ns() - c0 + off_ns) / 1e6, res

    # -- whose work is on the device -------------------------------------------------------------------------------
    def _whose(self, since: float) -> devmon.Attribution:
        """Who kept the device busy since `since` (wall clock): the candidate's sandbox, other processes, or unknown."""
        cand = set(self.runner.processes()) if self.runner is not None else set()
        who = devmon.attribute(self.monitor, cand, {self.ref.worker.pid}, since)
        if who.others and self.our_pids is not None:  # this evaluator's other workers: its gate orders them
            ours = self.our_pids()
            who.others = [n for n in who.others if n.pid not in ours]
        return who

    def _busy_device(self, idle: M.IdleReport, since: float, stage: str, when: str, on_clock: bool = False) -> None:
        """The device was not idle at once after a request (or before inputs were written): the candidate's work is
        the candidate's (`tampered` when it is still running); anyone else's is contention, named and kept to make
        the figures uncertain, never a refusal. Unknown whose (no per-process view) and still busy after the wait:
        the candidate's processes are killed, and the device going idle then says it was theirs. `on_clock`: the
        wait was inside a clocked request's span (the candidate's work there is on its clock, not a fault)."""
        who = self._whose(since)
        if who.known and who.candidate and not idle.idle:
            raise Stop(V.TAMPERED, f"the device was still busy {idle.waited_ms / 1e3:.0f} s {when}: "
                                   f"{who.describe()}", stage)
        if not on_clock and who.known and who.candidate and not who.others and idle.waited_ms > QUIET_WAIT_MS:
            raise Stop(V.TAMPERED, f"work of the candidate's ran on the device {when} "
                                   f"({idle.waited_ms:.0f} ms): {who.describe()}", stage)
        if who.others:
            self._contended(who.describe(), tuple(sorted(n.pid for n in who.others)))
        if idle.idle:
            if not who.known and idle.waited_ms > QUIET_WAIT_MS:
                self._contended(f"the device was busy for {idle.waited_ms:.0f} ms {when}; {who.describe()}",
                                "unknown")
            return
        if who.known:  # busy for the whole wait, and not by the candidate
            raise Stop(V.INFRA_ERROR, f"the device was busy with other processes' work for {idle.waited_ms / 1e3:.0f} "
                                      f"s {when}; the candidate could not be timed: {who.describe()}", stage)
        assert self.runner is not None
        self.runners.release(self.runner, tainted=True)  # kills its whole sandbox, and its device contexts
        self.runner = None
        after = self._referee(M.RefereeOps.idle, timeout=90.0)
        if after.idle and after.waited_ms < 5e3:
            raise Stop(V.TAMPERED, f"the device was still busy {idle.waited_ms / 1e3:.0f} s {when}, and idle as soon "
                                   "as the candidate's processes were killed: work it left running", stage)
        raise Stop(V.INFRA_ERROR, f"the device was busy for {idle.waited_ms / 1e3:.0f} s {when}, and still busy with "
                                  "the candidate's processes gone: another process's work; the candidate could not be "
                                  f"timed ({who.describe()})", stage)

    def _neighbours_since(self, since: float) -> None:
        """GPU: other processes' work on the device since `since` (a timing round and the gap before it) is
        contention, named; the candidate's own and this evaluator's other workers (ordered by its gate) are not."""
        if not self.gpu or not self.monitor.available:
            return
        who = self._whose(since)
        if who.known and who.others:
            self._contended(who.describe(), tuple(sorted(n.pid for n in who.others)))

    def _lease_warning(self) -> str:
        why = (f"while {', '.join(sorted(self.lease_holders))} timed on it" if self.lease_holders else
               "for other processes' work on it to finish")
        return f"waited {self.lease_wait_s:.1f} s for the device {why} (one timing at a time on a device)"

    def _note_wait(self, waited_s: float, holders: list[str]) -> None:
        """The host lease made this candidate wait for another process's timing: said once, with the total."""
        self.lease_wait_s += waited_s
        self.lease_holders.update(holders)  # none: only turns drained (a local model's, a notebook's): not a timing

    def _contended(self, line: str, key: object = None) -> None:
        """Another process's work on the device: one line per neighbour (the first seen), a few at most."""
        key = line if key is None else key
        if key not in self._contention_keys and len(self.contention) < 4:
            self._contention_keys.add(key)
            self.contention.append(line)

    def _mark_contended(self) -> None:
        """After the timing was summed up: its figures are uncertain, and why."""
        t = self.out.timing
        if t is None:
            return
        t.uncertain = True
        t.contention = list(self.contention)
        t.noise = f"the device was shared: {'; '.join(self.contention[:2])}" if self.contention else t.noise

    def _device_quiet(self, stage: str) -> None:
        """GPU: before the referee writes a timed request's inputs, nothing of the candidate's runs on the device
        (its processes are frozen, but a kernel it launched runs on: one that waits for the inputs to appear would
        compute off the clock)."""
        if not self.gpu:
            return
        since = time.time()
        idle = self._referee(M.RefereeOps.idle, timeout=90.0)
        if not idle.idle or idle.probes > 2:
            self._busy_device(idle, since, stage, "before its inputs were written")

    def _request(self, n: int, variant: str = "task", few: bool = False) -> Request:
        """n calls on distinct input sets and output slots, at random; `few`: among the first two only (the
        verification trials: fresh values at an address seen before, so a cache keyed by it gives stale results)."""
        pool = range(min(2, self.n_slots)) if few else range(self.n_slots)
        slots = random.SystemRandom().sample(pool, n)
        outs = random.SystemRandom().sample(pool, n)
        return Request(slots=slots, outs=outs, seeds=[secrets.randbits(31) for _ in range(n)], variant=variant,
                       fresh=[bool(secrets.randbits(1)) for _ in range(n)])

    def _fill(self, req: Request, poison: bool, keep: bool = False) -> bool:
        """The referee writes the request's inputs (and NaN into its output slots); False: skipped (an
        out-of-distribution trial where the reference is not finite)."""
        filled = self._referee(M.RefereeOps.fill,
                               M.Fill(arena=self.arena, items=[M.FillItem(slot=s, seed=sd, variant=req.variant)
                                                               for s, sd in zip(req.slots, req.seeds)],
                                      poison=list(req.outs) if poison else [], keep=keep, flush=True))
        if filled.skip:
            return False
        req.args = filled.args
        return True

    def _prepare(self, stage: str) -> None:
        """The runner poisons the memory its allocator hands out next; then the referee fills (and flushes), so
        the candidate's calls, like the reference's, start from caches the referee flushed."""
        self._runner(M.RunnerOps.prepare, M.Empty(), stage, 60.0)

    def _staged(self, req: Request) -> list[M.CallItem] | None:
        """The request's calls to stage before its inputs are written: their arguments are the task's fixed
        structure (tensors by index); None once a task's arguments turned out to change from one seed to the
        next (then the calls go to the runner with their inputs written, in one timed request)."""
        if not self.fixed_args:
            return None
        template = self.layout["inputs"]
        return [M.CallItem(slot=s, out=o, fresh=f, args=template) for s, o, f in zip(req.slots, req.outs, req.fresh)]

    def _args_fixed(self, req: Request) -> bool:
        if self.fixed_args and any(a != self.layout["inputs"] for a in req.args):
            self.fixed_args = False
        return self.fixed_args

    def _candidate_request(self, req: Request, stage: str, poison: bool = True,
                           keep: bool = False) -> tuple[float, M.RunClaim] | None:
        """The candidate's calls, timed from outside: staged first (the runner makes their arguments ready while
        the inputs are not there yet), then the referee writes the inputs, then `go`, the request the clock spans.
        The runner's sandbox is frozen throughout, except while it answers. None: the referee skipped these inputs."""
        assert self.runner is not None
        self._prepare(stage)
        staged = self._staged(req)
        if staged is not None:
            self._runner(M.RunnerOps.stage, M.Run(items=staged), stage, 60.0)
        if stage != "verify":
            self._device_quiet(stage)  # nothing of the candidate's may run on the device while its inputs are written
        if not self._fill(req, poison=poison, keep=keep):
            return None
        items = req.items()
        time.sleep(SETTLE_S)
        if staged is not None and self._args_fixed(req):
            ms, claim = self._clocked(lambda: self._runner(M.RunnerOps.go, M.Empty(), stage, self.s.run_timeout,
                                                           clocked=True),
                                      stage, stop_runner=True, who=self.runner)
        else:
            ms, claim = self._clocked(lambda: self._runner(M.RunnerOps.run, M.Run(items=items), stage,
                                                           self.s.run_timeout, clocked=True),
                                      stage, stop_runner=True, who=self.runner)
        claim = claim.expand()
        if len(claim.scalars) != len(items) or len(claim.problems) != len(items):
            raise Stop(V.TAMPERED, f"the candidate's process answered {len(claim.problems)} calls for "
                                   f"{len(items)}", stage)
        return ms, claim

    def _check(self, req: Request, claim: M.RunClaim, picks: list[int], precision: bool = False) -> list[M.CheckResult]:
        items = [M.CheckItem(slot=req.slots[i], out=req.outs[i], seed=req.seeds[i], variant=req.variant,
                             scalars=claim.scalars[i], problems=claim.problems[i]) for i in picks]
        return self._referee(M.RefereeOps.check, M.Check(arena=self.arena, items=items, precision=precision)).results

    # -- verification ------------------------------------------------------------------------------------------------
    def _verify(self) -> None:
        s = self.s
        plan = [("task" if t % 2 == 0 else "ramp") for t in range(s.trials)] + list(OUT_OF_DISTRIBUTION)
        self.on_stage("verify", f"{len(plan)} trials")
        corr = Correctness(planned=len(plan), atol=s.atol, rtol=s.rtol, max_abs_err=0.0, max_rel_err=0.0)
        warnings: list[str] = []
        assert self.runner is not None
        for t, variant in enumerate(plan):
            req = self._request(1, variant, few=True)
            got = self._candidate_request(req, "verify", keep=True)
            if got is None:
                corr.skipped.append(f"{DESCRIBE[variant]}: the reference is not finite there")
                continue
            ms, claim = got
            chk = self._check(req, claim, [0], precision=t == 0)[0]
            self.call_ms.append(ms)
            corr.trials += 1
            if not chk.match:
                corr.failed_trial = t
                corr.where = chk.where
                corr.max_abs_err = chk.max_abs_err
                corr.max_rel_err = chk.max_rel_err  # a mismatch carries no relative figure: none shown
                corr.message = f"trial {t + 1} of {len(plan)} (inputs: {DESCRIBE[variant]}): {chk.message}"
                self.out.correctness = corr
                raise Stop(V.INCORRECT, corr.message, "verify")
            corr.passed += 1
            warnings += chk.warnings
            if (chk.max_abs_err or 0.0) >= (corr.max_abs_err or 0.0):
                corr.max_abs_err, corr.where = chk.max_abs_err or 0.0, chk.where
            corr.max_rel_err = max(corr.max_rel_err or 0.0, chk.max_rel_err or 0.0)
            if chk.decided_by:
                corr.decided_by = chk.decided_by
            self.on_stage("verify", f"trial {t + 1}/{len(plan)} passed")
        ood = [v for v in OUT_OF_DISTRIBUTION if not any(DESCRIBE[v] in x for x in corr.skipped)]
        corr.message = (f"{corr.passed}/{corr.trials} trials passed"
                        + (f" (incl. {', '.join(ood)} inputs)" if ood else "")
                        + f"; max abs error {corr.max_abs_err or 0.0:.2e}" + (f" at {corr.where}" if corr.where else ""))
        if corr.decided_by:
            corr.message += " (a trial beyond fp32's reach judged against the exact float64 answer)"
        self.out.warnings += list(dict.fromkeys(warnings))
        self.out.correctness = corr

    # -- timing ------------------------------------------------------------------------------------------------------
    def _reference_request(self, req: Request, which: str = "eager") -> float:
        """The reference's calls, the same loop in the referee, staged, filled and timed the same way (the runner
        stays stopped)."""
        self._referee(M.RefereeOps.prepare)
        staged = self._staged(req)
        if staged is not None:
            self._referee(M.RefereeOps.stage, M.RunReference(arena=self.arena, items=staged, which=which))
        self._fill(req, poison=False)
        if staged is None or not self._args_fixed(req):
            self._referee(M.RefereeOps.stage, M.RunReference(arena=self.arena, items=req.items(), which=which))
        time.sleep(SETTLE_S)
        ms, _ = self._clocked(lambda: self._referee(M.RefereeOps.go, M.ArenaRef(arena=self.arena),
                                                    timeout=max(300.0, self.s.run_timeout)), "time",
                              stop_runner=True)  # a stopped runner: the same signal as on the candidate's side
        return ms

    def _harness(self, req: Request) -> float:
        """The harness's own cost of a request of these calls: the same loop in the referee with an identity
        "model" (outputs copied into their slots alike), staged and timed the same way. Taken off both sides'
        requests (its smallest measure over the run: the candidate can only look slower for it, never faster)."""
        items = self._staged(req) or req.items()
        self._referee(M.RefereeOps.prepare)
        self._referee(M.RefereeOps.stage, M.RunReference(arena=self.arena, items=items, which="identity"))
        time.sleep(SETTLE_S)
        ms, _ = self._clocked(lambda: self._referee(M.RefereeOps.go, M.ArenaRef(arena=self.arena)), "time",
                              stop_runner=True)
        return ms

    def _calls_per_request(self, harness_ms: float) -> int:
        """Enough calls that the harness's own cost is under OVERHEAD_SHARE of a request; at most the arena's
        input sets, and a request of many calls under MAX_REQUEST_MS."""
        per = statistics.median(self.call_ms) if self.call_ms else 1.0
        per = max(per - harness_ms, 1e-3)
        n = math.ceil(harness_ms / (OVERHEAD_SHARE * per))
        n = min(n, max(1, int(MAX_REQUEST_MS // per)))
        return max(1, min(self.n_slots, n))

    @contextmanager
    def _alone(self) -> Iterator[None]:
        """The device to this candidate alone (the gate's exclusive side; its runner is frozen between requests)."""
        assert self.gate is not None and self.runner is not None
        with self.gate.exclusive(id(self), self.cancel, self._note_wait) as waited:
            self.waited_s += waited
            yield

    def _time(self) -> None:
        s = self.s
        assert self.runner is not None
        self.on_stage("time", "timing candidate and reference")
        with self._alone():
            probe = self._request(1)
            self._fill(probe, poison=False)
            n = self._calls_per_request(min(self._harness(probe) for _ in range(3)))
        self.timing_since = time.time()
        raw_c, raw_e, harness, checked, stopped = self._timed_loop(n)
        h = self.h_ref = min(harness)
        cand = [max(0.0, (x - h) / n) for x in raw_c]
        eager = [max(0.0, (x - h) / n) for x in raw_e]
        compiled: list[float] = []
        if s.time_compiled:
            compiled = [max(0.0, (x - h) / n) for x in self._time_compiled(n, len(eager))]
        t = Timing(device=self.device_label, method="outside-clock" if self.gpu else "outside-cpu-time",
                   candidate=TimingStats(**stats(cand)), eager=TimingStats(**stats(eager)),
                   compiled=TimingStats(**stats(compiled)) if compiled else None,
                   checked_calls=checked, interleaved=True, batch_calls=n, stopped=stopped)
        assert t.candidate is not None and t.eager is not None
        cm = t.candidate.median_ms
        t.speedup_eager = t.eager.median_ms / cm if cm else None
        t.speedup_compiled = t.compiled.median_ms / cm if t.compiled and cm else None
        ci_s = _speedup_ci(cand, eager)
        if ci_s is not None:
            t.speedup_ci_pct = round(ci_s * 100, 2)
            if ci_s > max(SPEEDUP_CI_FLOOR, 3 * s.timing_ci):
                t.uncertain = True
                t.noise = _noise(median_ci(cand), median_ci(eager), self.contention)
        else:
            t.uncertain, t.noise = True, "too few timed requests for an interval"
        if self.contention and not t.uncertain:
            t.uncertain, t.noise = True, _noise(median_ci(cand), median_ci(eager), self.contention)
        if self.contention:
            t.contention = list(self.contention)
        if self.ref.roofline is None:
            self.ref.roofline = self._referee(M.RefereeOps.roofline, M.RooflineAsk(limits=self.limits))
        rl = self.ref.roofline.roofline_ms
        if rl:
            t.roofline_ms = rl
            t.pct_of_limit = rl / cm * 100 if cm else None
        self.out.timing = t
        impossible = faster_than_hardware(cm, self.ref.roofline)
        if impossible:
            raise Stop(V.TAMPERED, impossible, "time")
        self._idle_checks("timing")

    def _timed_loop(self, n: int) -> tuple[list[float], list[float], list[float], int, str]:
        """Rounds of: the candidate's request, the referee's reads of some of its calls, the reference's request,
        the harness's own request; each round alone on the device. Raw request times (ms). Among candidates of
        the same reference timed at once, one whose interval shows it cannot be the best stops early."""
        s = self.s
        assert self.runner is not None
        n_min = max(5, math.ceil(s.timing_min_calls / n))
        n_max = max(2 * n_min, math.ceil(s.timing_calls / n), 20)
        with self._alone():
            for _ in range(max(1, s.warmup_calls // max(1, n) or 1)):  # warm-up requests, not recorded
                self._candidate_request(self._request(n), "time")
        cand: list[float] = []
        eager: list[float] = []
        harness: list[float] = []
        checked = 0
        stopped = ""
        t_start = time.perf_counter()
        while len(cand) < n_max:
            since = time.time()
            with self._alone():
                # who goes first alternates: whatever drifts across a round (clocks, caches after other work on the
                # device between rounds) falls on both sides alike, not always on the first
                ref_first = len(cand) % 2 == 1
                ref = self._request(n)
                if ref_first:
                    eager.append(self._reference_request(ref))
                req = self._request(n)
                ms, claim = self._candidate_request(req, "time")  # type: ignore[misc]
                k = max(1, round(CHECK_SHARE * n)) if n > 1 else (1 if not cand or secrets.randbelow(100) < 30
                                                                  else 0)
                picks = random.SystemRandom().sample(range(n), k) if k else []
                for i, chk in zip(picks, self._check(req, claim, picks) if picks else []):
                    checked += 1
                    if not chk.match:
                        raise Stop(V.INCORRECT, f"timed call {len(cand) * n + i + 1}: {chk.message}", "time")
                cand.append(ms)
                if not ref_first:
                    eager.append(self._reference_request(ref))
                harness.append(self._harness(ref))
            self._neighbours_since(since)
            h = min(harness)
            c = [x - h for x in cand]
            e = [x - h for x in eager]
            if self.race is not None and len(cand) >= RACE_MIN_ROUNDS:
                ci = _speedup_ci(c, e)
                if ci is not None and statistics.median(c) > 0:
                    sp = statistics.median(e) / statistics.median(c)
                    self.race.post(id(self), sp, sp * (1 - ci), sp * (1 + ci))
                    stopped = self.race.hopeless(id(self))
                    if stopped:
                        break
            if time.perf_counter() - t_start > s.timing_budget_s and len(cand) >= 5:
                break
            if len(cand) >= n_min and median_ci(c) <= s.timing_ci and median_ci(e) <= s.timing_ci:
                break
        if os.environ.get("KLSP_DEBUG_TIMING"):
            import sys

            print(f"timing n={n} cand={[round(x, 3) for x in cand]} eager={[round(x, 3) for x in eager]} "
                  f"harness={[round(x, 3) for x in harness]}", file=sys.stderr)
        return cand, eager, harness, checked, stopped

    def _time_compiled(self, n: int, count: int) -> list[float]:
        self.on_stage("time", "timing reference (torch.compile)")
        if not self.ref.compiled and not self.ref.compile_error:
            res = self._referee(M.RefereeOps.compile, timeout=max(300.0, self.s.run_timeout))
            self.ref.compile_error = res.error
            self.ref.compiled = not res.error
        if not self.ref.compiled:
            if self.ref.compile_error:
                self.out.warnings.append(f"torch.compile of the reference failed: {self.ref.compile_error}")
            return []
        assert self.runner is not None
        out: list[float] = []
        for _ in range(count):
            with self._alone():
                out.append(self._reference_request(self._request(n), "compiled"))
        return out

    def _idle_checks(self, after: str) -> None:
        """Nothing the candidate started may still run: no extra process, no busy thread while the runner, let run
        for a moment with nothing asked of it, waits."""
        assert self.runner is not None
        extra = self.runner.extra_processes()
        if extra:
            raise Stop(V.TAMPERED, f"the candidate left {len(extra)} process(es) running after its calls "
                                   f"returned (during {after})", after)
        self._thaw()
        try:
            time.sleep(0.05)
            c0 = self.runner.cpu_seconds()
            time.sleep(IDLE_CPU_WINDOW_S)
            busy = (self.runner.cpu_seconds() - c0) / IDLE_CPU_WINDOW_S
        finally:
            self._freeze(after)
        if busy > IDLE_CPU_LIMIT:
            raise Stop(V.TAMPERED, f"the candidate's process kept working after its calls returned ({busy:.1f} "
                                   f"cores busy while it waited for the next request, after {after})", after)

    # -- what ran ----------------------------------------------------------------------------------------------------
    def _profile(self) -> None:
        self.on_stage("profile", "profiling the candidate")
        assert self.runner is not None
        if self.ref.summary is None:
            raw = self._referee(M.RefereeOps.summary).events
            self.ref.summary = summarise_least(raw)
            self.ref.library_kernels = library_kernels(raw)
        req = self._request(min(PROFILED_CALLS, self.n_slots))
        self._prepare("profile")
        self._device_quiet("profile")
        self._fill(req, poison=True)
        items = req.items()
        sampler = self._sampler(len(items))
        c0 = self.runner.cpu_ns() if sampler is not None else 0
        if sampler is not None:
            sampler.start()
        try:
            ms, claim = self._clocked(lambda: self._runner(M.RunnerOps.profile, M.ProfileCall(items=items), "profile",
                                                           self.s.run_timeout, clocked=True), "profile",
                                      stop_runner=True, who=self.runner, wall=True)  # the profile's events: wall time
        finally:
            if sampler is not None:
                sampler.close()
        tally = None
        if sampler is not None and not self.runner.dead:
            tally = sampler.tally(cpusampler.file_ids(self._own_libraries()), self.runner.cpu_ns() - c0)
        if len(claim.scalars) != len(items) or len(claim.problems) != len(items):
            raise Stop(V.TAMPERED, f"the candidate's process answered {len(claim.problems)} profiled calls for "
                                   f"{len(items)}", "profile")
        results = self._check(req, M.RunClaim(scalars=claim.scalars, problems=claim.problems),
                              list(range(len(items))))
        bad = next((r for r in results if not r.match), None)
        if bad is not None:
            raise Stop(V.INCORRECT, f"profiled call: {bad.message}", "profile")
        ms /= max(1, len(items))
        if tally is None:
            self.out.not_checked.append("kernel(the profile is the candidate process's report; checked against the "
                                        "outside clock)")
        else:
            self.out.not_checked.append("kernel(the split of library work by class is the candidate process's "
                                        "report; checked against the outside clock)")
        if claim.events is None:
            why = f"not checked: no profile of its forward could be taken ({claim.error or 'no profile'})"
            self.out.warnings.append(f"own code: {why}")
            self.out.kernel = KernelCheck(finding=V.KERNEL_NOT_CHECKED, message=why)
            return
        first = (claim.events.get("calls") or [{}])[0] if isinstance(claim.events, dict) else {}
        summ = summarise_least(claim.events, self._own(first))
        wrong = check_against_clock(summ, ms)
        if wrong:
            raise Stop(V.TAMPERED, f"the candidate's profile disagrees with the evaluator's clock: {wrong}", "profile")
        finding, message, figures = kernelcheck.judge(summ, self.ref.summary)
        if tally is not None:
            finding, message, held = kernelcheck.against_samples(finding, message, summ, tally, len(items))
            if held == kernelcheck.SAMPLES_CONTRADICT:
                figures["custom_ms"] = tally.own_ms / max(1, len(items))
            if held == kernelcheck.SAMPLES_UNMEASURED:
                self.out.not_checked.append("kernel(its own code's time: threads started during the call were not "
                                            "sampled)")
            else:
                self.out.checked.append("kernel(its own code's time: the evaluator sampled the sandbox's threads "
                                        "and placed each sample in the binaries it built or elsewhere)")
        st = self._runner(M.RunnerOps.state, M.Empty(), "profile", 30.0)
        if st.ext_errors:
            finding = V.LIBRARY_ONLY
            message = (f"the custom kernel raised {st.ext_errors} time(s) ({st.ext_error[:200]}) and the outputs "
                       f"came from a fallback: {message}")
        self.out.kernel = KernelCheck(**figures, finding=finding, message=f"{message}. {MEASURED}",
                                      kernels=summ.get("kernels", [])[:10], ops=summ.get("ops", [])[:10])
        self.out.checked.append("kernel(its own code: the kernels and operators of the sources and binaries the "
                                "evaluator built)")
        if self.want_profile:
            total = float(summ.get("custom_ms", 0.0)) + sum((summ.get("library_ms") or {}).values()) + \
                float(summ.get("data_ms", 0.0))
            custom = float(summ.get("custom_ms", 0.0))
            ops = [ProfileOp("custom kernels", custom, custom / total if total else 0.0)]
            ops += [ProfileOp(o["name"], o["ms"], o["ms"] / total if total else 0.0) for o in summ.get("ops", [])]
            self.out.profile = Profile(device=self.device_label, total_ms=total, ops=ops)

    def _sampler(self, calls: int) -> cpusampler.Sampler | None:
        """CPU: a sampling of the runner's threads for the profiled call, opened while the sandbox is frozen;
        None where the machine does not allow it (said in the verdict) or on a GPU."""
        global _SAMPLING
        if self.gpu or self.runner is None:
            return None
        if _SAMPLING is None:
            _SAMPLING = cpusampler.unavailable()
        if _SAMPLING:
            self.out.not_checked.append(f"kernel(its own code's time by the evaluator's sampling: {_SAMPLING})")
            return None
        t = self.out.timing
        expect_ms = (t.candidate.median_ms * calls * 4.0) if t is not None and t.candidate.median_ms else 0.0
        period = min(SAMPLE_PERIOD_MAX_NS, max(SAMPLE_PERIOD_MIN_NS, int(expect_ms * 1e6 / SAMPLES_WANTED)))
        sampler = cpusampler.Sampler(self.runner.processes(), period)
        if not sampler.open():
            self.out.not_checked.append(f"kernel(its own code's time by the evaluator's sampling: {sampler.error})")
            return None
        return sampler

    def _own_libraries(self) -> list[str]:
        """The libraries the evaluator built for this candidate (and those its runner says it loaded from the
        build cache, kept to what exists there)."""
        libs = list(self.libraries)
        for e in (self.loaded.extensions if self.loaded else []):  # the runner's claim, kept to what exists
            p = os.path.join(self.cache_dir, str(e.get("key", "")), f"{e.get('name', '')}.so")
            if os.path.isfile(p) and p not in libs and os.path.dirname(os.path.dirname(os.path.realpath(p))) == \
                    os.path.realpath(self.cache_dir):
                libs.append(p)
        return libs

    def _own(self, raw: dict) -> Own:
        """What counts as the candidate's own code: from the sources and libraries the evaluator built."""
        from ...binaries import demangle, device_entries, direct_library_calls, registered_ops

        libs = self._own_libraries()
        exact: set[str] = set()
        if raw.get("on_device"):
            for p in libs:
                names = device_entries(p)
                if names:
                    exact |= {(d[5:] if d.startswith("void ") else d) for d in demangle(names).values()}
        from ...opclass import is_registered_op

        candidates = {o["name"] for o in raw.get("ops") or [] if isinstance(o, dict) and not o.get("ann")
                      and is_registered_op(str(o.get("name", "")))}
        return Own(label_prefix=f"klsp_ext_{self.nonce}::", extensions=set(self.extension_names),
                   kernels=set(self.own_kernels), exact=exact,
                   ops=registered_ops(libs, candidates), not_own=set(self.ref.library_kernels),
                   direct=direct_library_calls(libs))

    def _end_checks(self) -> None:
        """With the runner gone, the reference is timed again: the speedup never rests on a reference that ran
        slower beside the candidate's process (GPU only: on the CPU the reference's clock is its own CPU time)."""
        if not (self.time_it and self.gpu and self.out.timing):
            return
        assert self.runner is not None and self.gate is not None
        since = self.timing_since
        who = self._whose(since)  # before its processes are gone: whose work was on the device while it was timed
        self.gate.unregister(id(self))
        self.runners.release(self.runner, tainted=True)
        self.runner = None
        n = self.out.timing.batch_calls or 1
        alone = []
        for _ in range(5):
            with self.gate.exclusive(id(self), self.cancel, self._note_wait):
                req = self._request(n)
                self._fill(req, poison=False)
                self._referee(M.RefereeOps.stage, M.RunReference(arena=self.arena, items=req.items()))
                t0 = time.perf_counter()
                self._referee(M.RefereeOps.go, M.ArenaRef(arena=self.arena), timeout=max(300.0, self.s.run_timeout))
                idle = self._referee(M.RefereeOps.idle, timeout=90.0)
                alone.append((max(self.ref.worker.reply_at, idle.idle_at) - t0) * 1e3)
        assert self.out.timing.eager is not None
        alone_ms = max(1e-6, (statistics.median(alone) - self.h_ref) / n)
        self.out.timing.eager_alone_ms = alone_ms
        line = against_alone(self.out.timing, alone_ms, who)
        if line and who.known and who.others:  # another process's work: contention, named
            self._contended(line, "end")
            self._mark_contended()
        elif line:
            self.out.timing.noise = line


def against_alone(t: Timing, alone_ms: float, who: devmon.Attribution) -> str:
    """The reference timed beside the candidate (in the rounds) against the reference timed again with nothing of
    the candidate's alive: the second is the evaluator's own figure, which no candidate code can touch. Where the
    reference ran markedly slower beside it, the speedup is taken against the reference alone, with an interval
    that spans both figures, and is uncertain; the returned line says why ("" where they agree). Never a fault of
    the candidate's: its process was frozen outside its clocked requests and the device was seen idle after each,
    so what NVML saw of it is its own timed work; whatever slowed the reference beside it, a slower reference can
    no longer make a speedup."""
    assert t.eager is not None and t.candidate is not None
    beside = t.eager.median_ms
    if beside <= CONTENTION_RATIO * alone_ms + 0.02:
        return ""
    slower = (f"the reference ran {beside / alone_ms:.2f}x slower beside the candidate's process than alone "
              f"({beside:.4g} ms vs {alone_ms:.4g} ms)")
    cm = t.candidate.median_ms
    t.speedup_eager = alone_ms / cm if cm else None
    t.speedup_ci_pct = round(max(t.speedup_ci_pct or 0.0, (beside / alone_ms - 1) * 100), 2)
    t.uncertain = True
    if who.known and who.others:
        return f"{slower}; {who.describe()}"
    if who.known:
        return (f"{slower}, with nothing but the candidate's own timed work seen on the device: the speedup is taken "
                "against the reference alone")
    return f"{slower}: the speedup is taken against the reference alone; {who.describe()}"


def _speedup_ci(cand: list[float], eager: list[float]) -> float | None:
    """Half-width of the speedup's 95 % interval, relative to it (from both medians' intervals)."""
    ci_c, ci_e = median_ci(cand), median_ci(eager)
    if not (math.isfinite(ci_c) and math.isfinite(ci_e)):
        return None
    return math.sqrt(ci_c ** 2 + ci_e ** 2)


def faster_than_hardware(median_ms: float, roofline: M.RooflineReport) -> str:
    """"" or why a call of `median_ms` cannot be: under half the physical floor (the bytes of inputs the reference
    reads, at the device's highest bandwidth). Half: a valid algorithm may skip some input the reference reads (a
    triangular product's zeros), never most of it."""
    floor = roofline.floor_ms
    if not floor or median_ms * PHYSICAL_MARGIN >= floor:
        return ""
    return (f"faster than the hardware allows: {median_ms:.4g} ms per call, but reading its inputs "
            f"({roofline.bytes_read / 1e6:.3g} MB) takes at least {floor:.4g} ms at the device's highest "
            f"bandwidth")


def _noise(ci_c: float, ci_e: float, contention: list[str] | None = None) -> str:
    """Why a speedup is uncertain, by what was measured: other processes' work on the device, the machine's load,
    or, where neither was seen, the spread of the times themselves."""
    spread = f"the medians are known to ±{ci_c * 100:.0f} % (candidate) and ±{ci_e * 100:.0f} % (reference)"
    if contention:
        return f"{spread}; the device was shared: {'; '.join(contention[:2])}"
    try:
        la = os.getloadavg()[0]
        cores = os.cpu_count() or 1
        if la > 0.75 * cores:
            return f"{spread}; the machine was busy (load average {la:.1f} on {cores} cores)"
    except OSError:
        pass
    return f"{spread}: the times varied from one request to the next, with nothing else seen using the machine"


def _phase(op: str, stage: str) -> str:
    what = {"attach": "start-up", "load": "the import of the candidate module", "init": "ModelNew(...)",
            "to_device": "ModelNew.to(device)", "prepare": "a call", "run": "forward",
            "profile": "the profiled forward", "state": "a state check"}.get(op)
    return f"{stage} ({what})" if what and stage in ("verify", "time", "profile") else (what or stage)


def _timing_note(t: Timing | None) -> str:
    if t is None:
        return ""
    c = t.candidate
    note = (f"median {c.median_ms if c else 0:.4g} ms over {c.calls if c else 0} requests of {t.batch_calls or 1} "
            f"call(s) ({t.checked_calls} checked)")
    if t.speedup_eager:
        note += f"; {t.speedup_eager:.2f}x eager"
        if t.uncertain and t.speedup_ci_pct is not None:
            note += f" ± {t.speedup_ci_pct:.0f} %"
    if t.speedup_compiled:
        note += f", {t.speedup_compiled:.2f}x torch.compile"
    return note
