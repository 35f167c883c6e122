"""The referee's requests and replies (a trusted worker: every reply a Report)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .arena import ArenaLayout, CallItem
from .wire import Empty, Message, Op, Report


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


# The longest wait for the device to go idle (work the candidate left running is on its clock until then, `tampered`
# after); the referee's and the prober's waits, and the device stage's.
IDLE_BOUND_S = 60.0


@dataclass(frozen=True)
class IdleAsk(Message):
    bound_s: float = IDLE_BOUND_S  # the longest wait for the device to go idle before answering "not idle"


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
    idle = Op("idle", IdleAsk, IdleReport)
    compile = Op("compile", Empty, Compiled)
    flush = Op("flush", Empty, Empty)
    release = Op("release", Empty, Empty)
    memory = Op("memory", Empty, MemoryReport)
    roofline = Op("roofline", RooflineAsk, RooflineReport)
    summary = Op("summary", Empty, ReferenceSummary)
    profile = Op("profile", ProfileReference, ReferenceProfile)
