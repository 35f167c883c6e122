"""The oracle's output: plain, JSON-serialisable data.

A `Verdict` says what the oracle found for one candidate: which stages ran, how long each took and why one
failed, the correctness figures, the timings, and (optionally) a profile. Nothing here imports torch, so the
language server and the generation engine can read verdicts without loading CUDA.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Overall status, in the order a candidate can fail.
PARSE_ERROR = "parse_error"  # syntax error, no ModelNew, signature mismatch
REJECTED = "rejected"  # the static screen refused it
COMPILE_ERROR = "compile_error"
COMPILE_TIMEOUT = "compile_timeout"
RUNTIME_ERROR = "runtime_error"  # raised an exception while running
CRASHED = "crashed"  # the worker died: segfault, illegal address, OOM-kill
TIMEOUT = "timeout"  # the run hung past its timeout; the worker was killed
INCORRECT = "incorrect"  # ran, but the outputs disagree with the reference
TAMPERED = "tampered"  # changed torch's or the oracle's state, fooled the clock, or left work running
# Older records only: a correct candidate whose library operators did the work. The evaluator no longer produces
# it (such a candidate is `correct` with a `library_only` kernel finding); histories on disk may still hold it.
NOT_A_KERNEL = "not_a_kernel"
CORRECT = "correct"
CANCELLED = "cancelled"
INFRA_ERROR = "infra_error"  # our fault, not the candidate's (reference failed, no device, ...)

STATUSES = (
    PARSE_ERROR,
    REJECTED,
    COMPILE_ERROR,
    COMPILE_TIMEOUT,
    RUNTIME_ERROR,
    CRASHED,
    TIMEOUT,
    INCORRECT,
    TAMPERED,
    NOT_A_KERNEL,
    CORRECT,
    CANCELLED,
    INFRA_ERROR,
)

STAGES = ("parse", "screen", "compile", "verify", "time", "profile")

# The kernel finding of a correct candidate (`KernelCheck.finding`): what its own machine code did.
OWN_CODE = "own_code"  # its own code did some class of the reference's work
LIBRARY_ONLY = "library_only"  # library operators do every class of the reference's work, or none of its code ran
KERNEL_NOT_CHECKED = "not_checked"  # no profile could be taken (the message says why)
KERNEL_FINDINGS = (OWN_CODE, LIBRARY_ONLY, KERNEL_NOT_CHECKED)


@dataclass
class Stage:
    name: str  # one of STAGES
    ok: bool
    seconds: float = 0.0
    message: str = ""  # the reason on failure, a short note on success
    skipped: bool = False  # e.g. "time" without a GPU for a CUDA candidate


@dataclass
class Finding:
    """One hit of the static screen."""

    rule: str
    severity: str  # "reject" | "warn"
    message: str
    line: int = 0


@dataclass
class Correctness:
    trials: int = 0  # trials run (a failing one included; out-of-distribution ones the reference skipped excluded)
    passed: int = 0
    atol: float = 0.0
    rtol: float = 0.0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    failed_trial: int | None = None  # 0-based index of the first failing trial
    planned: int = 0  # trials planned: `trials` of the task's inputs plus the out-of-distribution ones
    where: str = ""  # e.g. "output[0][3, 17]" for the worst element
    message: str = ""  # human-readable mismatch summary (what the model sees)
    skipped: list[str] = field(default_factory=list)  # input variants not applicable (reference not finite)
    decided_by: str = ""  # "" (the tolerance) | "float64": a trial beyond fp32's reach judged by the exact answer


@dataclass
class TimingStats:
    median_ms: float
    iqr_ms: float
    mean_ms: float = 0.0
    min_ms: float = 0.0
    calls: int = 0
    ci_pct: float | None = None  # half-width of the 95 % confidence interval of the median, in % of it

    @property
    def spread(self) -> float:
        return self.iqr_ms / self.median_ms if self.median_ms else 0.0


@dataclass
class Timing:
    device: str = ""  # "cuda:0 (NVIDIA H200)" or "cpu"
    method: str = ""  # "cuda-events" | "perf-counter"
    candidate: TimingStats | None = None
    eager: TimingStats | None = None
    compiled: TimingStats | None = None  # torch.compile of the reference: timed once per loaded reference
    speedup_eager: float | None = None
    speedup_compiled: float | None = None
    roofline_ms: float | None = None  # lower bound from bytes/FLOPs against the device's measured limits
    pct_of_limit: float | None = None  # roofline_ms / candidate median * 100
    checked_calls: int = 0  # timed calls whose outputs were compared with the reference
    interleaved: bool = False  # reference and candidate timed in alternating blocks of the same run
    eager_alone_ms: float | None = None  # the reference timed again with the candidate's process gone (GPU)
    # How sure the speedup is: the half-width of its 95 % confidence interval, in % of it (from the intervals of
    # both medians). `uncertain` when that is wider than 3 % (or 3x settings.timing_ci): every place that shows
    # the speedup then shows it with its ± figure and `noise` (why, by what was measured: other processes on the device, the machine's load, or the spread itself), never as a
    # plain number.
    speedup_ci_pct: float | None = None
    uncertain: bool = False
    noise: str = ""
    batch_calls: int = 0  # calls per timed request (the outside clock spans each request)
    stopped: str = ""  # why timing stopped before its interval was narrow enough (another candidate is faster)
    # other processes' work on the device while this candidate was timed (named where the device monitor can):
    # contention, never the candidate's fault; it makes the figures uncertain
    contention: list[str] = field(default_factory=list)
    # not timed: the reference's torch.compile had not ended and the evaluator does not wait for it
    # (`EvalSettings.compiled_wait` off); a later candidate of the reference is timed against it
    compiled_pending: bool = False


@dataclass
class KernelCheck:
    """What the candidate's own machine code did in its forward, against library operators (profiles.summarise,
    kernelcheck.judge). A measured finding, never a gate: a correct candidate stays `correct` whatever it says."""

    finding: str = OWN_CODE  # one of KERNEL_FINDINGS
    message: str = ""  # what was measured, how, and (not_checked) why not
    custom_ms: float = 0.0
    custom_share: float = 0.0  # of the call's time
    custom_share_of_compute: float = 0.0
    library_ms: dict[str, float] = field(default_factory=dict)  # by class: gemm, conv, reduction, elementwise, ...
    data_ms: float = 0.0
    reference_classes: list[str] = field(default_factory=list)
    reference_ms: float = 0.0  # the reference's own time in its library operators, from its profile
    replaced: list[str] = field(default_factory=list)  # the reference's classes of work no library call of the
    # candidate does: its own code did them (own_code)
    covered: bool = False
    kernels: list[dict[str, Any]] = field(default_factory=list)  # {name, ms, custom}
    ops: list[dict[str, Any]] = field(default_factory=list)  # library operators {name, ms, class}

    @property
    def is_kernel(self) -> bool:
        """Its own code did some of the reference's work (the finding `own_code`)."""
        return self.finding == OWN_CODE

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelCheck:
        """Older records carry `is_kernel` (true: own code; false: library operators) instead of `finding`."""
        known = {f.name for f in fields(cls)}
        k = cls(**{a: b for a, b in d.items() if a in known})
        if "finding" not in d and "is_kernel" in d:
            k.finding = OWN_CODE if d["is_kernel"] else LIBRARY_ONLY
        return k


