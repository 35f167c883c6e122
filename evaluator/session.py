"""Parent side of the device stage for one candidate: the referee (trusted) and a fresh runner (sandboxed).

The evaluator drives both, one request at a time, each under its own timeout:

1. the runner maps the referee's arena, imports the candidate (extensions from the cache), builds ModelNew and
   moves it to the device: each a phase with its own timeout; the runner's torch flags and functions are
   compared with its start-up snapshot after each phase (a change is `tampered`);
2. verification trials: the referee writes inputs drawn from fresh random seeds (the task's distribution, a
   positional ramp, and, where the reference stays finite, signed and wide values), the runner runs forward
   and copies its outputs out, the referee compares;
3. timing: calls with fresh values every time (written in place or seen through new tensor objects, at one of
   two addresses, at random); the outputs of an unpredictable sample of timed calls are compared too; blocks
   of reference calls are interleaved with the runner stopped (SIGSTOP); the runner's clock is cross-checked
   with the evaluator's own wall clock; afterwards no thread of the runner may still be busy and no process it
   started may still run;
4. one call under the profiler decides whether custom kernels do the work (kernelcheck.py);
5. the runner is killed; on a GPU the reference is timed once more with the runner gone: if it ran slower while
   the runner was alive, something of the candidate's kept the device busy (`tampered`).
"""

from __future__ import annotations

import os
import re
import secrets
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import kernelcheck
from . import verdict as V
from .pool import Pool, Worker, WorkerError
from .settings import EvalSettings
from .timing import median_ci, stats
from .variants import DESCRIBE, OUT_OF_DISTRIBUTION

OnStage = Callable[[str, str], None]

_CUDA_FATAL = re.compile(
    r"illegal memory access|illegal address|unspecified launch failure|misaligned address|illegal instruction"
    r"|device-side assert|cudaErrorLaunchFailure|AcceleratorError|CUDA error: an? |uncorrectable ECC", re.IGNORECASE)
_OOM = re.compile(r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|std::bad_alloc|MemoryError"
                  r"|can't allocate memory|cannot allocate memory", re.IGNORECASE)

CROSS_CHECK_RATIO = 0.5  # the runner's clock may not claim less than this share of what the outside clock saw
CROSS_CHECK_SLACK_MS = 0.1
IDLE_CPU_WINDOW_S = 0.25
IDLE_CPU_LIMIT = 0.3  # cores: a runner busier than this while it waits for a request left work running
CONTENTION_RATIO = 1.25


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
    info: dict
    init_seed: int
    summary: dict | None = None
    users: int = 0  # device stages using it now (it is not evicted meanwhile)
    compiled: bool = False
    compile_error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Outcome:
    status: str = V.CORRECT
    message: str = ""
    stages: list[tuple[str, bool, float, str, bool]] = field(default_factory=list)
    correctness: dict | None = None
    timing: dict | None = None
    kernel: dict | None = None
    profile: dict | None = None
    warnings: list[str] = field(default_factory=list)
    detail: str = ""
    log: str = ""
    load_s: float = 0.0
    checked: list[str] = field(default_factory=list)


