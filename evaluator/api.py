"""The public API: `Evaluator` runs the stages for candidates and returns `Verdict`s.

parse and screen run here (static, nothing executed); compile runs in a pool of CPU workers (reused: they only
build), verify/time/profile in a single-use device worker (one at a time per device; a fresh, pre-started
worker for each candidate, so no state leaks from one candidate to the next and a poisoned CUDA context dies
with its process). This module never imports torch.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import threading
import time as _time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import verdict as V
from .parse import ParseFailure, check_candidate, check_reference
from .pool import Pool, WorkerError, scrubbed_env
from .screen import screen
from .settings import EvalSettings
from .verdict import (
    Correctness,
    Finding,
    Profile,
    Stage,
    Timing,
    TimingStats,
    Verdict,
    profile_from_dict,
)

OnStage = Callable[[str, str], None]

_live: weakref.WeakSet[Evaluator] = weakref.WeakSet()


class EvaluatorError(Exception):
    """The evaluator itself cannot work (closed, no device, worker start failed)."""


class _StartCancelled(Exception):
    """The caller's cancel event was set while it waited for the evaluator to start."""


@atexit.register
def _close_all() -> None:  # pragma: no cover - interpreter exit
    for ev in list(_live):
        ev.close()


_CUDA_FATAL = re.compile(
    r"illegal memory access|illegal address|unspecified launch failure|misaligned address|illegal instruction"
    r"|device-side assert|cudaErrorLaunchFailure|AcceleratorError|CUDA error: an? ", re.IGNORECASE)


def _notify(on_stage: OnStage | None, stage: str, message: str) -> None:
    if on_stage is None:
        return
    try:
        on_stage(stage, message)
    except Exception:  # a broken callback must not break the evaluation  # noqa: S110, BLE001
        pass


class _Run:
    """Collects the stages of one evaluation."""

    def __init__(self, candidate_src: str) -> None:
        self.t0 = _time.perf_counter()
        self.v = Verdict(status=V.INFRA_ERROR, source_hash=hashlib.sha256(candidate_src.encode()).hexdigest()[:16])

    def stage(self, name: str, ok: bool, seconds: float, message: str = "", skipped: bool = False) -> None:
        self.v.stages.append(Stage(name=name, ok=ok, seconds=round(seconds, 4), message=message, skipped=skipped))
        if ok and not skipped:
            self.v.checked.append(name)

    def done(self, status: str, message: str, not_checked: list[str] | None = None) -> Verdict:
        self.v.status, self.v.message = status, message
        done = {s.name for s in self.v.stages if s.ok and not s.skipped}
        self.v.not_checked = not_checked if not_checked is not None else [
            s for s in ("compile", "verify", "time") if s not in done]
        self.v.seconds = round(_time.perf_counter() - self.t0, 3)
        return self.v


