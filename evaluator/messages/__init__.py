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

One module per party, each with its ops table: `referee.py`, `runner.py`, `build.py` (recorder, builder,
precompiled headers); beside them `wire.py` (the base, the type checks, `Op`, a worker's ready message),
`arena.py` (one call and the arena's layout) and `ops.py` (the tables by role). Everything is used as
`messages.X`.
"""

from __future__ import annotations

from .arena import ArenaLayout, CallItem, InputView, OutputLeaf
from .build import BuildAsk, BuildClaim, BuilderOps, PchOps, PchReport, Record, RecordClaim, RecorderOps
from .ops import BUILDER, OPS, PCH, RECORDER, REFEREE, RUNNER, TRUSTED_ROLES
from .referee import (
    IDLE_BOUND_S,
    ArenaOpened,
    ArenaRef,
    Check,
    Checked,
    CheckItem,
    CheckResult,
    Compiled,
    DeviceInfo,
    Fill,
    Filled,
    FillItem,
    IdleAsk,
    IdleReport,
    LoadReference,
    MemoryReport,
    OpenArena,
    ProfileReference,
    RefereeOps,
    ReferenceLoaded,
    ReferenceProfile,
    ReferenceSummary,
    RooflineAsk,
    RooflineReport,
    RunReference,
)
from .runner import (
    Attach,
    DiagClaim,
    InitModel,
    LoadCandidate,
    Loaded,
    ProfileCall,
    ProfileClaim,
    Run,
    RunClaim,
    RunnerOps,
    StateClaim,
)
from .wire import Claim, Empty, EmptyClaim, Failed, Message, Op, Ready, Rep, Report, Req, WireError

__all__ = [
    "ArenaLayout",
    "ArenaOpened",
    "ArenaRef",
    "Attach",
    "BUILDER",
    "BuildAsk",
    "BuildClaim",
    "BuilderOps",
    "CallItem",
    "Check",
    "CheckItem",
    "CheckResult",
    "Checked",
    "Claim",
    "Compiled",
    "DeviceInfo",
    "DiagClaim",
    "Empty",
    "EmptyClaim",
    "Failed",
    "Fill",
    "FillItem",
    "Filled",
    "IDLE_BOUND_S",
    "IdleAsk",
    "IdleReport",
    "InitModel",
    "InputView",
    "LoadCandidate",
    "LoadReference",
    "Loaded",
    "MemoryReport",
    "Message",
    "OPS",
    "Op",
    "OpenArena",
    "OutputLeaf",
    "PCH",
    "PchOps",
    "PchReport",
    "ProfileCall",
    "ProfileClaim",
    "ProfileReference",
    "RECORDER",
    "REFEREE",
    "RUNNER",
    "Ready",
    "Rep",
    "Record",
    "RecordClaim",
    "RecorderOps",
    "RefereeOps",
    "ReferenceLoaded",
    "ReferenceProfile",
    "ReferenceSummary",
    "Report",
    "Req",
    "RooflineAsk",
    "RooflineReport",
    "Run",
    "RunClaim",
    "RunReference",
    "RunnerOps",
    "StateClaim",
    "TRUSTED_ROLES",
    "WireError",
]
