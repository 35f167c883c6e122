"""The device stage's session for one candidate: the referee (trusted) and a fresh runner (sandboxed), the
arena they share, how each is asked, the outside clock, and whose work is on the device. The steps are in
load.py, verify.py, time.py and kernel.py; stage.py runs them in order."""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import re
import secrets
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ... import messages as M
from ... import verdict as V
from ...processes import devmon, memory, proctree
from ...processes.gate import DeviceGate, Race
from ...processes.handle import Worker, WorkerError, WorkerFailed
from ...processes.members import CpuTime, FreezeError
from ...processes.pool import Pool
from ...processes.referees import RefereeHandle
from ...settings import EvalSettings
from ...verdict import Correctness, KernelCheck, Profile, Timing

OnStage = Callable[[str, str], None]

_CUDA_FATAL = re.compile(
    r"illegal memory access|illegal address|unspecified launch failure|misaligned address|illegal instruction"
    r"|device-side assert|cudaErrorLaunchFailure|AcceleratorError|CUDA error: an? |uncorrectable ECC", re.IGNORECASE)
_OOM = memory.OUT_OF_MEMORY

# before every timed request, its worker has been idle this long (the runner always is, after the referee's fill;
# the referee would not be, and a process woken from a wait meets the scheduler differently from a busy one)
_KEYS = itertools.count(1)  # device sessions, numbered in this process: the gate's and the race's keys
SETTLE_S = 0.002
ARENA_OPS = ("fill", "check", "stage", "go")  # referee requests that touch the memory a runner shares
QUIET_WAIT_MS = 20.0  # the device busy longer than this when it should be idle: whose work was it?
# The wait for the device to go idle after a request (or before inputs are written): up to IDLE_WAIT_S (work the
# candidate left running is on its clock until then, `tampered` after). Where NVML says whose work is on the device,
# it is asked every IDLE_LOOK_S of the wait: another process's work with nothing of the candidate's since
# LATE_MARGIN_S into the wait (a sample of NVML's can cover work from just before it) is contention, and the wait
# ends there (a training job or a notebook beside the oracle keeps the device from ever being idle). The request's
# clock runs to that moment: no figure on such a device can be short, none is quoted as sure.
IDLE_WAIT_S = M.IDLE_BOUND_S
IDLE_LOOK_S = 3.0
LATE_MARGIN_S = 1.0
# referee requests asked again when the referee ran out of device memory (neither clocked nor changing anything the
# candidate sees: the inputs and the comparison come again from their seeds), after waiting for the memory up to
# REFEREE_MEMORY_WAIT_S: another process's allocation between this candidate's admission and its check is contention
REFEREE_RETRY_OPS = ("fill", "check")
REFEREE_MEMORY_WAIT_S = 60.0
OOM_SETTLE_S = 5.0  # how long a killed candidate's device memory is waited for, to see what it held


