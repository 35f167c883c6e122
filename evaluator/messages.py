"""The wire between the evaluator and its workers, typed: one frozen dataclass per request and per reply, and an
ops table per worker role (the only requests a worker answers). Torch-free; both sides import it.

Every message travels as one JSON object (`shared/protocol.py`). `to_wire()` gives that object; `from_wire()`
rebuilds the dataclass and checks every field's type, so a reply that is not what its op promises is a protocol
violation, not a `KeyError` somewhere later.

Whose word a reply is shows in its base class:

- `Report`: from a trusted worker (the referee, the precompiled-header build). Its figures are facts.
- `Claim`: from a sandboxed worker (runner, recorder, builder), which runs candidate code or its compiler, and
  which the candidate can rewrite: our own timing loop, collection, tamper report and profile there included. A
  claim is something to check from outside: nothing in a verdict rests on one unless the trusted side checked it,
  and a verdict names what it took on a claim (`not_checked`).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound="Message")


class WireError(ValueError):
    """A message whose fields are not what its type says."""


@dataclass(frozen=True)
class Message:
    def to_wire(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_wire(cls: type[T], d: Any) -> T:
        if not isinstance(d, dict):
            raise WireError(f"{cls.__name__}: not an object")
        hints = _hints(cls)
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in d:
                kw[f.name] = _check(d[f.name], hints[f.name], f"{cls.__name__}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                raise WireError(f"{cls.__name__}: {f.name} is missing")
        return cls(**kw)


@dataclass(frozen=True)
class Report(Message):
    """A trusted worker's answer."""


@dataclass(frozen=True)
class Claim(Message):
    """A sandboxed worker's answer: what it says, to be checked."""


@dataclass(frozen=True)
class Empty(Message):
    pass


@dataclass(frozen=True)
class EmptyClaim(Claim):
    pass


@dataclass(frozen=True)
class Failed(Message):
    """A request that raised in the worker (`kind` "exception" or "build": the candidate's fault; else ours)."""

    error: str = ""
    error_type: str = ""
    traceback: str = ""
    kind: str = ""
    text: str = ""
    detail: str = ""


# -- one call of forward ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CallItem(Message):
    """One call: the inputs in arena input set `slot`, the outputs into arena output slot `out`; `fresh`: new
    tensor objects over the inputs (else the same ones as the last call on that set); `args`: the encoded
    arguments (`protocol.encode`, tensors as leaf indices)."""

    slot: int
    out: int
    fresh: bool
    args: list[Any]


@dataclass(frozen=True)
class Ready(Message):
    """A worker's first message: that it started (or why not) and what it runs on. What a sandboxed worker says
    here is a claim like any other: the parent uses it for the device's name, the build salt and the arch list,
    never for a verdict."""

    pid: int
    role: str
    problems: list[str] = field(default_factory=list)  # what of its hardening could not be applied
    error: str = ""  # it failed to start
    startup_s: float = 0.0
    torch: str = ""
    torch_cuda: str | None = None
    cuda_available: bool = False
    device: str = ""
    device_name: str = ""
    arch_list: str = ""  # TORCH_CUDA_ARCH_LIST for its devices (GPU workers)
    salt: str = ""  # what changes a binary besides its sources (recorder, builder)


# -- the arena's layout: where one candidate's input sets and output slots lie (placed by the referee) ----------------

@dataclass(frozen=True)
class OutputLeaf(Message):
    """One leaf of the reference's output, at `path` in its structure: a tensor (its shape and dtype) or a scalar."""

    path: str
    kind: str  # "tensor" | "scalar"
    shape: list[int] = field(default_factory=list)
    dtype: str = ""


@dataclass(frozen=True)
class InputView(Message):
    """One input tensor of one input set: where it lies in the arena."""

    offset: int
    shape: list[int]
    dtype: str
    stride: list[int] | None = None  # None: contiguous


@dataclass(frozen=True)
class ArenaLayout(Message):
    slots: list[list[InputView]]  # per input set, its tensors
    inputs: Any  # one call's arguments, encoded with its tensors by index (shared/protocol.encode)
    outputs: list[OutputLeaf]
    out_offsets: list[list[int]]  # per output slot, the offset of each tensor output
    in_bytes: int  # of one input set
    out_bytes: list[int]  # of each tensor output

    @property
    def tensor_outputs(self) -> list[OutputLeaf]:
        return [lf for lf in self.outputs if lf.kind == "tensor"]