class Evaluator:
    """A pool of worker processes that turns (reference, candidate) sources into verdicts. Thread-safe."""

    def __init__(self, settings: EvalSettings | None = None) -> None:
        self.settings = settings or EvalSettings()
        self._lock = threading.Lock()
        self._closed = False
        self._device: str | None = None
        self._public_info: dict[str, Any] = {}
        self._limits: dict[str, Any] = {}
        self._device_pool: Pool | None = None
        self._compile_pool: Pool | None = None
        self._start_error: str | None = None
        self._torch: tuple[str | None, str | None] = (None, None)
        self._starter: threading.Thread | None = None
        self._starting_pool: Pool | None = None
        self._started = threading.Event()
        os.makedirs(self.settings.cache_dir, exist_ok=True)
        _live.add(self)

    # -- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self) -> Evaluator:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill every worker (and their compilers); idempotent."""
        with self._lock:
            self._closed = True
            pools = [p for p in (self._device_pool, self._compile_pool, self._starting_pool) if p is not None]
        for p in pools:
            p.close()

    def worker_pids(self) -> list[int]:
        pools = (self._device_pool, self._compile_pool, self._starting_pool)
        return [pid for p in pools if p is not None for pid in p.pids()]

    def _requested_device(self) -> str:
        d = self.settings.device
        if d == "cuda":
            return f"cuda:{self.settings.gpu}"
        return d

    def _start(self, cancel: threading.Event | None = None) -> None:
        """Start the pools once (a device worker probes the device: torch import, CUDA context, bandwidth).

        The start runs in its own thread and callers wait for it, so a caller whose `cancel` is set stops
        waiting within 0.1 s (the start carries on for the next caller); raises _StartCancelled then."""
        with self._lock:
            if self._closed:
                raise EvaluatorError("the evaluator is closed")
            if self._device_pool is not None:
                return
            if self._start_error:
                raise EvaluatorError(self._start_error)
            if self._starter is None:
                self._started.clear()
                self._starter = threading.Thread(target=self._start_now, name="klsp-evaluator-start", daemon=True)
                self._starter.start()
        while not self._started.wait(0.1):
            if cancel is not None and cancel.is_set():
                raise _StartCancelled()
        with self._lock:
            if self._start_error:
                raise EvaluatorError(self._start_error)
            if self._device_pool is None:
                raise EvaluatorError("the evaluator is closed")

    def _start_now(self) -> None:
        s = self.settings
        env = scrubbed_env({"KLSP_DEVICE": self._requested_device(), "KLSP_GPU": str(s.gpu)})
        pool = Pool("device", env, size=1, warm=s.warm_workers, single_use=True)
        compile_pool: Pool | None = None
        with self._lock:
            self._starting_pool = pool  # close() kills it even mid-start
        try:
            try:
                w = pool.acquire()
                ready = w.wait_ready()
                if ready.get("error"):
                    raise EvaluatorError(ready["error"])
                info = w.call("info", {}, timeout=120.0)
                if not info.get("ok"):
                    raise EvaluatorError(f"device probe failed: {info.get('error')}")
                pool.release(w, tainted=False)
            except (WorkerError, EvaluatorError) as e:
                pool.close()
                with self._lock:
                    self._start_error = ("the evaluator was closed while starting" if self._closed else
                                         f"could not start a device worker: {getattr(e, 'message', e)}")
                return
            arch = ready.get("arch_list") or ""
            if arch and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
                pool.env = dict(pool.env, TORCH_CUDA_ARCH_LIST=arch)
            n = s.compile_workers or min(8, os.cpu_count() or 1)
            cenv = dict(pool.env, CUDA_VISIBLE_DEVICES="", KLSP_DEVICE="cpu")
            compile_pool = Pool("compile", cenv, size=n, warm=min(s.warm_workers, n), single_use=False)
            with self._lock:
                if self._closed:  # closed while starting: nothing may outlive close()
                    pool.close()
                    compile_pool.close()
                    return
                self._device = ready["device"]
                self._torch = (ready.get("torch"), ready.get("torch_cuda"))
                self._public_info, self._limits = info["public"], info["limits"]
                self._device_pool, self._compile_pool = pool, compile_pool
            pool.refill_async()
            compile_pool.refill_async()
        except Exception as e:  # noqa: BLE001  (a bug here must not leave callers waiting forever)
            pool.close()
            if compile_pool is not None:
                compile_pool.close()
            with self._lock:
                self._start_error = f"could not start the evaluator: {e}"
        finally:
            with self._lock:
                self._starter = self._starting_pool = None
            self._started.set()

    @property
    def device(self) -> str:
        self._start()
        return self._device or ""

    def device_info(self) -> dict[str, Any]:
        """name, capability, memory, measured bandwidth/peak on a GPU; {"name": "cpu"} otherwise."""
        self._start()
        return dict(self._public_info)

    # -- evaluation ----------------------------------------------------------------------------------------
    def _worker_settings(self) -> dict[str, Any]:
        return asdict(self.settings)

    def evaluate(self, reference_src: str, candidate_src: str, *, cancel: threading.Event | None = None,
                 on_stage: OnStage | None = None, profile: bool = False, time: bool = True) -> Verdict:
        run = _Run(candidate_src)
        v = run.v
        s = self.settings
        # parse
        t0 = _time.perf_counter()
        _notify(on_stage, "parse", "parsing")
        try:
            rtree = check_reference(reference_src)
        except ParseFailure as e:
            run.stage("parse", False, _time.perf_counter() - t0, e.message)
            return run.done(V.INFRA_ERROR, e.message)
        try:
            check_candidate(candidate_src, rtree)
        except ParseFailure as e:
            run.stage("parse", False, _time.perf_counter() - t0, e.message)
            return run.done(V.PARSE_ERROR, e.message)
        run.stage("parse", True, _time.perf_counter() - t0, "ModelNew found")
        # screen
        t0 = _time.perf_counter()
        _notify(on_stage, "screen", "screening")
        v.findings = screen(candidate_src)
        rejects = [f for f in v.findings if f.severity == "reject"]
        if rejects and s.screen_rejects:
            msg = "; ".join(f"{f.rule} (line {f.line}): {f.message}" for f in rejects[:3])
            run.stage("screen", False, _time.perf_counter() - t0, msg)
            return run.done(V.REJECTED, f"rejected by the static screen: {msg}")
        if rejects:
            v.warnings.append(f"screen findings not enforced (screen_rejects=False): {len(rejects)}")
        run.stage("screen", True, _time.perf_counter() - t0,
                  f"{len(v.findings)} warning(s)" if v.findings else "clean")
        if cancel is not None and cancel.is_set():
            return run.done(V.CANCELLED, "cancelled")
        try:
            self._start(cancel)
        except _StartCancelled:
            return run.done(V.CANCELLED, "cancelled")
        except EvaluatorError as e:
            return run.done(V.CANCELLED if self._closed else V.INFRA_ERROR, str(e))
        v.device = self._device or ""
        # compile
        comp = self._compile(run, candidate_src, cancel, on_stage)
        if comp is None:
            return v
        if self._device == "cpu" and comp.get("cuda"):
            return self._no_device(run, comp)
        # verify, time, profile
        return self._run_on_device(run, reference_src, candidate_src, comp, cancel, on_stage, profile, time)

    def _drop_build_locks(self, candidate_src: str) -> None:
        """A build killed mid-way leaves torch's `lock` file in its folder, and every later build of the same
        source would wait on it until its own timeout: remove it (the folder is private to this source)."""
        if not self._torch[0] or self._compile_pool is None:
            return
        from .loader import build_key

        key = build_key(candidate_src, self._torch[0], self._torch[1],
                        self._compile_pool.env.get("TORCH_CUDA_ARCH_LIST", ""))
        for lock in Path(self.settings.cache_dir, key).glob("*/lock"):
            try:
                lock.unlink()
            except OSError:
                pass

    def _compile(self, run: _Run, candidate_src: str, cancel: threading.Event | None,
                 on_stage: OnStage | None) -> dict | None:
        s = self.settings
        t0 = _time.perf_counter()
        assert self._compile_pool is not None
        if self._torch[0]:  # already built: skip the compile worker, the device worker's ninja checks it on load
            from .loader import build_key

            key = build_key(candidate_src, self._torch[0], self._torch[1],
                            self._compile_pool.env.get("TORCH_CUDA_ARCH_LIST", ""))
            if list(Path(s.cache_dir, key).glob("*/*.so")):
                _notify(on_stage, "compile", "found in the build cache")
                return {"status": "ok", "cached": True, "calls": ["?"], "cuda": False, "seconds": 0.0,
                        "wall_s": _time.perf_counter() - t0, "from_cache": True}
        _notify(on_stage, "compile", "waiting for a compile worker")
        try:
            w = self._compile_pool.acquire(cancel)
        except WorkerError as e:
            run.stage("compile", False, _time.perf_counter() - t0, e.message)
            run.done(V.CANCELLED if e.kind == "cancelled" else V.INFRA_ERROR, e.message)
            return None
        _notify(on_stage, "compile", "compiling")
        try:
            res = w.call("compile", {"candidate_src": candidate_src, "cache_dir": s.cache_dir,
                                     "device": "cpu" if self._device == "cpu" else "cuda",
                                     "compile_timeout": s.compile_timeout},
                         timeout=s.compile_timeout, cancel=cancel,
                         on_event=lambda m: _notify(on_stage, "compile", str(m.get("message", ""))))
            self._compile_pool.release(w, tainted=True)
        except WorkerError as e:
            self._compile_pool.release(w, tainted=True)
            self._drop_build_locks(candidate_src)
            secs = _time.perf_counter() - t0
            status = {"cancelled": V.CANCELLED, "timeout": V.COMPILE_TIMEOUT}.get(e.kind, V.CRASHED)
            msg = f"compile timeout after {s.compile_timeout:g} s" if e.kind == "timeout" else e.message
            if e.kind == "crashed":
                msg = f"{e.message} while compiling"
            run.v.log = e.log_tail
            run.stage("compile", False, secs, msg)
            run.done(status, msg)
            return None
        secs = _time.perf_counter() - t0
        if not res.get("ok"):
            run.v.detail = res.get("traceback", "")
            run.stage("compile", False, secs, res.get("error", "compile worker failed"))
            run.done(V.INFRA_ERROR, f"compile worker failed: {res.get('error')}")
            return None
        if res["status"] == "compile_error":
            run.v.compiler_log = res["log"]
            first = next((ln for ln in res["log"].splitlines() if "error" in ln.lower()), "see compiler_log")
            run.stage("compile", False, secs, first[:300])
            run.done(V.COMPILE_ERROR, f"compile error: {first[:300]}")
            return None
        if res["status"] == "exec_error":
            if self._device == "cpu":
                run.v.detail = res.get("traceback", "")
                run.stage("compile", False, secs, f"the module failed at import: {res['error']}")
                run.done(V.RUNTIME_ERROR, f"the candidate module failed at import: {res['error'][:300]}")
                return None
            run.v.warnings.append(f"module import failed without a GPU ({res['error'][:200]}); retried on the device")
        res["wall_s"] = secs
        return res

    @staticmethod
    def _compile_note(comp: dict) -> str:
        calls = comp.get("calls") or []
        if comp.get("status") == "exec_error":
            return "deferred to the device"
        if not calls:
            return "no extension built (pure PyTorch)"
        if comp.get("from_cache"):
            return "cached build (found in the build cache; ninja checked it on load)"
        if comp.get("cached"):
            return f"cached build ({len(calls)} extension(s), ninja up to date)"
        return f"built {len(calls)} extension(s) in {comp.get('seconds', 0):.1f} s"

    def _no_device(self, run: _Run, comp: dict) -> Verdict:
        checked = comp.get("nvcc_checked") or []
        notes = "; ".join(comp.get("notes") or [])
        if checked and all(c is True for c in checked):
            note = "compiled with nvcc; not run: no CUDA device"
            run.stage("compile", True, comp["wall_s"], f"{note} ({notes})")
            run.v.checked[-1] = "compile(nvcc -c of cuda_sources)"
            not_checked = ["compile(torch extension + link)", "verify", "time", "profile"]
        else:
            note = f"{notes or 'not compile-checked'}; not run: no CUDA device"
            run.stage("compile", False, comp["wall_s"], note, skipped=True)
            not_checked = ["compile", "verify", "time", "profile"]
        for name in ("verify", "time"):
            run.stage(name, False, 0.0, "no CUDA device", skipped=True)
        return run.done(V.INFRA_ERROR, note, not_checked=not_checked)

    def _run_on_device(self, run: _Run, reference_src: str, candidate_src: str, comp: dict,
                       cancel: threading.Event | None, on_stage: OnStage | None, profile: bool,
                       time: bool) -> Verdict:
        s = self.settings
        v = run.v
        assert self._device_pool is not None
        t0 = _time.perf_counter()
        _notify(on_stage, "verify", "waiting for the device")
        try:
            w = self._device_pool.acquire(cancel)
        except WorkerError as e:
            run.stage("compile", True, comp["wall_s"], self._compile_note(comp))
            return run.done(V.CANCELLED if e.kind == "cancelled" else V.INFRA_ERROR, e.message)
        queued = _time.perf_counter() - t0
        time_budget = s.run_timeout + 3 * s.timing_budget_s + 120.0  # torch.compile of the reference is slow
        args = {"reference_src": reference_src, "candidate_src": candidate_src, "cache_dir": s.cache_dir,
                "settings": self._worker_settings(), "time": time, "profile": profile, "limits": self._limits,
                "device_public": self._public_info}
        current = {"stage": "load"}

        def on_event(m: dict) -> None:
            current["stage"] = str(m.get("stage"))
            _notify(on_stage, current["stage"] if current["stage"] != "load" else "compile", str(m.get("message", "")))

        try:
            res = w.call("run", args, timeout=s.compile_timeout, cancel=cancel, on_event=on_event,
                         stage_timeouts={"load": s.compile_timeout, "verify": s.run_timeout, "time": time_budget,
                                         "profile": s.run_timeout})
        except WorkerError as e:
            self._device_pool.release(w, tainted=True)
            run.stage("compile", True, comp["wall_s"], self._compile_note(comp))
            stage = current["stage"] if current["stage"] != "load" else "compile"
            secs = _time.perf_counter() - t0 - queued
            v.log = e.log_tail
            if e.kind == "cancelled":
                run.stage(stage, False, secs, "cancelled")
                return run.done(V.CANCELLED, "cancelled")
            if e.kind == "timeout":
                limit = {"compile": s.compile_timeout, "verify": s.run_timeout, "time": time_budget,
                         "profile": s.run_timeout}.get(stage, s.run_timeout)
                msg = f"timeout after {limit:g} s during {stage}; the worker was killed"
                run.stage(stage, False, secs, msg)
                return run.done(V.COMPILE_TIMEOUT if stage == "compile" else V.TIMEOUT, msg)
            msg = f"{e.message} during {stage}; the worker was replaced"
            run.stage(stage, False, secs, msg)
            return run.done(V.CRASHED, msg)
        self._device_pool.release(w, tainted=True)
        if not res.get("ok"):
            run.stage("compile", True, comp["wall_s"], self._compile_note(comp))
            v.detail = res.get("traceback", "")
            error = str(res.get("error", ""))
            if _CUDA_FATAL.search(error):
                # A sticky CUDA error (illegal address, launch failure, device assert) poisons the context: the
                # candidate crashed the GPU process, which is killed and replaced (it is single-use anyway).
                first = error.strip().splitlines()[0] if error.strip() else "CUDA error"
                stage = current["stage"] if current["stage"] != "load" else "compile"
                run.stage(stage, False, _time.perf_counter() - t0 - queued, first)
                return run.done(V.CRASHED, f"{first} (the CUDA context is poisoned; the worker was replaced)")
            return run.done(V.INFRA_ERROR, f"device worker failed: {error}")
        load_s = float(res.get("load_s", 0.0))
        status = res.get("status", V.INFRA_ERROR)
        if status == V.COMPILE_ERROR:
            v.compiler_log = res.get("compiler_log", "")
            run.stage("compile", False, comp["wall_s"] + load_s, res.get("message", ""))
            return run.done(V.COMPILE_ERROR, res.get("message", "compile error"))
        run.stage("compile", not (status in (V.RUNTIME_ERROR, V.CRASHED) and not res.get("stages")),
                  comp["wall_s"] + load_s, f"{self._compile_note(comp)}; loaded on the device in {load_s:.2f} s")
        for st in res.get("stages", []):
            run.stage(st["name"], st["ok"], st["seconds"], st.get("message", ""), st.get("skipped", False))
        v.warnings += res.get("warnings", [])
        v.detail = res.get("detail", "") or v.detail
        v.device = res.get("device") or v.device
        if res.get("correctness"):
            v.correctness = Correctness(**{k: res["correctness"].get(k) for k in Correctness.__dataclass_fields__
                                           if k in res["correctness"]})
        if res.get("timing"):
            t = dict(res["timing"])
            for k in ("candidate", "eager", "compiled"):
                if t.get(k):
                    t[k] = TimingStats(**t[k])
            v.timing = Timing(**{k: t.get(k) for k in Timing.__dataclass_fields__ if k in t})
        if res.get("profile"):
            v.profile = profile_from_dict(res["profile"])
        message = res.get("message", "")
        if status == V.CORRECT:
            message = self._summary(v)
        not_checked = [n for n in ("verify", "time") if not any(st.name == n and st.ok and not st.skipped
                                                               for st in v.stages)]
        return run.done(status, message, not_checked=not_checked)

    @staticmethod
    def _summary(v: Verdict) -> str:
        c = v.correctness
        parts = [f"correct ({c.passed}/{c.trials} trials, max abs err {c.max_abs_err:.1e})" if c else "correct"]
        if v.timing and v.timing.candidate:
            t = v.timing
            parts.append(f"{t.candidate.median_ms:.4g} ms")
            if t.speedup_eager:
                parts.append(f"{t.speedup_eager:.2f}x eager")
            if t.speedup_compiled:
                parts.append(f"{t.speedup_compiled:.2f}x torch.compile")
        if any(w.startswith("precision") for w in v.warnings):
            parts.append("WARNING: precision")
        return ", ".join(parts)

    def evaluate_many(self, reference_src: str, candidate_srcs: list[str], *,
                      cancel: threading.Event | None = None, on_stage: OnStage | None = None,
                      profile: bool = False, time: bool = True) -> list[Verdict]:
        """Compile all candidates in parallel on the CPU workers; verify/time them on the device one at a time."""
        if not candidate_srcs:
            return []

        def one(i: int, src: str) -> Verdict:
            cb = None if on_stage is None else (lambda st, msg: on_stage(st, f"candidate {i}: {msg}"))
            return self.evaluate(reference_src, src, cancel=cancel, on_stage=cb, profile=profile, time=time)

        with ThreadPoolExecutor(max_workers=min(len(candidate_srcs), 32), thread_name_prefix="klsp-eval") as ex:
            futures = [ex.submit(one, i, src) for i, src in enumerate(candidate_srcs)]
            return [f.result() for f in futures]

    def profile(self, reference_src: str, *, cancel: threading.Event | None = None,
                on_stage: OnStage | None = None) -> Profile:
        """torch.profiler top operators and the roofline of the reference (for profile-guided prompts)."""
        try:
            check_reference(reference_src)
        except ParseFailure as e:
            raise EvaluatorError(e.message) from None
        try:
            self._start(cancel)
        except _StartCancelled:
            raise EvaluatorError("cancelled") from None
        assert self._device_pool is not None
        try:
            w = self._device_pool.acquire(cancel)
        except WorkerError as e:
            raise EvaluatorError(e.message) from None
        try:
            res = w.call("profile", {"reference_src": reference_src, "cache_dir": self.settings.cache_dir,
                                     "settings": self._worker_settings(), "limits": self._limits,
                                     "device_public": self._public_info},
                         timeout=self.settings.run_timeout, cancel=cancel,
                         on_event=lambda m: _notify(on_stage, "profile", str(m.get("message", ""))))
        except WorkerError as e:
            raise EvaluatorError(f"profiling the reference: {e.message}") from None
        finally:
            self._device_pool.release(w, tainted=True)
        if not res.get("ok") or res.get("status") != "ok":
            raise EvaluatorError(res.get("message") or res.get("error") or "profiling failed")
        return profile_from_dict(res["profile"])


__all__ = ["Evaluator", "EvaluatorError", "Finding"]