class Stop(Exception):
    """Ends the device stage with a status and a message (the stage that failed is `stage`)."""

    def __init__(self, status: str, message: str, stage: str, detail: str = "", log: str = "",
                 others_memory: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.stage, self.detail, self.log = status, message, stage, detail, log
        self.others_memory = others_memory  # the candidate ran out of device memory other processes held


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
    others_memory: bool = False  # ended by an out-of-memory that other processes' memory explains (evaluate again)


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


class DeviceSession:
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
        self.layout: M.ArenaLayout | None = None  # of this candidate's own arena (set when it is opened)
        self.fixed_args = True  # the task's arguments have the same structure for every seed (calls can be staged)
        self.n_slots = 1
        self.arena_slots = 1  # input sets its arena was opened with (known before admission)
        self.arena = 0
        self.gate: DeviceGate | None = None
        self.race: Race | None = None
        # its key in the gate and its referee's race (never reused: the race keeps a passed candidate's interval a
        # while after its session is gone, where an id() could name a later session)
        self.key = next(_KEYS)
        self.nonce = secrets.token_hex(6)
        self.loaded: M.Loaded | None = None
        self.call_ms: list[float] = []  # outside-clock times of single verification calls (to size requests)
        self.start_s = 0.0  # waiting for this candidate's runner to be ready
        self.waited_s = 0.0  # waiting for the device (other candidates' turns)
        self.h_ref = 0.0
        self.compiled_ms: list[float] = []  # torch.compile of the reference timed by this session, per call
        # False: a reference whose torch.compile has not ended is not waited for (`EvalSettings.compiled_wait`; the
        # evaluator sets it where the compile is begun ahead, by someone other than this session)
        self.compiled_wait = True
        self.compiled_pending = False  # so its torch.compile figure was left out
        self.time_parts: list[tuple[str, float]] = []  # where the time stage's seconds went (`_timing_note`)
        # where verification's seconds went (`verify.verify_note`): trial 1's run and check, the others' runs and
        # checks, how many others
        self.verify_parts: list = []
        self.slower_beside = False  # the reference ran markedly slower beside the candidate than alone (GPU)
        self.frozen_cpu: CpuTime | None = None  # the sandbox's CPU time when it was last frozen (CPU)
        # the part of the last clocked request's CPU time that processes which ended unseen used (ms; known to the
        # clock tick only: CpuTime.unseen_ns)
        self.coarse_ms = 0.0
        self.coarse_total_ms = 0.0  # over the candidate's timed requests
        self.free_at_start: int | None = None  # device memory free before this candidate was imported (GPU)
        self.admitted = False  # holds its task's device memory in its device's ledger (GPU; released at the end)
        self.hold: memory.Hold | None = None  # what it holds there
        self.timing_since = 0.0  # wall clock when its timing began (whose work was on the device since)
        self.lease_wait_s = 0.0  # waited for other processes' timing on this device (the host lease)
        self.lease_holders: set[str] = set()
        self.contention: list[str] = []  # other processes' work on the device while this candidate was timed
        self.ref_stopped = False  # the referee stopped after answering a clocked request (woken when the clock ends)
        self.ref_locked = False  # this session holds the referee's lock for a clocked request
        # KLSP_DEBUG_TIMING: each clocked request's span in its parts (printed after the timing rounds)
        self.phases: list[dict[str, float | str]] | None = [] if os.environ.get("KLSP_DEBUG_TIMING") else None
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
    never_idle: bool = False  # a wait for the device to go idle was ended by others' work: later looks come sooner
    # the device-idle probe of timed requests from a process of its own (processes/prober.py), None: the referee's
    prober: Callable[..., M.IdleReport | None] | None = None
    # let this process's kept referees that nobody uses go (their memory for a candidate that waits for some)
    shed_referees: Callable[[], None] | None = None
    # this evaluation's turn to take its referee and its memory admission (GPU), ended once it is admitted
    turn: memory.Turn | None = None
    # while it waits for memory another process's earlier wait also waits for, its referee goes (`let_referee_go`:
    # the bytes it gave back, 0 when it cannot go now) and comes back once it is admitted (`take_referee`)
    let_referee_go: Callable[[RefereeHandle], int] | None = None
    take_referee: Callable[[], RefereeHandle] | None = None
    ref_held = True  # `ref` is held for this evaluation (its evaluator is done with it when the stage ends)

    # -- requests ------------------------------------------------------------------------------------------------
    def _referee(self, op: M.Op[M.Req, M.Rep], req: M.Req | None = None, timeout: float | None = None) -> M.Rep:
        """One referee request (candidates side by side take turns: the referee answers one at a time)."""
        name = op.name
        if self.ref_stopped:  # stopped after answering a clocked request, and asked again before the clock ended
            signal_pid(self.ref.worker.pid, signal.SIGCONT)
            self.ref_stopped = False
        mine = not self.ref_locked  # a clocked reference request holds the lock from before its clock starts
        if mine:
            self._locked(self.ref.lock)
        held = mine  # this request holds the lock it took (given back during a wait for memory)
        until = 0.0  # when the wait for memory ends, from the first out-of-memory
        try:
            while True:
                try:
                    res, fds = self.ref.worker.ask(op, req or M.Empty(), timeout=timeout or self.s.run_timeout,
                                                   cancel=self.cancel)
                    break
                except WorkerFailed as e:
                    if not (self.gpu and name in REFEREE_RETRY_OPS and _OOM.search(str(e.failed.error or ""))):
                        raise
                    until = until or time.monotonic() + REFEREE_MEMORY_WAIT_S
                    if time.monotonic() >= until:
                        raise Stop(*self._referee_out_of_memory(name, e.failed)) from None
                    if not mine:  # a clocked request's turn: kept through the wait
                        self._wait_for_referee_memory(until, self._free_now)
                        continue
                    # the referee's turn goes back meanwhile: another candidate of this reference may need it to
                    # give its arena back (the very memory waited for), and nothing of this request has run
                    self.ref.lock.release()
                    held = False
                    self._wait_for_referee_memory(until, self._free_unlocked)
                    self._locked(self.ref.lock)
                    held = True
        except WorkerError as e:
            if e.kind == "cancelled" or self.ref.closed:  # closed by its evaluator: we killed it
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
            if held:
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
            if not e.candidates:
                raise Stop(V.INFRA_ERROR, f"the candidate's processes could not be stopped between requests ({e}): "
                           "the host's doing, not the candidate's", stage) from None
            raise Stop(V.TAMPERED, f"the candidate's processes would not stay stopped between requests ({e})",
                       stage) from None
        if not self.gpu:
            self.runner.members.count_from_now()  # once, while every member is stopped
            self.frozen_cpu = self.runner.cpu()

    def _thaw(self, pids: list[int] | None = None, cpu_now: CpuTime | None = None) -> CpuTime:
        """Let the runner's sandbox run again; returns the CPU time it used while frozen (nothing, unless a process
        of it escaped the freeze, or one that was stopped ended and was reaped meanwhile: then the clocked request
        that follows is charged with it). `cpu_now`: its CPU time read just before (the clock's start), so it is not
        read twice."""
        assert self.runner is not None
        off = CpuTime()
        if not self.gpu and self.frozen_cpu is not None:
            now = self.runner.cpu() if cpu_now is None else cpu_now
            d = now - self.frozen_cpu
            off = d if d.total_ns > 0 else CpuTime()
        self.frozen_cpu = None
        self.runner.thaw(pids)
        return off

    def _failure(self, f: M.Failed, op: str, stage: str) -> Stop:
        """A runner's failure report is a claim too: nothing it says makes a failure ours (infra_error), except
        memory that other processes held (which the referee measured)."""
        text = str(f.text or f.error or "failed")
        detail = str(f.detail or "")
        first = first_line(text, "failed")
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
                            stage, detail, others_memory=True)
            return Stop(V.RUNTIME_ERROR, f"out of memory: {first} (during {where})", stage, detail)
        if f.kind != "exception":
            return Stop(V.RUNTIME_ERROR, f"the candidate's process failed during {where}: {first}", stage,
                        detail or str(f.traceback))
        return Stop(V.RUNTIME_ERROR, f"{first} (during {where})", stage, detail)

    def _need_bytes(self) -> int:
        """Device memory a candidate of this task needs beyond what its referee already holds, from the reference's
        layout: its arena (the input sets the referee holds for it), twice a call's outputs for its own use (its
        output and a temporary of that size; it reads its inputs in the arena), 1 GB for its context and libraries,
        and what the referee's check of its output takes (`_check_bytes`). For a 6.4 GB task (one input set in its
        arena) that is 3.2x (inputs + outputs), where a whole verdict of it peaked at 3.2-3.6x on an H200, its
        referee's own share included. (With the candidate's share at twice the inputs and four times the outputs,
        5.2x, a 6 GB task fit an 80 GB card only with nothing else on it, its referee loaded: beside other work it
        waited out its bound every time.)"""
        info = self.ref.info
        return (self.arena_slots * info.set_bytes + 2 * info.out_bytes + (1 << 30) + self._check_bytes())

    def _check_bytes(self) -> int:
        """What the referee allocates to check one call's output: the call's inputs made again from their seed,
        the reference's output, and the comparison's working pieces (chunks of at most 1 GB)."""
        info = self.ref.info
        return info.in_bytes + info.out_bytes + min(info.out_bytes, 1 << 30)

    def _wait_for_referee_memory(self, until: float, free: Callable[[], int]) -> None:
        """The referee ran out of device memory: this process's idle referees go, the want is posted on the
        device's host-wide board (other processes let theirs go), and it waits until the check's memory is free or
        memory of this process went back, up to `until`. `free`: the device's free memory, asked as the caller's
        hold of the referee's turn allows."""
        memory.ledger(self.device).wait_free(("referee", id(self)), self._check_bytes(), free,
                                             until - time.monotonic(), self.shed_referees, self.cancel,
                                             running=True)
        if self.cancel is not None and self.cancel.is_set():
            raise Stop(V.CANCELLED, "cancelled", "verify")

    def _nvml_free(self) -> int | None:
        """The device's free memory by NVML (never waits for the referee), None where it cannot tell."""
        got = self.monitor.free_bytes() if self.monitor.available else None
        return got[0] if got is not None else None

    def _free_now(self) -> int:
        """The device's free memory: NVML's where it can tell, else the referee's (asked directly: its lock is
        held)."""
        free = self._nvml_free()
        if free is not None:
            return free
        return self.ref.worker.ask(M.RefereeOps.memory, M.Empty(), timeout=30.0, cancel=self.cancel)[0].free

    def _free_unlocked(self) -> int:
        """`_free_now` for a caller that does not hold the referee's lock (it is taken for the referee's answer
        where NVML cannot tell: one request at a time)."""
        free = self._nvml_free()
        if free is not None:
            return free
        self._locked(self.ref.lock)
        try:
            return self._free_now()
        finally:
            self.ref.lock.release()

    def _referee_out_of_memory(self, name: str, failed: M.Failed) -> tuple[str, str, str, str]:
        """(status, message, stage, detail) of a referee still out of memory after the wait: the candidate's when
        its own processes hold more than its task needs and that excess is what the referee lacks (a candidate
        must not turn a wrong answer into our failure by filling the device); else other processes' (named),
        never the candidate's."""
        self.ref.retired = True
        cand = set(self.runner.processes()) if self.runner is not None and not self.runner.dead else set()
        mine = devmon.memory_of(self.monitor, cand) if cand else 0
        need, check = self._need_bytes(), self._check_bytes()
        try:
            free = self._free_now()
        except (WorkerError, WorkerFailed):
            free = 0
        first = first_line(failed.error, "out of memory")
        gb = 2 ** 30
        if mine > need and free + (mine - need) >= check:
            return (V.RUNTIME_ERROR, f"out of memory: the candidate's processes held {mine / gb:.1f} GB of the "
                    f"device (its task needs about {need / gb:.1f} GB), leaving the referee too little to "
                    f"{name} its output: {first}", name, str(failed.traceback or ""))
        others = [n for n in devmon.neighbours(self.monitor, {self.ref.worker.pid}) if n.pid not in cand
                  and n.memory > 0]
        who = f" (other processes: {', '.join(map(str, others[:3]))})" if others else ""
        return (V.INFRA_ERROR, f"the referee ran out of device memory ({name}) and {REFEREE_MEMORY_WAIT_S:.0f} s of "
                f"waiting did not free {check / gb:.1f} GB{who}: not the candidate's fault; {first}",
                name, str(failed.traceback or ""))

    def _memory_held_by_others(self) -> str:
        """On a GPU: if memory that others held explains the out-of-memory, say so. Before the candidate was
        imported (measured then, so its own allocations never count), or when it ran out: what NVML lists for
        processes that are neither the candidate's sandbox nor this task's referee (evaluations side by side that
        were admitted at the same time, a notebook that grew since), where the rest is less than the task needs."""
        free = self.free_at_start
        total = self.ref.info.total_bytes
        if not total or free is None:
            return ""
        need = self._need_bytes()
        if need > total:
            return (f"this task needs about {need / 2**30:.1f} GB of device memory and the device has "
                    f"{total / 2**30:.1f} GB in all")
        if free < need:
            held = devmon.neighbours(self.monitor, {self.ref.worker.pid})
            who = f": {', '.join(map(str, held[:3]))}" if held else ""
            return (f"only {free / 2**30:.1f} GB of {total / 2**30:.1f} GB were free when the candidate started "
                    f"(other processes held the rest{who}; this task needs about {need / 2**30:.1f} GB)")
        cand = set(self.runner.processes()) if self.runner is not None else set()
        others = [n for n in devmon.neighbours(self.monitor, {self.ref.worker.pid})
                  if n.pid not in cand and n.memory > 0]
        taken = sum(n.memory for n in others)
        if others and total - taken < need:
            return (f"other processes held {taken / 2**30:.1f} GB of {total / 2**30:.1f} GB when it ran out "
                    f"({', '.join(map(str, others[:3]))}; this task needs about {need / 2**30:.1f} GB)")
        back = self._memory_back_after_kill()
        if back is not None:
            freed, free_after = back
            if freed <= need and free_after < need:
                return (f"with the candidate's processes killed (they held {freed / 2**30:.1f} GB, within its "
                        f"task's {need / 2**30:.1f} GB) only {free_after / 2**30:.1f} GB of {total / 2**30:.1f} GB "
                        "were free: other processes held the rest")
        return ""

    def _kill_runner(self) -> None:
        """The candidate's runner goes: its whole sandbox is killed, and its device contexts with it."""
        assert self.runner is not None
        self.runners.release(self.runner, tainted=True)
        self.runner = None

    def _memory_back_after_kill(self) -> tuple[int, int] | None:
        """(what came back, free memory then) when the candidate's sandbox is killed: the device's free memory read
        by NVML before and after (the evaluator's own reading, where no per-process view says what the candidate's
        processes held; a killed process's memory takes a moment to go back). None where NVML cannot tell free
        memory; the runner is gone either way (an out-of-memory ends the candidate's run)."""
        before = self._nvml_free()
        if before is None or self.runner is None or self.runner.dead:
            return None
        self._kill_runner()
        best, last, end = before, -1, time.monotonic() + OOM_SETTLE_S
        while time.monotonic() < end:
            time.sleep(0.1)
            now = self._nvml_free()
            if now is None:
                break
            best = max(best, now)
            if now > before and now == last:  # came back and settled
                break
            last = now
        return max(0, best - before), best

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

    # -- the outside clock -----------------------------------------------------------------------------------------
    def _clocked(self, fn: Callable[[], Any], stage: str, stop_runner: bool, who: Worker | None = None,
                 wall: bool = False, what: str = "") -> tuple[float, Any]:
        """(ms, result): the evaluator's clock from sending the request `fn` makes to `who` until its answer
        arrived and, on a GPU, until the device was idle again by the prober's probe (its clock is this one:
        CLOCK_MONOTONIC). The candidate's sandbox is thawed just after the clock starts and stopped the moment its
        answer's bytes are whole (`Worker.at_answer`: before anything decodes or reads it, so a long reply and a
        short one end alike; on a GPU before the probe, so that nothing more is queued), then frozen whole.
        `stop_runner` (the reference's requests): the same signals to the runner, already stopped. `wall`: on the
        CPU too, the wall time from sending to the answer (the bound of anything measured in wall time inside the
        request, such as a profile's events: the worker's CPU time is less than that whenever other processes
        share the cores)."""
        mine = who is not None and who is self.runner
        who = who or self.ref.worker
        # listed before the clock starts, on both sides alike (none once the runner is gone: the reference alone)
        pids = self.runner.processes() if self.runner is not None else []
        # the referee's turn taken before the clock starts (the reference's requests, and both sides' timed ones):
        # another candidate's request to it (a check, a fill) is never inside a timed request, nor on the device
        # while one runs; a candidate's verification calls leave it to others
        if not mine or stage == "time":
            self._locked(self.ref.lock)
            self.ref_locked = True
        try:
            if self.gpu:  # the prober's context the last on the device: both sides' requests switch from it and back
                self._probe()
            return self._clocked_now(fn, stage, stop_runner, who, mine, pids, wall, what)
        finally:
            if self.ref_locked:
                self.ref_locked = False
                self.ref.lock.release()

    def _clocked_now(self, fn: Callable[[], Any], stage: str, stop_runner: bool, who: Worker, mine: bool,
                     pids: list[int], wall: bool, what: str) -> tuple[float, Any]:
        # the referee stopped too, so that both sides' requests begin by waking a stopped process and end by
        # stopping the process that answered (measured: the signals' cost differs between a running process and a
        # stopped one; on the CPU, the CPU time its threads spend stopping and waking is on both sides' clocks)
        self.coarse_ms = 0.0
        stopped = not mine and stop_and_wait(who.pid)
        c0 = who.cpu() if not self.gpu else CpuTime()
        t0 = time.perf_counter()
        woke = stopped and signal_pid(who.pid, signal.SIGCONT)
        off = self._thaw(pids, c0 if not self.gpu else None) if mine else CpuTime()
        t_woken = time.perf_counter()
        c1: CpuTime | None = None
        end: dict[str, Any] = {}

        def at_answer() -> None:
            # the moment the answer's bytes are whole, before anything decodes them (a long claim and a short
            # one cost the same), in the same order on both sides: the process that answered stopped, the
            # runner's listed members signalled (already stopped on the reference's side: the same cost), then
            # the device's idle probe (nothing more can be queued)
            try:
                if woke and (self.prober is not None or not self.gpu):  # woken after the clock
                    self.ref_stopped = signal_pid(who.pid, signal.SIGSTOP)
                if (mine or stop_runner) and self.runner is not None:
                    self.runner.stop_now(pids)
                end["stopped"] = time.perf_counter()
                if self.gpu and self.prober is not None:
                    end["idle"] = self.prober(self.cancel, self._idle_bound())
            except Exception as e:  # noqa: BLE001  (raised below, outside the worker's reading of its answer)
                end["error"] = e

        who.at_answer = at_answer
        try:
            res = fn()
            who.at_answer = None
            if "error" in end:
                raise end["error"]
            t_reply = who.reply_at
            if not self.gpu and self.ref_stopped:  # its CPU time once stopped, as the runner's once frozen
                wait_stopped(who.pid)
                c1 = who.cpu()
            if self.gpu:
                t_stopped = end.get("stopped", t_reply)
                since = time.time() - (time.perf_counter() - t0)
                idle = end.get("idle") or self._probe()
                if not idle.idle or idle.probes > 2:
                    idle = self._busy_device(idle, since, stage, "after the candidate's request returned" if mine
                                             else "after the reference's request returned", on_clock=True)
                if self.phases is not None:
                    self.phases.append(_phases(what or ("candidate" if mine else "reference"), who.stamps,
                                               (t0, t_woken, t_reply, t_stopped, idle.idle_at), len(pids)))
                return (max(t_reply, idle.idle_at) - t0) * 1e3, res
        finally:
            who.at_answer = None
            if (stopped and not woke) or self.ref_stopped:  # the referee runs again once the clock has stopped
                signal_pid(who.pid, signal.SIGCONT)
                self.ref_stopped = False
            if mine and self.runner is not None and not self.runner.dead:
                self._freeze(stage)  # every member seen stopped (a process it started meanwhile included)
        if wall:
            return (t_reply - t0) * 1e3, res
        # the CPU's clock: the CPU time of the whole sandbox (of the referee for the reference's requests), which
        # another process's load does not inflate; whatever the sandbox did while frozen (nothing, unless a process
        # escaped the freeze) is charged to this request too. `coarse_ms`: the part of it that processes which ended
        # unseen used, known to the clock tick only
        used = ((c1 if c1 is not None else who.cpu()) - c0).plus(off)
        self.coarse_ms = used.unseen_ns / 1e6
        cpu_ns = used.total_ns
        if self.phases is not None:
            self.phases.append(_phases(what or ("candidate" if mine else "reference"), who.stamps,
                                       (t0, t_woken, t_reply, t_reply, t_reply), len(pids), cpu_ns / 1e9))
        return cpu_ns / 1e6, res

    def _probe(self, bound_s: float | None = None) -> M.IdleReport:
        """Once the device is idle (or "not idle" after `bound_s`): by the prober, a process that does neither
        side's calls (both pay the GPU's switch back to it alike), or by the referee where there is none."""
        bound_s = self._idle_bound() if bound_s is None else bound_s
        if self.prober is not None:
            rep = self.prober(self.cancel, bound_s)
            if rep is not None:
                return rep
        return self._referee_idle(bound_s)

    def _referee_idle(self, bound_s: float) -> M.IdleReport:
        """The referee's own probe: the device idle, or "not idle" after `bound_s`."""
        return self._referee(M.RefereeOps.idle, M.IdleAsk(bound_s=bound_s), timeout=bound_s + 30.0)

    def _idle_bound(self) -> float:
        """How long one probe waits for the device to go idle: a look at whose work it is every IDLE_LOOK_S where
        NVML can tell, else the whole wait."""
        if not self.monitor.available:
            return IDLE_WAIT_S
        return LATE_MARGIN_S + 0.5 if self.never_idle else IDLE_LOOK_S  # (a neighbour seen to keep it busy: sooner)

    def _wait_out(self, idle: M.IdleReport, when: str) -> tuple[M.IdleReport, devmon.Attribution | None]:
        """The device not idle after a probe: probes again until it is, or until IDLE_WAIT_S in all, or until NVML
        shows another process's work keeping it busy and nothing of the candidate's since LATE_MARGIN_S into the
        wait (contention: named, and the wait ends; its `idle_at` is then the moment it ended, so the clocked
        request spans the whole wait). Returns the last report (its `waited_ms` the whole wait) and whose work was
        on the device in the wait's later part (None: idle in the end, or nobody can tell)."""
        start = time.time() - idle.waited_ms / 1e3
        while not idle.idle:
            late = self._whose(max(start + LATE_MARGIN_S, time.time() - 2 * IDLE_LOOK_S), ours_too=True)
            if late.known and late.others and not late.candidate:
                ours = self.our_pids() if self.our_pids is not None else set()
                theirs = [n for n in late.others if n.pid not in ours]
                what = (dataclasses.replace(late, others=theirs).describe() if theirs else  # else: a sibling's
                        f"work of this evaluation's other candidates (pids {', '.join(str(n.pid) for n in late.others)})")
                self._contended(f"the device was never idle for {idle.waited_ms / 1e3:.1f} s {when}: {what}",
                                tuple(sorted(n.pid for n in late.others)))
                self.never_idle = True
                # the clock ends here, not at the answer: work the candidate deferred past its answer and finished
                # before NVML's view begins would be off the clock (both sides' requests pay this wait alike)
                return dataclasses.replace(idle, idle_at=time.perf_counter()), late
            left = IDLE_WAIT_S - idle.waited_ms / 1e3
            if left <= 0:
                return idle, late
            more = self._probe(min(self._idle_bound(), left))
            idle = dataclasses.replace(more, probes=idle.probes + more.probes,
                                       waited_ms=idle.waited_ms + more.waited_ms)
        return idle, None

    # -- whose work is on the device -------------------------------------------------------------------------------
    def _whose(self, since: float, ours_too: bool = False) -> devmon.Attribution:
        """Who kept the device busy since `since` (wall clock): the candidate's sandbox, other processes, or unknown.
        `ours_too`: this evaluator's other workers (other candidates verifying beside this one) among the others."""
        cand = set(self.runner.processes()) if self.runner is not None else set()
        who = devmon.attribute(self.monitor, cand, {self.ref.worker.pid}, since)
        if who.others and self.our_pids is not None and not ours_too:  # its gate orders them
            ours = self.our_pids()
            who.others = [n for n in who.others if n.pid not in ours]
        return who

    def _busy_device(self, idle: M.IdleReport, since: float, stage: str, when: str,
                     on_clock: bool = False) -> M.IdleReport:
        """The device was not idle at once after a request (or before inputs were written): the candidate's work is
        the candidate's (`tampered` when it is still running); anyone else's is contention, named and kept to make
        the figures uncertain, never a refusal: a device another process never leaves idle ends the wait as soon as
        NVML shows nothing of the candidate's in it (the request's figure then spans the wait, and is uncertain).
        Unknown whose (no per-process view) and still busy after the wait: the candidate's processes are killed,
        and the device going idle then says it was theirs. `on_clock`: the wait was inside a clocked request's span
        (the candidate's work there is on its clock, not a fault). Returns the wait's last report."""
        idle, late = self._wait_out(idle, when)
        who = self._whose(since)
        if late is not None and late.known and late.others and not late.candidate:
            return idle  # contention, named by the wait
        if late is not None and late.known and late.candidate:
            raise Stop(V.TAMPERED, f"the device was still busy {idle.waited_ms / 1e3:.0f} s {when}: "
                                   f"{late.describe()}", stage)
        if not on_clock and who.known and who.candidate and not who.others and idle.waited_ms > QUIET_WAIT_MS:
            raise Stop(V.TAMPERED, f"work of the candidate's ran on the device {when} "
                                   f"({idle.waited_ms:.0f} ms): {who.describe()}", stage)
        if who.others:
            self._contended(who.describe(), tuple(sorted(n.pid for n in who.others)))
        if idle.idle:
            if not who.known and idle.waited_ms > QUIET_WAIT_MS:
                self._contended(f"the device was busy for {idle.waited_ms:.0f} ms {when}; {who.describe()}",
                                "unknown")
            return idle
        if who.known:  # busy for the whole wait, and NVML saw no process's work in its later part
            raise Stop(V.INFRA_ERROR, f"the device was busy for {idle.waited_ms / 1e3:.0f} s {when} with no "
                                      f"process's work on it that NVML could see; the candidate could not be timed "
                                      f"({who.describe()})", stage)
        if self.runner is not None:
            self._kill_runner()
            after = self._referee_idle(IDLE_WAIT_S)
            if after.idle and after.waited_ms < 5e3:
                raise Stop(V.TAMPERED, f"the device was still busy {idle.waited_ms / 1e3:.0f} s {when}, and idle as "
                                       "soon as the candidate's processes were killed: work it left running", stage)
        raise Stop(V.INFRA_ERROR, f"the device was busy for {idle.waited_ms / 1e3:.0f} s {when}, and still busy with "
                                  "the candidate's processes gone: another process's work; the candidate could not be "
                                  f"timed ({who.describe()})", stage)

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

    def _device_quiet(self, stage: str) -> None:
        """GPU: before the referee writes a timed request's inputs, nothing of the candidate's runs on the device
        (its processes are frozen, but a kernel it launched runs on: one that waits for the inputs to appear would
        compute off the clock)."""
        if not self.gpu:
            return
        since = time.time()
        idle = self._referee_idle(self._idle_bound())
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
        assert self.layout is not None
        template = self.layout.inputs
        return [M.CallItem(slot=s, out=o, fresh=f, args=template) for s, o, f in zip(req.slots, req.outs, req.fresh)]

    def _args_fixed(self, req: Request) -> bool:
        if self.fixed_args and self.layout is not None and any(a != self.layout.inputs for a in req.args):
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


