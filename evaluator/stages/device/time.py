"""Steps 3 and 5 of the device stage, time: the evaluator's own clock around requests of N calls, candidate and
reference interleaved, the harness's own cost taken off both; with the runner gone, the reference timed alone."""

from __future__ import annotations

import math
import os
import random
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ... import messages as M
from ... import verdict as V
from ...processes import devmon
from ...processes.members import TICK_NS
from ...timing import median_ci, paired_speedup, stats
from ...verdict import Timing, TimingStats
from .session import SETTLE_S, DeviceSession, Request, Stop, phases_table

IDLE_CPU_WINDOW_S = 0.1  # the idle check's window; a runner busier than the limit in it is watched longer ...
IDLE_CPU_WINDOW_MAX_S = 0.25  # ... and judged on this whole window (a burst that ends is diluted, a busy thread not)
IDLE_CPU_LIMIT = 0.3  # cores: a runner busier than this while it waits for a request left work running
CONTENTION_RATIO = 1.25
OVERHEAD_SHARE = 0.01  # a timed request holds enough calls that the harness's own cost is under 1 % of it
MAX_REQUEST_MS = 250.0  # ... but no request of many calls runs longer than this
PHYSICAL_MARGIN = 2.0  # faster than half the physical floor: impossible, whatever the task's algorithm
CHECK_SHARE = 0.15  # the share of a timed request's calls whose outputs the referee reads (at least one)
SPEEDUP_CI_FLOOR = 0.03  # a speedup known to better than ±3 % is quotable as a plain number
RACE_MIN_ROUNDS = 5  # timed rounds before a candidate may be found unable to be the best
CI_MIN_ROUNDS = 10  # rounds before the speedup's interval may end a timing: the trimmed mean of five keeps three,
# and stopping at the first narrow interval of so few quotes a spread estimated far too small (an H100: ± 1.7 % after
# 5 rounds where four timings of the same kernel needed 38-41 rounds for ± 1.9-2.9 %)
MAX_ROUNDS = 60  # rounds at most (the time budget ends most timings that do not reach their interval first)


