"""Sandboxed: the ops of the runner, the recorder and the builder, bound at start-up, before any candidate code."""

from __future__ import annotations

import time
from typing import Any

from .. import messages as M
from ..shared.devices import describe_device, describe_torch, device


def _emit(chan: Any) -> Any:
    def emit(stage: str, message: str = "") -> None:
        try:
            chan.send({"type": "stage", "stage": stage, "message": message})
        except OSError:
            pass

    return emit


def _ask(chan: Any, msg: dict, answer: str) -> dict:
    """Ask the evaluator something in the middle of a request, and wait for its answer of type `answer`."""
    chan.send(msg)
    while True:
        got = chan.recv()
        if got is None:
            raise RuntimeError("the evaluator went away")
        reply, _ = got
        if reply.get("type") == answer:
            return reply


def start(role: str, chan: Any, ready: dict) -> dict[str, Any]:
    phases = ready.setdefault("startup_phases", {})
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        phases[name] = now - t
        t = now

    describe_torch(ready)
    lap("torch")
    if role in ("recorder", "builder"):
        import torch.utils.cpp_extension  # noqa: F401

        from . import build

        ready["salt"] = build.build_salt()
        if role == "builder":
            def ask_host(key: str) -> bool:  # may I take host unit `key`'s object rather than compile it?
                return bool(_ask(chan, {"type": "host", "key": key}, "host").get("ready"))

            return {"build": lambda req: M.BuildClaim(**build.build(req.to_wire(), _emit(chan), ask_host))}

        def record(req: M.Record) -> M.RecordClaim:
            def request_build(a: dict) -> dict:
                return _ask(chan, {"type": "build", "args": a}, "built")

            return M.RecordClaim(**build.record(req.to_wire(), request_build, _emit(chan)))

        return {"record": record}
    if role != "runner":
        raise ValueError(f"unknown role {role!r}")
    dev = device()
    describe_device(ready, dev)
    lap("device")
    from ..shared import profile_capture, tree  # noqa: F401  (imported before the snapshot)
    from . import runner

    lap("imports")
    runner.warm_up(dev, lap)
    lap("warm_up_rest")
    r = runner.Runner(dev)  # the state snapshot: before any candidate code
    lap("snapshot")
    return r.ops()