# -- the referee (trusted) -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadReference(Message):
    reference_src: str
    settings: dict[str, Any]
    init_seed: int


@dataclass(frozen=True)
class ReferenceLoaded(Report):
    init_args: Any
    in_bytes: int
    out_bytes: int
    ref_mutates: bool
    slots_max: int  # the most input sets (and output slots) one candidate's arena holds
    set_bytes: int  # one input set and its outputs, aligned
    free_bytes: int = 0
    total_bytes: int = 0


@dataclass(frozen=True)
class OpenArena(Message):
    slots: int


@dataclass(frozen=True)
class ArenaOpened(Report):
    arena: int
    nbytes: int
    layout: ArenaLayout
    slots: int


@dataclass(frozen=True)
class ArenaRef(Message):
    arena: int


@dataclass(frozen=True)
class FillItem(Message):
    slot: int
    seed: int
    variant: str


@dataclass(frozen=True)
class Fill(Message):
    """Fresh inputs for each item into its input set; `poison`: output slots to fill with NaN (or a random integer
    pattern) first, so an output the candidate never writes cannot pass; `keep` (one item): compute the reference's
    output now (a verification trial); `flush`: evict the caches afterwards."""

    arena: int
    items: list[FillItem]
    poison: list[int] = field(default_factory=list)
    keep: bool = False
    flush: bool = False


@dataclass(frozen=True)
class Filled(Report):
    args: list[list[Any]] = field(default_factory=list)
    skip: str = ""  # the reference fails or is not finite on these inputs (an out-of-distribution trial)


@dataclass(frozen=True)
class CheckItem(Message):
    slot: int
    out: int
    seed: int
    variant: str
    scalars: dict[str, Any] = field(default_factory=dict)  # the candidate's scalar outputs (its claim)
    problems: list[str] = field(default_factory=list)  # what the runner says went wrong collecting them


@dataclass(frozen=True)
class Check(Message):
    arena: int
    items: list[CheckItem]
    precision: bool = False  # also compare with a float64 reference (the first trial)


@dataclass(frozen=True)
class CheckResult(Report):
    match: bool
    message: str = ""
    where: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    warnings: list[str] = field(default_factory=list)
    decided_by: str = ""  # "" (the tolerance) | "float64" (the second opinion on a trial beyond fp32's reach)


@dataclass(frozen=True)
class Checked(Report):
    results: list[CheckResult]


@dataclass(frozen=True)
class RunReference(Message):
    arena: int
    items: list[CallItem]
    which: str = "eager"  # "eager" | "compiled" | "identity" (the harness's own cost)


@dataclass(frozen=True)
class IdleReport(Report):
    idle: bool
    probes: int = 0
    waited_ms: float = 0.0
    idle_at: float = 0.0  # perf_counter (CLOCK_MONOTONIC, the same clock in every process) when its first fast probe began


@dataclass(frozen=True)
class Compiled(Report):
    error: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class MemoryReport(Report):
    free: int = 0
    total: int = 0
    mine: int = 0


@dataclass(frozen=True)
class RooflineAsk(Message):
    limits: dict[str, Any]


@dataclass(frozen=True)
class RooflineReport(Report):
    bytes: int
    bytes_read: int
    bytes_written: int
    flops: float
    roofline_ms: float | None
    bound: str
    bandwidth_gbs: float
    tflops: float
    source: str = ""
    floor_ms: float | None = None  # the least time the hardware allows: the inputs' bytes at its highest bandwidth


@dataclass(frozen=True)
class ReferenceSummary(Report):
    events: dict[str, Any]  # the reference's forward under the profiler (shared/profile_capture.py)


@dataclass(frozen=True)
class ProfileReference(Message):
    reference_src: str
    settings: dict[str, Any]


@dataclass(frozen=True)
class ReferenceProfile(Report):
    status: str
    profile: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceInfo(Report):
    public: dict[str, Any]
    limits: dict[str, Any]


# -- the runner (sandboxed: every reply a claim) ---------------------------------------------------------------------

