"""How one evaluation's verdict is put together: `Run` collects its stages as they end (what each checked, what
was not), and the functions here turn each stage's own result (the static parse and screen, the compile stage's
`CompileRecord`, the device stage's `Outcome`) into the verdict's stages, status, message and figures. Nothing
here starts a worker or runs candidate code."""

from __future__ import annotations

import hashlib
import time as _time
from collections.abc import Callable

from . import verdict as V
from .errors import EvaluatorClosed, ReferenceFailed
from .processes.handle import WorkerError
from .stages.compile import CompileRecord
from .stages.device.session import Outcome
from .stages.parse import ParseFailure, check_candidate, check_reference
from .stages.screen import screen
from .verdict import Stage, Verdict

OnStage = Callable[[str, str], None]


def notify(on_stage: OnStage | None, stage: str, message: str) -> None:
    if on_stage is None:
        return
    try:
        on_stage(stage, message)
    except Exception:  # a broken callback must not break the evaluation  # noqa: S110, BLE001
        pass


def ran(stages: list[Stage], status: str) -> set[str]:
    """The stages that checked something: those that passed, and those that ran and found the candidate wanting
    (a verify that failed checked the outputs: its failure is the verdict). Not one skipped, nor one stopped by a
    cancel or by our side."""
    judged = status not in (V.CANCELLED, V.INFRA_ERROR)
    return {s.name for s in stages if not s.skipped and (s.ok or judged)}


class Run:
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
        done = ran(self.v.stages, status)
        self.v.checked += [s.name for s in self.v.stages if s.name in done and not s.ok]
        self.v.not_checked = (not_checked if not_checked is not None else
                              [s for s in ("compile", "verify", "time") if s not in done]) + self.v.not_checked
        self.v.not_checked = list(dict.fromkeys(self.v.not_checked))
        self.v.checked = list(dict.fromkeys(self.v.checked))
        self.v.seconds = round(_time.perf_counter() - self.t0, 3)
        return self.v


# -- parse and screen (static: nothing is run) ---------------------------------------------------------------------
def static_stages(run: Run, reference_src: str, candidate_src: str, screen_rejects: bool,
                  on_stage: OnStage | None) -> Verdict | None:
    """The parse and screen stages, recorded on `run`; the verdict where one of them ends it, else None."""
    v = run.v
    # parse
    t0 = _time.perf_counter()
    notify(on_stage, "parse", "parsing")
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
    # screen: warnings (the sandbox and the referee are the boundary, not patterns)
    t0 = _time.perf_counter()
    notify(on_stage, "screen", "screening")
    v.findings = screen(candidate_src)
    rejects = [f for f in v.findings if f.severity == "reject"]
    if rejects and screen_rejects:
        msg = "; ".join(f"{f.rule} (line {f.line}): {f.message}" for f in rejects[:3])
        run.stage("screen", False, _time.perf_counter() - t0, msg)
        return run.done(V.REJECTED, f"rejected by the static screen: {msg}")
    n_warn = sum(1 for f in v.findings if f.severity == "warn")
    run.stage("screen", True, _time.perf_counter() - t0, f"{n_warn} warning(s)" if n_warn else "clean")
    return None


# -- compile -------------------------------------------------------------------------------------------------------
def compile_failed(run: Run, e: WorkerError, secs: float, compile_timeout: float) -> None:
    """The compile stage's worker failed (cancelled, timed out, wrote to the oracle's channel, died)."""
    if e.kind == "cancelled":
        run.stage("compile", False, secs, "cancelled")
        run.done(V.CANCELLED, "cancelled")
        return
    status = V.COMPILE_TIMEOUT if e.kind == "timeout" else (V.TAMPERED if e.kind == "protocol" else V.CRASHED)
    msg = (f"compile timeout after {compile_timeout:g} s" if e.kind == "timeout" else
           f"the candidate wrote to the oracle's channel while compiling ({e.message})"
           if e.kind == "protocol" else f"{e.message} while importing the candidate (compile stage)")
    run.v.log = e.log_tail
    run.stage("compile", False, secs, msg)
    run.done(status, msg)


def compiled(run: Run, res: CompileRecord, secs: float, compile_timeout: float, cpu: bool) -> CompileRecord | None:
    """The compile stage's record, or None where it ends the verdict (recorded on `run`)."""
    status = res.status
    if status == "infra_error":
        run.v.detail = res.traceback
        run.stage("compile", False, secs, res.error)
        run.done(V.INFRA_ERROR, f"compile worker failed: {res.error}")
        return None
    if status in ("compile_error", "compile_timeout"):
        run.v.compiler_log = res.log
        first = next((ln for ln in res.log.splitlines() if "error" in ln.lower()),
                     res.log.strip().splitlines()[0] if res.log.strip() else "see compiler_log")
        run.stage("compile", False, secs, first[:300])
        if status == "compile_timeout":
            run.done(V.COMPILE_TIMEOUT, f"compile timeout after {compile_timeout:g} s")
        else:
            run.done(V.COMPILE_ERROR, f"compile error: {first[:300]}")
        return None
    if status == "exec_error" and cpu and not res.cuda:
        run.v.detail = res.traceback
        run.stage("compile", False, secs, f"the module failed at import: {res.error[:300]}")
        run.done(V.RUNTIME_ERROR, f"the candidate module failed at import: {res.error[:300]}")
        return None
    return res


