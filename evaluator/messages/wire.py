"""The wire's base: a message is a frozen dataclass that travels as one JSON object (`shared/protocol.py`);
`to_wire()` gives that object, `from_wire()` rebuilds the dataclass and checks every field's type. Whose word a
reply is shows in its base class: `Report` (a trusted worker's) or `Claim` (a sandboxed worker's)."""

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
    startup_phases: dict[str, float] = field(default_factory=dict)  # where its start's seconds went (reported only)
    bytecode: str = ""  # where torch's bytecode came from: "cache" (the evaluator's), "installed", "source"



# -- ops: the requests a role answers (each party's table is in its module) ----------------------------------------

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


def op_table(ops: type) -> dict[str, Op]:
    return {o.name: o for o in vars(ops).values() if isinstance(o, Op)}


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