@dataclass(frozen=True)
class Attach(Message):
    nbytes: int
    layout: ArenaLayout


@dataclass(frozen=True)
class LoadCandidate(Message):
    candidate_src: str
    salt: str
    cache_dir: str
    nonce: str  # labels our profiler ranges around the candidate's extension functions


@dataclass(frozen=True)
class Loaded(Claim):
    seconds: float = 0.0
    extensions: list[dict[str, Any]] = field(default_factory=list)  # {name, key} of each library it loaded


@dataclass(frozen=True)
class InitModel(Message):
    init_args: Any
    seed: int


@dataclass(frozen=True)
class Run(Message):
    """Calls to stage: `forward` for each item in turn, each output copied into its own output slot. They run on
    `go`, a request the evaluator's clock spans whole; the runner times nothing. Staged before the referee writes
    the request's inputs, so nothing can be computed from them ahead."""

    items: list[CallItem]


@dataclass(frozen=True)
class RunClaim(Claim):
    calls: int = 0
    scalars: list[dict[str, Any]] = field(default_factory=list)  # per call: scalar outputs, encoded ([]: none)
    problems: list[list[str]] = field(default_factory=list)  # per call: what did not fit the output layout ([]: none)

    def expand(self) -> RunClaim:
        """Every call's entry (the short form, [] for both, means none had scalars or problems)."""
        if self.scalars or self.problems:
            return self
        return RunClaim(calls=self.calls, scalars=[{} for _ in range(self.calls)],
                        problems=[[] for _ in range(self.calls)])


@dataclass(frozen=True)
class StateClaim(Claim):
    tampered: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ext_errors: int = 0
    ext_error: str = ""


@dataclass(frozen=True)
class ProfileCall(Message):
    items: list[CallItem]  # each call profiled on its own fresh input set (the evaluator keeps each operator's least time)


@dataclass(frozen=True)
class ProfileClaim(Claim):
    events: dict[str, Any] | None = None  # {"calls": [shared/profile_capture.py, ...]}; None when it could not run
    error: str = ""
    scalars: list[dict[str, Any]] = field(default_factory=list)  # per call, as RunClaim's
    problems: list[list[str]] = field(default_factory=list)


@dataclass(frozen=True)
class DiagClaim(Claim):
    pid: int = 0
    env: list[str] = field(default_factory=list)
    cwd: str = ""
    tmp: str = ""
    uid: int = -1


# -- recorder and builder (sandboxed) --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Record(Message):
    candidate_src: str


@dataclass(frozen=True)
class RecordClaim(Claim):
    status: str  # ok | compile_error | exec_error
    calls: list[dict[str, Any]] = field(default_factory=list)
    log: str = ""
    full_log: str = ""
    error: str = ""
    traceback: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class BuildAsk(Message):
    call: dict[str, Any]
    build_dir: str
    timeout: float
    mode: str  # "build" | "nvcc"


@dataclass(frozen=True)
class BuildClaim(Claim):
    ok: bool
    log: str = ""
    full_log: str = ""
    seconds: float = 0.0
    library: str = ""
    path: str = ""
    note: str = ""
    stub: bool = False
    nvcc: bool | None = None


@dataclass(frozen=True)
class PchReport(Report):
    ok: bool
    built: bool = False
    seconds: float = 0.0
    note: str = ""


# -- ops tables ------------------------------------------------------------------------------------------------------

Req = TypeVar("Req", bound=Message)
Rep = TypeVar("Rep", bound=Message)


@dataclass(frozen=True)
class Op(Generic[Req, Rep]):
    """One request a role answers: `Worker.ask(op, request)` returns `op.reply`, checked on arrival."""

    name: str
    request: type[Req]
    reply: type[Rep]
    fds_in: bool = False  # the request carries descriptors
    fds_out: bool = False  # the reply does


def _table(ops: type) -> dict[str, Op]:
    return {o.name: o for o in vars(ops).values() if isinstance(o, Op)}


