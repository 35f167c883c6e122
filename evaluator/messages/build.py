"""The recorder's and the builder's requests and replies (sandboxed: Claims), and the precompiled-header
build's report (trusted)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .wire import Claim, Empty, Message, Op, Report


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
    salt: str = ""  # what keys a binary besides its sources (the host unit's key, shared.buildkey.host_key)
    host_objects: str = ""  # the build cache's folder of host objects (read-only to the builder); "" shares none


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
    host_key: str = ""  # a host unit built here that depends on nothing its key does not cover ...
    host_object: str = ""  # ... and its object, in the build folder (the evaluator copies it into the cache)


@dataclass(frozen=True)
class PchReport(Report):
    ok: bool
    built: bool = False
    seconds: float = 0.0
    note: str = ""


class RecorderOps:
    """The recorder's one request: import the candidate, recording its builds (sandboxed)."""

    record = Op("record", Record, RecordClaim)


class BuilderOps:
    """The builder's one request: build one extension (sandboxed)."""

    build = Op("build", BuildAsk, BuildClaim)


class PchOps:
    """The precompiled-header build's one request (trusted)."""

    pch = Op("pch", Empty, PchReport)