def compile_note(comp: CompileRecord) -> str:
    calls = comp.calls
    if comp.status == "exec_error":
        return "import deferred to the device"
    if not calls:
        return "no extension built (pure PyTorch)"
    built = [c for c in calls if not c.cached]
    if not built:  # where this process built them (ahead, from the model's stream, or for an earlier evaluation of
        # the same source), how they were built
        how = "; ".join(dict.fromkeys(c.note for c in calls if c.note))
        return f"cached build ({len(calls)} extension(s) from the build cache" + (f", built as [{how}])" if how
                                                                                   else ")")
    paths = "; ".join(dict.fromkeys(c.note for c in built if c.note))
    return (f"built {len(built)} extension(s) in {max(c.seconds for c in built):.1f} s"
            + (f", {len(calls) - len(built)} from the cache" if len(built) < len(calls) else "")
            + (f" [{paths}]" if paths else ""))


def no_device(run: Run, comp: CompileRecord) -> Verdict:
    """CUDA sources on a machine without a CUDA device: compile-checked at most, never run."""
    calls = [c for c in comp.calls if c.cuda]
    notes = "; ".join(c.note for c in calls if c.note)
    if calls and all(c.nvcc is True for c in calls):
        note = "compiled with nvcc; not run: no CUDA device"
        run.stage("compile", True, comp.wall_s, f"{note} ({notes})")
        run.v.checked[-1] = "compile(nvcc -c of cuda_sources)"
        not_checked = ["compile(torch extension + link)", "verify", "time", "profile"]
    else:
        note = f"{notes or 'not compile-checked'}; not run: no CUDA device"
        run.stage("compile", False, comp.wall_s, note, skipped=True)
        not_checked = ["compile", "verify", "time", "profile"]
    for name in ("verify", "time"):
        run.stage(name, False, 0.0, "no CUDA device", skipped=True)
    return run.done(V.INFRA_ERROR, note, not_checked=not_checked)


# -- the device stage ----------------------------------------------------------------------------------------------
def device_verdict(run: Run, comp: CompileRecord, out: Outcome, queued: float, device_label: str) -> Verdict:
    """The device stage's outcome into the verdict: the compile stage (it ends with the load on the device), the
    device stage's own stages, what it checked, its figures, and the summary of a correct one."""
    v = run.v
    run.stage("compile", not (out.status in (V.RUNTIME_ERROR, V.CRASHED, V.TIMEOUT) and not out.stages
                              and out.load_s == 0.0),
              comp.wall_s + out.load_s,
              f"{compile_note(comp)}; loaded on the device in {out.load_s:.2f} s"
              + (f" (its runner was ready after {out.start_s:.1f} s more)" if out.start_s >= 0.05 else "")
              + (f"; waited {queued + out.waited_s:.1f} s for the device (other candidates' turns)"
                 if queued + out.waited_s > 0.5 else ""))
    for name, ok, secs, msg, skipped in out.stages:
        run.stage(name, ok, secs, msg, skipped)
    v.checked += out.checked
    v.not_checked += out.not_checked
    v.warnings += out.warnings
    v.detail = out.detail or v.detail
    v.log = out.log or v.log
    v.device = device_label
    v.correctness = out.correctness or v.correctness  # the device stage's own dataclasses, as they are
    v.timing = out.timing or v.timing
    v.kernel = out.kernel or v.kernel
    v.profile = out.profile or v.profile
    message = out.message
    if out.status == V.CORRECT:
        message = summary(v)
    not_checked = [n for n in ("verify", "time") if n not in ran(v.stages, out.status)]
    return run.done(out.status, message, not_checked=not_checked)


def summary(v: Verdict) -> str:
    """A correct verdict's message: trials, time, speedups, the kernel finding."""
    c = v.correctness
    parts = [f"correct ({c.passed}/{c.trials} trials, max abs err {c.max_abs_err:.1e})" if c else "correct"]
    if v.timing and v.timing.candidate:
        t = v.timing
        parts.append(f"{t.candidate.median_ms:.4g} ms")
        if t.speedup_eager:
            parts.append(f"{t.speedup_eager:.2f}x eager")
        if t.speedup_compiled:
            parts.append(f"{t.speedup_compiled:.2f}x torch.compile")
        elif t.compiled_pending:
            parts.append("torch.compile not timed (not compiled yet)")
    if v.kernel is not None:
        parts.append({V.OWN_CODE: "own code", V.LIBRARY_ONLY: "library operators only",
                      V.KERNEL_NOT_CHECKED: "own code not checked"}.get(v.kernel.finding, v.kernel.finding))
    if any(w.startswith("precision") for w in v.warnings):
        parts.append("WARNING: precision")
    return ", ".join(parts)


def no_referee(run: Run, comp: CompileRecord, e: Exception) -> Verdict:
    """The device stage could not have its referee: the reference failed (the caller's input), the referee's worker
    failed or was cancelled, or the evaluator itself could not go on."""
    v = run.v
    if isinstance(e, ReferenceFailed):
        run.stage("compile", True, comp.wall_s, compile_note(comp))
        v.detail = e.detail
        return run.done(V.INFRA_ERROR, e.message)
    if isinstance(e, WorkerError):
        run.stage("compile", True, comp.wall_s, compile_note(comp))
        v.log = e.log_tail
        return run.done(V.CANCELLED if e.kind == "cancelled" else V.INFRA_ERROR,
                        "cancelled" if e.kind == "cancelled" else f"the referee failed: {e.message}")
    if isinstance(e, EvaluatorClosed):  # closed while this call waited for its referee: cancelled, nobody's fault
        run.stage("compile", True, comp.wall_s, compile_note(comp))
        return run.done(V.CANCELLED, str(e))
    return run.done(V.INFRA_ERROR, str(e))