class RefereeOps:
    """The referee's requests (a trusted worker: its replies are Reports)."""

    ping = Op("ping", Empty, Empty)
    info = Op("info", Empty, DeviceInfo)
    load = Op("load", LoadReference, ReferenceLoaded)
    open_arena = Op("open_arena", OpenArena, ArenaOpened, fds_out=True)
    close_arena = Op("close_arena", ArenaRef, Empty)
    fill = Op("fill", Fill, Filled)
    check = Op("check", Check, Checked)
    stage = Op("stage", RunReference, Empty)
    go = Op("go", ArenaRef, Empty)
    prepare = Op("prepare", Empty, Empty)
    idle = Op("idle", Empty, IdleReport)
    compile = Op("compile", Empty, Compiled)
    flush = Op("flush", Empty, Empty)
    release = Op("release", Empty, Empty)
    memory = Op("memory", Empty, MemoryReport)
    roofline = Op("roofline", RooflineAsk, RooflineReport)
    summary = Op("summary", Empty, ReferenceSummary)
    profile = Op("profile", ProfileReference, ReferenceProfile)


class RunnerOps:
    """The runner's requests (sandboxed, beside the candidate: its replies are Claims)."""

    attach = Op("attach", Attach, EmptyClaim, fds_in=True)
    load = Op("load", LoadCandidate, Loaded)
    init = Op("init", InitModel, EmptyClaim)
    to_device = Op("to_device", Empty, EmptyClaim)
    prepare = Op("prepare", Empty, EmptyClaim)
    stage = Op("stage", Run, EmptyClaim)
    go = Op("go", Empty, RunClaim)
    run = Op("run", Run, RunClaim)
    state = Op("state", Empty, StateClaim)
    profile = Op("profile", ProfileCall, ProfileClaim)
    diag = Op("diag", Empty, DiagClaim)


class RecorderOps:
    """The recorder's one request: import the candidate, recording its builds (sandboxed)."""

    record = Op("record", Record, RecordClaim)


class BuilderOps:
    """The builder's one request: build one extension (sandboxed)."""

    build = Op("build", BuildAsk, BuildClaim)


class PchOps:
    """The precompiled-header build's one request (trusted)."""

    pch = Op("pch", Empty, PchReport)


REFEREE: dict[str, Op] = _table(RefereeOps)
RUNNER: dict[str, Op] = _table(RunnerOps)
RECORDER: dict[str, Op] = _table(RecorderOps)
BUILDER: dict[str, Op] = _table(BuilderOps)
PCH: dict[str, Op] = _table(PchOps)
OPS: dict[str, dict[str, Op]] = {"referee": REFEREE, "runner": RUNNER, "recorder": RECORDER, "builder": BUILDER,
                                 "pch": PCH}
TRUSTED_ROLES = ("referee", "pch")


# -- type checks -----------------------------------------------------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    h = _HINTS.get(cls)
    if h is None:
        h = _HINTS[cls] = typing.get_type_hints(cls)
    return h


def _plain(v: Any) -> Any:
    if isinstance(v, Message):
        return v.to_wire()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _check(v: Any, t: Any, where: str) -> Any:
    if t is Any:
        return v
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        errors = []
        for a in args:
            try:
                return _check(v, a, where)
            except WireError as e:
                errors.append(str(e))
        raise WireError(f"{where}: {type(v).__name__} is none of {t}")
    if t is type(None):
        if v is not None:
            raise WireError(f"{where}: expected null")
        return None
    if origin is list:
        if not isinstance(v, list):
            raise WireError(f"{where}: expected a list, got {type(v).__name__}")
        return [_check(x, args[0], f"{where}[{i}]") for i, x in enumerate(v)] if args else v
    if origin is dict:
        if not isinstance(v, dict):
            raise WireError(f"{where}: expected an object, got {type(v).__name__}")
        if args and args[1] is not Any:
            return {k: _check(x, args[1], f"{where}.{k}") for k, x in v.items()}
        return v
    if isinstance(t, type) and issubclass(t, Message):
        return t.from_wire(v)
    if t is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise WireError(f"{where}: expected a number, got {type(v).__name__}")
        return float(v)
    if t is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise WireError(f"{where}: expected an integer, got {type(v).__name__}")
        return v
    if t in (str, bool):
        if not isinstance(v, t):
            raise WireError(f"{where}: expected {t.__name__}, got {type(v).__name__}")
        return v
    raise WireError(f"{where}: no check for {t!r}")  # pragma: no cover - a field type this module lacks