def _phases(what: str, stamps: Any, marks: tuple[float, ...], n_pids: int,
            cpu_s: float | None = None) -> dict[str, float | str]:
    """A clocked request's span in parts, µs (a diagnostic): waking (the signals), delivery (to the worker taking
    the request, by its own claim), work, the way back, stopping, the idle probe; on the CPU the clock's CPU time
    beside the CPU time the worker's own process says it spent between taking the request and answering; the
    page faults (minor, major) and involuntary context switches it counted meanwhile."""
    t0, woken, reply, stopped, idle_at = marks
    ok = isinstance(stamps, list) and len(stamps) == 7
    got, done, c_in, c_done, faults, major, preempted = stamps if ok else (woken, reply, 0.0, 0.0, 0, 0, 0)
    us = {"wake": woken - t0, "deliver": got - woken, "work": done - got, "back": reply - done,
          "stop": stopped - reply, "probe": max(reply, idle_at) - stopped, "total": max(reply, idle_at) - t0}
    if cpu_s is not None:
        us |= {"cpu_clock": cpu_s, "cpu_inside": c_done - c_in}
    counts = {"faults": float(faults), "major_faults": float(major), "preempted": float(preempted)}
    return {"what": what, "pids": float(n_pids), **{k: round(v * 1e6, 1) for k, v in us.items()}, **counts}


