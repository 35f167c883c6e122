"""The runner's requests and replies (sandboxed: every reply a Claim)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .arena import ArenaLayout, CallItem
from .wire import Claim, Empty, EmptyClaim, Message, Op


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
