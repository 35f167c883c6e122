"""Evaluator side of the device stage for one candidate: the referee (trusted) and a fresh runner (sandboxed).

The runner is the candidate: whatever it sends is a claim. Every figure of the verdict is measured here or by the
referee, or checked against what was:

1. load: the runner maps the referee's arena, imports the candidate (extensions from the cache), builds ModelNew,
   moves it to the device, each a phase with its own timeout; after each, its tamper report (a claim: a second
   line of defence, never the only one);
2. verification trials: the referee writes inputs drawn from fresh random seeds (the task's distribution, a
   positional ramp, and, where the reference stays finite, signed and wide values), the runner runs forward and
   copies its outputs into the arena, the referee reads and compares them; a mismatch gets a second opinion
   against the exact (float64) answer before it is final (`trusted/second_opinion.py`);
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

import re
import time
from collections.abc import Callable

from ... import messages as M
from ... import verdict as V
from ...processes import devmon, memory
from ...processes.gate import Cancelled, DeviceGate, Race
from ...processes.handle import Worker, WorkerError, WorkerFailed
from ...processes.members import CPU_SUM
from ...processes.pool import Pool
from ...verdict import KernelCheck
from .kernel import KernelCheckStep
from .load import Load
from .session import Outcome, Stop
from .time import Time, _timing_note
from .verify import Verify, verify_note

RUNNER_START_BYTES = 1 << 30  # a runner's context, libraries and warm-up on the device
RUNNER_MEMORY_WAIT_S = 60.0  # how long a verdict waits for the device memory a runner's start needs
_DEVICE_OOM = re.compile(r"out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY", re.I)


def start_runner(runners: Pool, cancel, wait_for_memory: Callable[[float], bool] | None, bound_s: float,
                 on_wait: Callable[[WorkerError], None]) -> tuple[Worker, float]:
    """A runner, started and ready, and the seconds its start took (from a pool's slot to ready: its starts and the
    waits for memory between them, never the wait for the slot). A start that failed because the device had no
    memory for the runner's context is contention, not a fault (no candidate code has run in it: other processes
    hold the memory): it goes back, `wait_for_memory` waits (up to what is left of `bound_s`) until a start fits,
    and another starts. Any other failure, or the bound passed, raises the start's WorkerError. The bound runs from
    the first such failure: the wait for a pool's slot before it (other candidates' runners) is no wait for
    memory."""
    end: float | None = None
    started: float | None = None
    while True:
        w = runners.acquire(cancel)
        started = time.perf_counter() if started is None else started
        try:
            w.wait_ready(cancel=cancel)
            return w, time.perf_counter() - started
        except WorkerError as e:
            runners.release(w, tainted=True)
            end = time.monotonic() + bound_s if end is None else end
            left = end - time.monotonic()
            if e.kind == "cancelled" or wait_for_memory is None or left <= 0 or \
                    not _DEVICE_OOM.search(f"{e.message}\n{e.log_tail}"):
                raise
            on_wait(e)
            if not wait_for_memory(left):
                raise


class DeviceStage(Load, Verify, Time, KernelCheckStep):
    """The device stage for one candidate: its steps in `run`, each step in its own module."""

    def run(self, gate: DeviceGate, race: Race | None = None) -> Outcome:
        """The load phase runs beside other candidates' device stages; verification beside other verifications
        (the gate's shared side); each timed round, the profiled call and the contention check alone on the
        device, with every other live runner stopped (the gate's exclusive side)."""
        t_all = time.perf_counter()
        self.gate, self.race = gate, race
        passed = False  # every check passed: its timing's last interval stays in the race a while
        try:
            try:
                self.runner, self.start_s = start_runner(
                    self.runners, self.cancel, self._wait_runner_memory if self.gpu else None, RUNNER_MEMORY_WAIT_S,
                    self._note_runner_wait)
            except WorkerError as e:
                if e.kind == "cancelled" or self.runners.closed:  # the evaluator closed and killed it while it started
                    raise Stop(V.CANCELLED, "cancelled", "load") from None
                raise Stop(V.INFRA_ERROR, f"could not start a runner: {e.message}{self._runner_wait_note()}", "load",
                           log=e.log_tail) from None
            if self.runner_memory_waits:
                self.out.warnings.append(f"waited {self.start_s:.1f} s for device memory to start its "
                                         f"runner{self._runner_wait_note()}")
            self._load()
            gate.register(self.key, self.runner)
            self.on_stage("verify", "waiting for the device")
            try:
                with gate.shared(self.cancel) as waited:
                    self.waited_s += waited
                    t0 = time.perf_counter()
                    self._verify()
                    self.out.stages.append(("verify", True, time.perf_counter() - t0, verify_note(
                        self.out.correctness.message if self.out.correctness else "", self.verify_parts), False))
                self.out.checked.append("verify(outputs read from shared memory by the referee)")
                if not self.time_it:
                    self._idle_checks("verification")
                if self.time_it:
                    t0 = time.perf_counter()
                    try:
                        self._time()
                    finally:
                        self._release_timing()
                    self.out.stages.append(("time", True, time.perf_counter() - t0,
                                            _timing_note(self.out.timing, self.time_parts), False))
                    self.out.checked.append("time(the evaluator's clock around each request, to the device idle)"
                                            if self.gpu else self._cpu_clock_note())
                    if not self.gpu and self.runner is not None and self.runner.members.cpu_source == CPU_SUM:
                        self.out.not_checked.append(
                            "time(a process reaped without a trace, its parent ignoring SIGCHLD, is in no sum of CPU "
                            "time: neither the cgroup's accounting nor the kernel's counters could be had)")
                else:
                    self.out.stages.append(("time", True, 0.0, "not asked for", True))
                if self.kernel_check or self.want_profile:
                    t0 = time.perf_counter()
                    with gate.exclusive(self.key, self.cancel, self._note_wait) as waited:
                        self.waited_s += waited
                        self._profile()
                    self.out.stages.append(("profile", True, time.perf_counter() - t0,
                                            self.out.kernel.message[:200] if self.out.kernel else "", False))
                self._state("the whole run")
                self.out.not_checked.append("tamper report (the candidate's process reports its own state)")
                self._end_checks()
                self._note_time_parts()
                self._keep_reference_facts()
                passed = True
            except Cancelled:
                raise Stop(V.CANCELLED, "cancelled", "verify") from None
        except Stop as st:
            self.out.status, self.out.message = st.status, st.message
            self.out.others_memory = st.others_memory
            self.out.detail = st.detail or self.out.detail
            self.out.log = st.log or self.out.log
            if st.stage in ("verify", "time", "profile"):
                self.out.stages.append((st.stage, False, time.perf_counter() - t_all, st.message, False))
        finally:
            gate.leave(self.key)
            if self.race is not None:  # (its referee's: one loaded again while it waited for memory has its own)
                self.race.leave(self.key, keep=passed)
            if self.runner is not None:
                self.runners.release(self.runner, tainted=True)
            if self.arena and not self.ref.worker.dead:
                try:  # this candidate's arena goes back to the device (another verdict may need it)
                    with self.ref.lock:
                        self.ref.worker.ask(M.RefereeOps.close_arena, M.ArenaRef(arena=self.arena), timeout=30.0)
                except (WorkerError, WorkerFailed):
                    pass
            self._release_memory()  # its runner gone and its arena closed: what it held goes to the next
        if self.out.status == V.CORRECT and self.out.kernel is None:
            self.out.kernel = KernelCheck(finding=V.KERNEL_NOT_CHECKED, message=(
                "not checked: the kernel check is off (setting kernel_check)" if not self.kernel_check
                else "not checked: no profile of its forward was taken"))
        self.out.start_s, self.out.waited_s = self.start_s, self.waited_s
        if self.lease_wait_s > 0.05:
            self.out.warnings.append(self._lease_warning())
        return self.out

    def _note_time_parts(self) -> None:
        """The time stage's line again, with what the end checks took (after the profile, outside its seconds)."""
        for i, st in enumerate(self.out.stages):
            if st[0] == "time" and st[1] and not st[4]:
                self.out.stages[i] = (st[0], st[1], st[2], _timing_note(self.out.timing, self.time_parts), st[4])

    runner_memory_waits: int = 0
    runner_memory_others: str = ""

    def _wait_runner_memory(self, left: float) -> bool:
        """Until the device has memory for a runner's start (NVML's free memory; False where it cannot tell), up to
        `left` seconds; this process's idle referees go meanwhile and the want is posted for other processes."""
        return memory.ledger(self.device).wait_free(("runner", id(self)), RUNNER_START_BYTES, self._nvml_free, left,
                                                    self.shed_referees, self.cancel, running=True)

    def _note_runner_wait(self, e: WorkerError) -> None:
        self.runner_memory_waits += 1
        held = [n for n in devmon.neighbours(self.monitor, {self.ref.worker.pid}) if n.memory > 0]
        self.runner_memory_others = ", ".join(map(str, held[:3]))
        self.on_stage("load", "no device memory for a runner's start: waiting for it"
                      + (f" (other processes hold it: {self.runner_memory_others})" if held else ""))

    def _runner_wait_note(self) -> str:
        if not self.runner_memory_waits:
            return ""
        who = f"; other processes held it: {self.runner_memory_others}" if self.runner_memory_others else ""
        return (f" (the device had no memory for a runner's start {self.runner_memory_waits} time(s){who}: "
                f"not the candidate's fault)")

    def _release_timing(self) -> None:
        """The referee lets go of what only timing needed (referee.release), however the timing ended: a referee
        kept for the task's next candidate would otherwise hold it through that one's checks."""
        if self.ref.worker.dead:
            return
        try:
            self._referee(M.RefereeOps.release)
        except (Stop, WorkerError, WorkerFailed):
            pass  # a referee that cannot answer is replaced, what it held with it