def phases_table(rows: list[dict[str, float | str]]) -> str:
    """Medians of each part per side, one line each, and a second line of each part's spread (standard deviation,
    µs): which part of a request carries the clock's jitter."""
    out = []
    for what in dict.fromkeys(str(r["what"]) for r in rows):
        mine = [r for r in rows if r["what"] == what]
        parts = [k for k in mine[0] if k != "what"]
        med = {k: statistics.median(float(r[k]) for r in mine) for k in parts}
        out.append(f"phases {what} (n={len(mine)}, µs medians): " + " ".join(f"{k}={v:.0f}" for k, v in med.items()))
        if len(mine) > 1:
            sd = {k: statistics.stdev(float(r[k]) for r in mine) for k in parts}
            out.append(f"spread {what} (µs sd): " + " ".join(f"{k}={v:.0f}" for k, v in sd.items()))
    return "\n".join(out)


def signal_pid(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


def stop_and_wait(pid: int, limit_s: float = 1.0) -> bool:
    """SIGSTOP to a trusted worker waiting for its next request, and wait until it is stopped (outside the clock).
    False: it could not be stopped (nothing to wake)."""
    if not signal_pid(pid, signal.SIGSTOP):
        return False
    wait_stopped(pid, limit_s)
    return True


def wait_stopped(pid: int, limit_s: float = 1.0) -> None:
    """Until a process sent SIGSTOP is seen stopped (or gone, or `limit_s` passed)."""
    end = time.perf_counter() + limit_s
    while time.perf_counter() < end:
        st = proctree.stat(pid)
        if st is None:
            break
        if st[0] in ("T", "t"):
            return
        time.sleep(0.0002)


def first_line(text: object, default: str, limit: int = 300) -> str:
    """A failure's first line, capped at `limit` characters (`default` where it has no text)."""
    s = str(text or "").strip()
    return s.splitlines()[0][:limit] if s else default


def _phase(op: str, stage: str) -> str:
    what = {"attach": "start-up", "load": "the import of the candidate module", "init": "ModelNew(...)",
            "to_device": "ModelNew.to(device)", "prepare": "a call", "run": "forward",
            "profile": "the profiled forward", "state": "a state check"}.get(op)
    return f"{stage} ({what})" if what and stage in ("verify", "time", "profile") else (what or stage)