@dataclass
class ProfileOp:
    name: str
    device_ms: float
    share: float  # of total device time, 0..1
    calls: int = 1
    shapes: str = ""


@dataclass
class Profile:
    device: str = ""
    total_ms: float = 0.0
    ops: list[ProfileOp] = field(default_factory=list)
    flops: float | None = None
    bytes_moved: float | None = None
    roofline_ms: float | None = None
    bound: str = ""  # "memory" | "compute" | ""
    gpu: dict[str, Any] = field(default_factory=dict)  # name, capability, bandwidth_gbs, peak_tflops, memory_gb


@dataclass
class Verdict:
    status: str
    message: str = ""  # one line: the reason on failure, a summary on success
    stages: list[Stage] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    compiler_log: str = ""  # trimmed to the first errors, with line numbers
    correctness: Correctness | None = None
    timing: Timing | None = None
    profile: Profile | None = None  # of the candidate, when asked for
    kernel: KernelCheck | None = None  # what its own code did (from the profile of its forward)
    source_hash: str = ""
    device: str = ""
    checked: list[str] = field(default_factory=list)  # what was really checked, e.g. ["parse", "compile(nvcc)"]
    not_checked: list[str] = field(default_factory=list)  # and what was not (e.g. no GPU)
    detail: str = ""  # the candidate's traceback frames on a runtime error, trimmed
    log: str = ""  # the tail of the worker's output (fd 1 and 2) when it crashed or timed out
    seconds: float = 0.0  # wall time from the call to the verdict

    @property
    def ok(self) -> bool:
        return self.status == CORRECT

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup_eager if self.timing else None

    @property
    def kernel_finding(self) -> str | None:
        """The kernel finding of a correct candidate (OWN_CODE, LIBRARY_ONLY, KERNEL_NOT_CHECKED); None for any
        other status, and for a correct record without a kernel check (older records, where `correct` meant the
        check had passed or was off). An older record's `not_a_kernel` is its own status, not a finding."""
        if self.status != CORRECT or self.kernel is None:
            return None
        return self.kernel.finding

    @property
    def library_only(self) -> bool:
        """Correct, with library operators doing every class of the reference's work (or none of its code ran)."""
        return self.kernel_finding == LIBRARY_ONLY

    def stage(self, name: str) -> Stage | None:
        for s in self.stages:
            if s.name == name:
                return s
        return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        d = dict(d)
        d["stages"] = [Stage(**s) for s in d.get("stages", [])]
        d["findings"] = [Finding(**f) for f in d.get("findings", [])]
        if d.get("timing") is not None:
            t = dict(d["timing"])
            sf = {f.name for f in fields(TimingStats)}
            for k in ("candidate", "eager", "compiled"):
                if t.get(k) is not None:
                    t[k] = TimingStats(**{a: b for a, b in t[k].items() if a in sf})
            tf = {f.name for f in fields(Timing)}
            d["timing"] = Timing(**{k: v for k, v in t.items() if k in tf})
        if d.get("profile") is not None:
            d["profile"] = profile_from_dict(d["profile"])
        if d.get("kernel") is not None:
            d["kernel"] = KernelCheck.from_dict(d["kernel"])
        if d.get("correctness") is not None and not isinstance(d["correctness"], Correctness):
            cf = {f.name for f in fields(Correctness)}
            d["correctness"] = Correctness(**{k: v for k, v in d["correctness"].items() if k in cf})
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_json(cls, s: str) -> Verdict:
        return cls.from_dict(json.loads(s))


def profile_from_dict(d: dict[str, Any]) -> Profile:
    d = dict(d)
    d["ops"] = [ProfileOp(**o) for o in d.get("ops", [])]
    return Profile(**d)