class DeviceStage:
    def __init__(self, settings: EvalSettings, referee: RefereeHandle, runners: Pool, device: str, salt: str,
                 cancel: threading.Event | None, on_stage: OnStage, profile: bool, time_it: bool) -> None:
        self.s = settings
        self.ref = referee
        self.runners = runners
        self.device = device
        self.salt = salt
        self.cancel = cancel
        self.on_stage = on_stage
        self.want_profile = profile
        self.time_it = time_it
        self.kernel_check = settings.kernel_check
        self.out = Outcome()
        self.runner: Worker | None = None
        self.layout = referee.info["layout"]
        self.first_call = True

    # -- requests ------------------------------------------------------------------------------------------------
    def _referee(self, op: str, args: dict, timeout: float | None = None) -> dict:
        try:
            res, fds = self.ref.worker.call(op, args, timeout=timeout or self.s.run_timeout, cancel=self.cancel)
        except WorkerError as e:
            if e.kind == "cancelled":
                raise Stop(V.CANCELLED, "cancelled", op) from None
            raise Stop(V.INFRA_ERROR, f"the referee failed ({op}): {e.message}", op, log=e.log_tail) from None
        for fd in fds:
            os.close(fd)
        if not res.get("ok"):
            raise Stop(V.INFRA_ERROR, f"the referee failed ({op}): {res.get('error', '')}"[:600], op,
                       detail=res.get("traceback", ""))
        return res

    def _runner(self, op: str, args: dict, stage: str, timeout: float, fds: list[int] | None = None) -> dict:
        assert self.runner is not None
        try:
            res, rfds = self.runner.call(op, args, timeout=timeout, cancel=self.cancel, fds=fds)
        except WorkerError as e:
            self.out.log = e.log_tail
            if e.kind == "cancelled":
                raise Stop(V.CANCELLED, "cancelled", stage) from None
            if e.kind == "timeout":
                raise Stop(V.TIMEOUT, f"timeout after {timeout:g} s during {_phase(op, stage)}; the worker was killed",
                           stage, log=e.log_tail) from None
            if e.kind == "protocol":
                raise Stop(V.TAMPERED, f"the candidate wrote to the oracle's channel ({e.message})", stage,
                           log=e.log_tail) from None
            if _CUDA_FATAL.search(e.log_tail or ""):
                first = next((ln for ln in e.log_tail.splitlines() if _CUDA_FATAL.search(ln)), e.message)
                raise Stop(V.CRASHED, f"{first.strip()[:300]} during {_phase(op, stage)} (the CUDA context is "
                           "poisoned; the worker was replaced)", stage, log=e.log_tail) from None
            raise Stop(V.CRASHED, f"{e.message} during {_phase(op, stage)}; the worker was replaced", stage,
                       log=e.log_tail) from None
        for fd in rfds:
            os.close(fd)
        if not res.get("ok"):
            raise self._failure(res, op, stage)
        return res

    def _failure(self, res: dict, op: str, stage: str) -> Stop:
        text = str(res.get("text") or res.get("error") or "failed")
        detail = str(res.get("detail") or "")
        first = text.strip().splitlines()[0][:300] if text.strip() else "failed"
        where = _phase(op, stage)
        if res.get("kind") == "build":
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
        if res.get("kind") != "exception":  # our harness failed, not the candidate's code
            return Stop(V.INFRA_ERROR, f"the runner failed during {where}: {first}", stage,
                        detail or str(res.get("traceback", "")))
        return Stop(V.RUNTIME_ERROR, f"{first} (during {where})", stage, detail)

    def _memory_held_by_others(self) -> str:
        """On a GPU: if memory that others held before the candidate ran explains the out-of-memory, say so."""
        free = self.ref.info.get("free_at_start")
        total = self.ref.info.get("total_bytes") or 0
        if not total or free is None:
            return ""
        need = 2 * int(self.ref.info.get("in_bytes", 0)) + 4 * int(self.ref.info.get("out_bytes", 0))
        if free < need + (1 << 30):
            return (f"only {free / 2**30:.1f} GB of {total / 2**30:.1f} GB were free when the candidate started "
                    f"(other processes held the rest; this task needs about {need / 2**30:.1f} GB)")
        return ""

    def _state(self, after: str) -> None:
        res = self._runner("state", {}, after, 30.0)
        self.out.warnings += [f"{w} (after {after})" for w in res.get("warnings", []) if
                              f"{w} (after {after})" not in self.out.warnings]
        if res.get("tampered"):
            raise Stop(V.TAMPERED, f"the candidate changed torch's or the oracle's state during {after}: "
                                   + "; ".join(res["tampered"])[:800], after)

    # -- the stage -------------------------------------------------------------------------------------------------
    def _locked(self, lock: threading.Lock) -> None:
        while not lock.acquire(timeout=0.1):
            if self.cancel is not None and self.cancel.is_set():
                raise Stop(V.CANCELLED, "cancelled", "verify")

    def run(self, device_lock: threading.Lock) -> Outcome:
        """The load phase runs beside other candidates' device stages; verify/time/profile hold `device_lock`
        (one candidate at a time on the device) and the referee."""
        t_all = time.perf_counter()
        held: list[threading.Lock] = []
        try:
            try:
                self.runner = self.runners.acquire(self.cancel)
                self.runner.wait_ready(cancel=self.cancel)
            except WorkerError as e:
                raise Stop(V.CANCELLED if e.kind == "cancelled" else V.INFRA_ERROR,
                           "cancelled" if e.kind == "cancelled" else f"could not start a runner: {e.message}",
                           "load", log=e.log_tail) from None
            self._load()
            self.on_stage("verify", "waiting for the device")
            self._locked(device_lock)
            held.append(device_lock)
            self._locked(self.ref.lock)
            held.append(self.ref.lock)
            if self.device.startswith("cuda"):
                mem = self._referee("memory", {})
                self.ref.info["free_at_start"] = mem.get("free")
            t0 = time.perf_counter()
            self._verify()
            self.out.stages.append(("verify", True, time.perf_counter() - t0, self.out.correctness["message"], False))
            self.out.checked.append("verify")
            if not self.time_it:
                self._idle_checks("verification")
            if self.time_it:
                t0 = time.perf_counter()
                self._time()
                self.out.stages.append(("time", True, time.perf_counter() - t0, _timing_note(self.out.timing), False))
                self.out.checked.append("time")
            else:
                self.out.stages.append(("time", True, 0.0, "not asked for", True))
            if self.kernel_check or self.want_profile:
                t0 = time.perf_counter()
                self._profile()
                self.out.stages.append(("profile", True, time.perf_counter() - t0,
                                        (self.out.kernel or {}).get("message", "")[:200], False))
            self._state("the whole run")
            self._end_checks()
        except Stop as st:
            self.out.status, self.out.message = st.status, st.message
            self.out.detail = st.detail or self.out.detail
            self.out.log = st.log or self.out.log
            if st.stage in ("verify", "time", "profile"):
                self.out.stages.append((st.stage, False, time.perf_counter() - t_all, st.message, False))
        finally:
            if self.runner is not None:
                self.runners.release(self.runner, tainted=True)
            if self.ref.lock not in held:
                self.ref.lock.acquire()
                held.append(self.ref.lock)
            if not self.ref.worker.dead:
                try:  # give the device memory of this verdict back (another verdict may need it)
                    self.ref.worker.call("release", {}, timeout=30.0)
                except WorkerError:
                    pass
            for lock in reversed(held):
                lock.release()
        if (self.kernel_check and self.out.status == V.CORRECT and self.out.kernel
                and not self.out.kernel.get("is_kernel", True)):
            self.out.status, self.out.message = V.NOT_A_KERNEL, self.out.kernel["message"]
        return self.out

    def _load(self) -> None:
        assert self.runner is not None
        self.on_stage("compile", "loading the candidate on the device")
        t0 = time.perf_counter()
        self._locked(self.ref.lock)
        try:
            fd_res, fds = self.ref.worker.call("arena_fd", {}, timeout=30.0, cancel=self.cancel)
        except WorkerError as e:
            raise Stop(V.CANCELLED if e.kind == "cancelled" else V.INFRA_ERROR,
                       "cancelled" if e.kind == "cancelled" else f"the referee failed: {e.message}", "load") from None
        finally:
            self.ref.lock.release()
        try:
            self._runner("attach", {"nbytes": fd_res["nbytes"], "layout": self.layout}, "load", 60.0, fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        if self.runner.cgroup is not None:  # now that the task's size is known: what a candidate may hold
            io = int(self.ref.info.get("in_bytes", 0)) + int(self.ref.info.get("out_bytes", 0))
            floor = (8 << 30) if self.device.startswith("cuda") else (2 << 30)  # CUDA's libraries are big
            self.runner.cgroup.set_memory(min(self.runner.spec.memory_bytes or (1 << 62), max(floor, 4 * io + (1 << 30))))
        self._runner("load", {"candidate_src": self.candidate_src, "salt": self.salt,
                              "cache_dir": self.cache_dir}, "load", self.s.run_timeout)
        self._state("import")
        self._runner("init", {"init_args": self.ref.info["init_args"], "seed": self.ref.init_seed}, "load",
                     self.s.run_timeout)
        self._runner("to_device", {}, "load", self.s.run_timeout)
        self._state("ModelNew(...)")
        self.out.load_s = time.perf_counter() - t0

    # -- one call ----------------------------------------------------------------------------------------------------
    def _call(self, seed: int, variant: str, stage: str, keep: bool, check: bool, flush: bool = False,
              profile: bool = False, precision: bool = False) -> dict | None:
        """Fill, call, collect (and check). Returns the call's figures, or None when the referee skipped it."""
        slot = secrets.randbelow(len(self.layout["slots"]))
        fresh = bool(secrets.randbits(1))
        fill = self._referee("fill", {"slot": slot, "seed": seed, "variant": variant, "keep": keep, "flush": flush})
        if fill.get("skip"):
            return None
        self._runner("prepare", {}, stage, 60.0)
        timeout = self.s.run_timeout
        t0 = time.perf_counter()
        res = self._runner("profile" if profile else "call", {"slot": slot, "fresh": fresh, "args": fill["args"]},
                           stage, timeout)
        t1 = time.perf_counter()
        col = self._runner("collect", {}, stage, timeout)
        t2 = time.perf_counter()
        self.first_call = False
        res["wall_call_ms"], res["wall_collect_ms"] = (t1 - t0) * 1e3, (t2 - t1) * 1e3
        res["slot"] = slot
        if check:
            chk = self._referee("check", {"slot": slot, "seed": seed, "variant": variant, "precision": precision,
                                          "scalars": col.get("scalars", {}), "problems": col.get("problems", [])})
            res["check"] = chk
        return res

    def _verify(self) -> None:
        s = self.s
        plan = [("task" if t % 2 == 0 else "ramp") for t in range(s.trials)] + list(OUT_OF_DISTRIBUTION)
        self.on_stage("verify", f"{len(plan)} trials")
        corr = {"trials": 0, "passed": 0, "atol": s.atol, "rtol": s.rtol, "max_abs_err": 0.0, "max_rel_err": 0.0,
                "where": "", "message": "", "failed_trial": None, "skipped": []}
        warnings: list[str] = []
        for t, variant in enumerate(plan):
            seed = secrets.randbits(31)
            res = self._call(seed, variant, "verify", keep=True, check=True, precision=t == 0)
            if res is None:
                corr["skipped"].append(f"{DESCRIBE[variant]}: the reference is not finite there")
                continue
            corr["trials"] += 1
            chk = res["check"]
            if not chk.get("match"):
                corr["failed_trial"] = t
                corr["where"] = chk.get("where", "")
                corr["max_abs_err"] = chk.get("max_abs_err")
                corr["max_rel_err"] = chk.get("max_rel_err")  # a mismatch carries no relative figure: none shown
                corr["message"] = f"trial {t + 1} of {len(plan)} (inputs: {DESCRIBE[variant]}): {chk['message']}"
                self.out.correctness = corr
                raise Stop(V.INCORRECT, corr["message"], "verify")
            corr["passed"] += 1
            warnings += chk.get("warnings", [])
            if chk.get("max_abs_err", 0.0) >= corr["max_abs_err"]:
                corr["max_abs_err"], corr["where"] = chk.get("max_abs_err", 0.0), chk.get("where", "")
            corr["max_rel_err"] = max(corr["max_rel_err"], chk.get("max_rel_err", 0.0))
            self.on_stage("verify", f"trial {t + 1}/{len(plan)} passed")
        ood = [v for v in OUT_OF_DISTRIBUTION if not any(DESCRIBE[v] in x for x in corr["skipped"])]
        corr["message"] = (f"{corr['passed']}/{corr['trials']} trials passed"
                           + (f" (incl. {', '.join(ood)} inputs)" if ood else "")
                           + f"; max abs error {corr['max_abs_err']:.2e}" + (f" at {corr['where']}" if corr["where"]
                                                                            else ""))
        self.out.warnings += list(dict.fromkeys(warnings))
        self.out.correctness = corr

    # -- timing ------------------------------------------------------------------------------------------------------
    def _time(self) -> None:
        s = self.s
        self.on_stage("time", "timing candidate and reference")
        pings = []
        for _ in range(8):
            t0 = time.perf_counter()
            self._referee("ping", {})
            pings.append((time.perf_counter() - t0) * 1e3)
        ipc_ms = min(pings)
        copy_ms = self._referee("copy_cost", {"nbytes": self.ref.info.get("out_bytes", 0)})["ms"]
        for _ in range(max(1, s.warmup_calls)):
            self._call(secrets.randbits(31), "task", "time", keep=False, check=False, flush=True)
        cand: list[dict] = []
        eager: list[float] = []
        checked = 0
        block = max(5, min(10, s.timing_calls // 5))
        t_start = time.perf_counter()
        n_target = max(10, s.timing_calls)
        n_min = max(10, min(s.timing_min_calls, n_target))
        while len(cand) < n_target:
            for _ in range(block):
                if len(cand) >= n_target:
                    break
                # the first and last calls of each block and a random 15 % of the rest are compared
                check = len(cand) % block in (0, block - 1) or secrets.randbelow(100) < 15
                res = self._call(secrets.randbits(31), "task", "time", keep=False, check=check, flush=True)
                assert res is not None
                if check:
                    checked += 1
                    chk = res["check"]
                    if not chk.get("match"):
                        raise Stop(V.INCORRECT, f"timed call {len(cand) + 1}: {chk['message']}", "time")
                cand.append(res)
            eager += self._reference_block("eager", block)
            if time.perf_counter() - t_start > s.timing_budget_s and len(cand) >= 10:
                break
            if len(cand) >= n_min and median_ci([c["ms"] for c in cand]) <= s.timing_ci \
                    and median_ci(eager) <= s.timing_ci:
                break
        compiled: list[float] = []
        if s.time_compiled:
            self.on_stage("time", "timing reference (torch.compile)")
            if not self.ref.compiled and not self.ref.compile_error:
                res = self._referee("compile", {}, timeout=max(300.0, s.run_timeout))
                self.ref.compile_error = res.get("error", "")
                self.ref.compiled = not self.ref.compile_error
            if self.ref.compiled:
                compiled = self._reference_block("compiled", len(eager))
            elif self.ref.compile_error:
                self.out.warnings.append(f"torch.compile of the reference failed: {self.ref.compile_error}")
        self._cross_check(cand, ipc_ms, copy_ms)
        claimed = [max(c["ms"], c["device_ms"]) if self._escaped(cand) else c["ms"] for c in cand]
        t: dict[str, Any] = {"device": self.device_label, "method": "cuda-events" if self.device.startswith("cuda")
                             else "perf-counter", "candidate": stats(claimed), "eager": stats(eager),
                             "compiled": stats(compiled) if compiled else None, "checked_calls": checked,
                             "interleaved": True}
        if self._escaped(cand):
            self.out.warnings.append("work escaped the current stream: the device-wide time is reported")
        cm = t["candidate"]["median_ms"]
        t["speedup_eager"] = t["eager"]["median_ms"] / cm if cm else None
        t["speedup_compiled"] = t["compiled"]["median_ms"] / cm if compiled and cm else None
        if "roofline" not in self.ref.info:
            self.ref.info["roofline"] = self._referee("roofline", {"limits": self.limits})
        rl = self.ref.info["roofline"].get("roofline_ms")
        if rl:
            t["roofline_ms"] = rl
            t["pct_of_limit"] = rl / cm * 100 if cm else None
        self.out.timing = t
        self._idle_checks("timing")

    def _escaped(self, cand: list[dict]) -> bool:
        ms = statistics.median(c["ms"] for c in cand)
        md = statistics.median(c["device_ms"] for c in cand)
        return md > ms + max(0.05, 0.25 * ms)  # beyond the noise of the synchronisation's own cost

    def _reference_block(self, which: str, n: int) -> list[float]:
        """n reference calls with fresh inputs, the runner stopped meanwhile."""
        assert self.runner is not None
        self.runner.stop()
        try:
            seeds = [secrets.randbits(31) for _ in range(n)]
            return list(self._referee("time", {"which": which, "seeds": seeds})["ms"])
        finally:
            self.runner.cont()

    def _cross_check(self, cand: list[dict], ipc_ms: float, copy_ms: float) -> None:
        """The runner's clock against the evaluator's: a call cannot take less than the outside clock saw, less
        the protocol's own overhead (measured with the referee) and the output copy.

        On a GPU the outside clock spans the call and the collection of its outputs (work left running on the
        device after the call is waited for there). On the CPU only the call: forward runs synchronously there,
        and the collection can wait behind the kernel's own idle OpenMP threads spinning on a small machine;
        work handed to a thread that outlives the call is caught by the output checks and the idle check."""
        on_gpu = self.device.startswith("cuda")
        lb = sorted(c["wall_call_ms"] + (c["wall_collect_ms"] - copy_ms - 2 * ipc_ms if on_gpu else 0.0)
                    - 2 * ipc_ms for c in cand)
        claimed = [max(c["ms"], c["device_ms"]) for c in cand]
        lb_med = lb[len(lb) // 20]  # a low quantile: scheduling noise only ever adds to the outside clock
        cl_med = statistics.median(claimed)
        slack = max(CROSS_CHECK_SLACK_MS if on_gpu else 0.5, 4 * ipc_ms)  # CPU: scheduling on a loaded machine
        if cl_med < CROSS_CHECK_RATIO * lb_med - slack:
            raise Stop(V.TAMPERED, f"the candidate's clock says {cl_med:.4g} ms per call; the evaluator's own clock "
                                   f"saw at least {lb_med:.4g} ms (work hidden from the timer or a patched clock)",
                       "time")
        self.out.checked.append("time(cross-checked with an outside clock)")

    def _idle_checks(self, after: str) -> None:
        """Nothing the candidate started may still run: no extra process, no busy thread while the runner waits."""
        assert self.runner is not None
        extra = self.runner.extra_processes()
        if extra:
            raise Stop(V.TAMPERED, f"the candidate left {len(extra)} process(es) running after its calls "
                                   f"returned (during {after})", after)
        time.sleep(0.05)
        c0 = self.runner.cpu_seconds()
        time.sleep(IDLE_CPU_WINDOW_S)
        busy = (self.runner.cpu_seconds() - c0) / IDLE_CPU_WINDOW_S
        if busy > IDLE_CPU_LIMIT:
            raise Stop(V.TAMPERED, f"the candidate's process kept working after its calls returned ({busy:.1f} "
                                   f"cores busy while it waited for the next request, after {after})", after)

    # -- what ran ----------------------------------------------------------------------------------------------------
    def _profile(self) -> None:
        self.on_stage("profile", "profiling the candidate")
        if self.ref.summary is None:
            self.ref.summary = self._referee("summary", {})["summary"]
        res = self._call(secrets.randbits(31), "task", "profile", keep=True, check=True, profile=True)
        assert res is not None
        if not res["check"].get("match"):
            raise Stop(V.INCORRECT, f"profiled call: {res['check']['message']}", "profile")
        if res.get("events") is None:
            self.out.warnings.append(f"is it a kernel? not checked: {res.get('error', 'no profile')}")
            return
        summ = res["events"]
        is_kernel, message, figures = kernelcheck.judge(summ, self.ref.summary)
        st = self._runner("state", {}, "profile", 30.0)
        if st.get("ext_errors"):
            is_kernel = False
            message = (f"the custom kernel raised {st['ext_errors']} time(s) ({st.get('ext_error', '')[:200]}) and "
                       f"the outputs came from a fallback: {message}")
        self.out.kernel = dict(figures, is_kernel=is_kernel, message=message,
                               kernels=summ.get("kernels", [])[:10], ops=summ.get("ops", [])[:10])
        self.out.checked.append("kernel(profile of the candidate's forward)")
        if self.want_profile:
            total = float(summ.get("custom_ms", 0.0)) + sum((summ.get("library_ms") or {}).values()) + \
                float(summ.get("data_ms", 0.0))
            ops = [{"name": "custom kernels", "device_ms": summ.get("custom_ms", 0.0),
                    "share": (summ.get("custom_ms", 0.0) / total) if total else 0.0, "calls": 1, "shapes": ""}]
            ops += [{"name": o["name"], "device_ms": o["ms"], "share": o["ms"] / total if total else 0.0, "calls": 1,
                     "shapes": ""} for o in summ.get("ops", [])]
            self.out.profile = {"device": self.device_label, "total_ms": total, "ops": ops}

    def _end_checks(self) -> None:
        """With the runner gone, the reference must run as fast as it did beside it (GPU only: on the CPU the
        runner was stopped while the reference ran, so nothing of it could compete)."""
        if not (self.time_it and self.device.startswith("cuda") and self.out.timing):
            return
        assert self.runner is not None
        self.runners.release(self.runner, tainted=True)
        self.runner = None
        seeds = [secrets.randbits(31) for _ in range(10)]
        alone = statistics.median(self._referee("time", {"which": "eager", "seeds": seeds})["ms"])
        beside = self.out.timing["eager"]["median_ms"]
        self.out.timing["eager_alone_ms"] = alone
        if beside > CONTENTION_RATIO * alone + 0.02:
            raise Stop(V.TAMPERED, f"the reference ran {beside / alone:.2f}x slower while the candidate's process "
                                   f"was alive ({beside:.4g} ms vs {alone:.4g} ms alone): something of the "
                                   "candidate's kept the device busy", "time")

    # set by the evaluator before run()
    candidate_src: str = ""
    cache_dir: str = ""
    device_label: str = ""
    limits: dict = {}  # noqa: RUF012  (the device's measured and specified limits, set by the evaluator)


def _phase(op: str, stage: str) -> str:
    what = {"attach": "start-up", "load": "the import of the candidate module", "init": "ModelNew(...)",
            "to_device": "ModelNew.to(device)", "prepare": "a call", "call": "forward", "collect": "forward",
            "profile": "the profiled forward", "state": "a state check"}.get(op)
    return f"{stage} ({what})" if what and stage in ("verify", "time", "profile") else (what or stage)


def _timing_note(t: dict | None) -> str:
    if not t:
        return ""
    c = t.get("candidate") or {}
    note = f"median {c.get('median_ms', 0):.4g} ms over {c.get('calls', 0)} calls ({t.get('checked_calls', 0)} checked)"
    if t.get("speedup_eager"):
        note += f"; {t['speedup_eager']:.2f}x eager"
    if t.get("speedup_compiled"):
        note += f", {t['speedup_compiled']:.2f}x torch.compile"
    return note