class Time(DeviceSession):
    """The timing steps."""

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
                              stop_runner=True, what=which)  # a stopped runner: the same signal as the candidate's
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
                              stop_runner=True, what="harness")
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
        with self.gate.exclusive(self.key, self.cancel, self._note_wait) as waited:
            self.waited_s += waited
            yield

    def _time(self) -> None:
        s = self.s
        assert self.runner is not None
        self.on_stage("time", "timing candidate and reference")
        t0 = time.perf_counter()
        with self._alone():
            probe = self._request(1)
            self._fill(probe, poison=False)
            n = self._calls_per_request(min(self._harness(probe) for _ in range(3)))
        self.timing_since = time.time()
        t1 = time.perf_counter()
        self.time_parts.append(("the request's size", t1 - t0))
        raw_c, raw_e, harness, checked, stopped = self._timed_loop(n)
        self.time_parts.append((f"{len(raw_c)} rounds", time.perf_counter() - t1))
        h = self.h_ref = min(harness)
        cand = [max(0.0, (x - h) / n) for x in raw_c]
        eager = [max(0.0, (x - h) / n) for x in raw_e]
        compiled: list[float] = []
        if s.time_compiled:
            t1 = time.perf_counter()
            compiled = self._compiled_call_ms(n, len(eager), h)
            if self.compiled_ms:  # timed here, not the reference's figure kept from an earlier candidate
                self.time_parts.append(("torch.compile's reference", time.perf_counter() - t1))
        t = Timing(device=self.device_label, method="outside-clock" if self.gpu else "outside-cpu-time",
                   candidate=TimingStats(**stats(cand)), eager=TimingStats(**stats(eager)),
                   compiled=TimingStats(**stats(compiled)) if compiled else None,
                   checked_calls=checked, interleaved=True, batch_calls=n, stopped=stopped,
                   compiled_pending=self.compiled_pending)
        assert t.candidate is not None and t.eager is not None
        cm = t.candidate.median_ms
        # the speedup from the rounds' pairs (each round times both back to back), its interval with it
        paired = paired_speedup(cand, eager)
        t.speedup_eager = paired.value if paired else (t.eager.median_ms / cm if cm else None)
        t.speedup_compiled = t.compiled.median_ms / cm if t.compiled and cm else None
        ci_s = paired.ci if paired else None
        if ci_s is not None and self.coarse_total_ms and sum(raw_c) > h * len(raw_c):
            # the ended processes' share is known to about two ticks over all the requests, not better
            ci_s += 2 * TICK_NS / 1e6 / (sum(raw_c) - h * len(raw_c))
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
            t1 = time.perf_counter()
            self.ref.roofline = self._referee(M.RefereeOps.roofline, M.RooflineAsk(limits=self.limits))
            self.time_parts.append(("the roofline", time.perf_counter() - t1))
        rl = self.ref.roofline.roofline_ms
        if rl:
            t.roofline_ms = rl
            t.pct_of_limit = rl / cm * 100 if cm else None
        self.out.timing = t
        impossible = faster_than_hardware(cm, self.ref.roofline)
        if impossible:
            raise Stop(V.TAMPERED, impossible, "time")
        self._idle_checks("timing")

    def _cpu_clock_note(self) -> str:
        """What the CPU's clock read, for the verdict's `checked`."""
        how = self.runner.members.cpu_how if self.runner is not None else "the sum over its processes"
        ended = (f"; {self.coarse_total_ms:.0f} ms of processes that ended unseen during timing, known to the clock "
                 "tick, spread evenly over its requests") if self.coarse_total_ms >= 0.5 else ""
        return f"time(the sandbox's CPU time per request, read by the evaluator from the kernel: {how}{ended})"

    def _timed_loop(self, n: int) -> tuple[list[float], list[float], list[float], int, str]:
        """Rounds of: the candidate's request, the referee's reads of some of its calls, the reference's request,
        the harness's own request; each round alone on the device. Raw request times (ms). Rounds end once the
        speedup is known to `speedup_ci`, or the time budget is spent (then the verdict says how well it is known).
        Among candidates of the same reference timed at once, one whose interval shows it cannot be the best stops
        early."""
        s = self.s
        assert self.runner is not None
        n_min = max(CI_MIN_ROUNDS, math.ceil(s.timing_min_calls / n))
        n_max = max(2 * n_min, math.ceil(s.timing_calls / n), MAX_ROUNDS)
        with self._alone():
            for _ in range(max(1, s.warmup_calls // max(1, n) or 1)):  # warm-up requests, not recorded
                self._candidate_request(self._request(n), "time")
        cand: list[float] = []
        eager: list[float] = []
        harness: list[float] = []
        coarse_c: list[float] = []  # each request's part of processes that ended unseen (CPU; to the clock tick)
        coarse_e: list[float] = []
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
                    coarse_e.append(self.coarse_ms)
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
                coarse_c.append(self.coarse_ms)
                if not ref_first:
                    eager.append(self._reference_request(ref))
                    coarse_e.append(self.coarse_ms)
                harness.append(self._harness(ref))
            self._neighbours_since(since)
            h = min(harness)
            c = [x - h for x in evened(cand, coarse_c)]
            e = [x - h for x in evened(eager, coarse_e)]
            if self.race is not None and len(cand) >= RACE_MIN_ROUNDS:
                est = paired_speedup(c, e)
                if est is not None:
                    sp, ci = est.value, est.ci
                    self.race.post(self.key, sp, sp * (1 - ci), sp * (1 + ci))
                    stopped = self.race.hopeless(self.key)
                    if stopped:
                        break
            if time.perf_counter() - t_start > s.timing_budget_s and len(cand) >= 5:
                break
            if len(cand) >= n_min and (est := paired_speedup(c, e)) is not None and est.ci <= s.speedup_ci:
                break
        if os.environ.get("KLSP_DEBUG_TIMING"):
            import sys

            print(f"timing n={n} cand={[round(x, 3) for x in cand]} eager={[round(x, 3) for x in eager]} "
                  f"harness={[round(x, 3) for x in harness]}", file=sys.stderr)
            if self.phases:
                print(phases_table(self.phases), file=sys.stderr)
        self.coarse_total_ms = sum(coarse_c)
        return evened(cand, coarse_c), evened(eager, coarse_e), harness, checked, stopped

    def _compiled_call_ms(self, n: int, count: int, h: float) -> list[float]:
        """torch.compile of the reference, per call: timed once per loaded reference and reused by its next
        candidates (a fact of the reference, as its profile and its fixed trials' outputs are: a later candidate's
        time stage pays nothing for it). Requests of another size give per-call figures alike (each request holds
        enough calls that the harness's own cost, taken off, is under 1 % of it). What this session times is kept
        for the next only once its candidate passed every check (`_keep_reference_facts`)."""
        if self.ref.compiled_call_ms:
            return list(self.ref.compiled_call_ms)
        if not self.compiled_wait and not self.ref.compiled and not self.ref.compile_error:
            # its compile (seconds, the referee and the device held) is not this verdict's to wait for: it starts,
            # or goes on, once no candidate of the reference is on its way, and a later candidate is timed against it
            self.compiled_pending = True
            return []
        since = time.time()

        def per_call(raw: list[float]) -> list[float]:
            return [max(0.0, (x - h) / n) for x in raw]

        def known(raw: list[float]) -> bool:  # a plain median of the trusted reference: known to `timing_ci` is enough
            return len(raw) >= CI_MIN_ROUNDS and median_ci(per_call(raw)) <= self.s.timing_ci

        self.compiled_ms = per_call(self._time_compiled(n, count, known))
        self._neighbours_since(since)
        return list(self.compiled_ms)

    def _keep_reference_facts(self) -> None:
        """After the last check passed: torch.compile's figures this session took go to the reference's next
        candidates, where nothing made them doubtful (no other process's work seen on the device, the reference
        not slower beside the candidate than alone); otherwise the next times its own."""
        if self.compiled_ms and not (self.contention or self.slower_beside):
            self.ref.compiled_call_ms = list(self.compiled_ms)

    def _time_compiled(self, n: int, count: int, known: Callable[[list[float]], bool]) -> list[float]:
        """Up to `count` requests of the compiled reference, each alone on the device; fewer once `known`."""
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
            if known(out):
                break
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
            busy = idle_rate(self.runner.cpu_seconds, wanted=self.runner.wanted_seconds)
        finally:
            self._freeze(after)
        if busy > IDLE_CPU_LIMIT:
            raise Stop(V.TAMPERED, f"the candidate's process kept working after its calls returned ({busy:.1f} "
                                   f"cores busy while it waited for the next request, after {after})", after)

    def _end_checks(self) -> None:
        """With the runner gone, the reference is timed again: the speedup never rests on a reference that ran
        slower beside the candidate's process (GPU only: on the CPU the reference's clock is its own CPU time)."""
        if not (self.time_it and self.gpu and self.out.timing):
            return
        assert self.runner is not None and self.gate is not None
        t_end = time.perf_counter()
        since = self.timing_since
        who = self._whose(since)  # before its processes are gone: whose work was on the device while it was timed
        self.gate.unregister(self.key)
        self._kill_runner()
        n = self.out.timing.batch_calls or 1
        alone = []
        for _ in range(5):
            with self.gate.exclusive(self.key, self.cancel, self._note_wait):
                req = self._request(n)
                self._fill(req, poison=False)
                self._referee(M.RefereeOps.stage, M.RunReference(arena=self.arena, items=req.items()))
                time.sleep(SETTLE_S)
                ms, _ = self._clocked(lambda: self._referee(M.RefereeOps.go, M.ArenaRef(arena=self.arena),
                                                            timeout=max(300.0, self.s.run_timeout)),
                                      "time", stop_runner=False, what="alone")  # as in the rounds
                alone.append(ms)
        assert self.out.timing.eager is not None
        self.time_parts.append(("after the profile, the reference alone again", time.perf_counter() - t_end))
        alone_ms = max(1e-6, (statistics.median(alone) - self.h_ref) / n)
        self.out.timing.eager_alone_ms = alone_ms
        line = against_alone(self.out.timing, alone_ms, who)
        self.slower_beside = bool(line)
        if line and who.known and who.others:  # another process's work: contention, named
            self._contended(line, "end")
            self._mark_contended()
        elif line:
            self.out.timing.noise = line

    # -- other processes' work while it was timed ----------------------------------------------------------------
    def _neighbours_since(self, since: float) -> None:
        """GPU: other processes' work on the device since `since` (a timing round and the gap before it) is
        contention, named; the candidate's own and this evaluator's other workers (ordered by its gate) are not."""
        if not self.gpu or not self.monitor.available:
            return
        who = self._whose(since)
        if who.known and who.others:
            self._contended(who.describe(), tuple(sorted(n.pid for n in who.others)))

    def _mark_contended(self) -> None:
        """After the timing was summed up: its figures are uncertain, and why."""
        t = self.out.timing
        if t is None:
            return
        t.uncertain = True
        t.contention = list(self.contention)
        t.noise = f"the device was shared: {'; '.join(self.contention[:2])}" if self.contention else t.noise


def evened(raw: list[float], coarse: list[float]) -> list[float]:
    """Request times with the part each one had of processes that ended unseen (CPU: `CpuTime.unseen_ns`, which the
    kernel gives in whole ticks) replaced by that part's mean over the requests. A difference of a tick-truncated
    total is 0 for most short requests and a whole tick for some, so their median would leave it out (a helper
    process that does most of each call's work and exits looked nearly free); its sum over the requests is right to
    a tick or two, so its mean is each request's share. What a process had used when it was last seen alive is not
    in that part: time from before the timing is never spread into it."""
    if not coarse or not any(coarse):
        return list(raw)
    share = sum(coarse) / len(coarse)
    return [x - c + share for x, c in zip(raw, coarse)]


def idle_rate(cpu_seconds: Callable[[], float], sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.perf_counter,
              wanted: Callable[[], dict[int, float] | None] | None = None) -> float:
    """Cores a process used while it waited with nothing asked of it (its CPU clock is the kernel's, in ns): over
    IDLE_CPU_WINDOW_S, and where that is over IDLE_CPU_LIMIT, over IDLE_CPU_WINDOW_MAX_S from the same start, so a
    short burst (a collection, a driver thread) is diluted and a thread kept busy is not. `wanted`: seconds each of
    its threads ran or waited to run, by thread (None: unknown); the busiest thread's share of the window counts
    where it is larger, so a thread kept busy on a machine too loaded to give it a core is still seen wanting one.
    Per thread, not summed: on a loaded machine each of a quiet process's threads that wakes for a moment (the
    driver's, the interpreter's) waits for a core, and those waits summed looked like a busy thread (a valid kernel
    was once judged `tampered` so, three test groups side by side on a 16-core machine). Work spread over many
    threads is what they ran, which the CPU clock sums."""
    w0 = wanted() if wanted is not None else None
    c0, t0 = cpu_seconds(), clock()

    def rate() -> float:
        span = max(clock() - t0, 1e-6)
        busy = (cpu_seconds() - c0) / span
        w1 = wanted() if w0 is not None and wanted is not None else None
        if w0 is None or w1 is None:
            return busy
        return max(busy, max((w - w0.get(t, 0.0) for t, w in w1.items()), default=0.0) / span)

    sleep(IDLE_CPU_WINDOW_S)
    busy = rate()
    if busy <= IDLE_CPU_LIMIT:
        return busy
    sleep(max(0.0, IDLE_CPU_WINDOW_MAX_S - (clock() - t0)))
    return rate()


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


def _timing_note(t: Timing | None, parts: list[tuple[str, float]] | None = None) -> str:
    """The time stage's line: the candidate's median, the speedups; then where the stage's seconds went (`parts`:
    each step's wall time, waits for the device included)."""
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
    elif t.compiled_pending:
        note += ", torch.compile's reference not timed (not compiled yet)"
    if parts:
        note += "; seconds: " + ", ".join(f"{what} {s:.2f}" for what, s in parts)
    return note
