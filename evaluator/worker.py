"""A worker process: `python -m evaluator.worker FD ROLE POLICY_JSON`.

Roles: ``referee`` (trusted: the reference, inputs, comparison, reference timings), ``runner`` (sandboxed: the
candidate's forward), ``recorder`` (sandboxed: the candidate's module import, asking for its builds), ``builder``
(sandboxed: compilers, no candidate Python), ``pch`` (trusted: torch's precompiled header).

fd 1 is pointed at fd 2 (the worker's log) first thing, so nothing printed reaches a caller's stdout; requests
and answers travel on the socket FD. Sandboxed roles harden themselves (sandboxed/harden.py) before anything else.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from typing import Any


def _device() -> Any:
    import torch

    want = os.environ.get("KLSP_DEVICE", "cpu")
    if want.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA was asked for but torch.cuda.is_available() is False")
        dev = torch.device(want if ":" in want else "cuda:0")
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)  # the context, now, while nobody waits
        return dev
    return torch.device("cpu")


def main(argv: list[str]) -> int:
    fd, role, policy = int(argv[0]), argv[1], json.loads(argv[2])
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    t0 = time.perf_counter()
    problems: list[str] = []
    if policy.get("sandboxed"):
        from .sandboxed.harden import harden

        problems = harden(policy)
    else:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the evaluator
        if policy.get("parent") and os.getppid() != policy["parent"]:
            return 1  # the evaluator died before the signal was armed: nobody will ever ask or reap
    from .shared.protocol import Channel, ProtocolError

    chan = Channel(socket.socket(fileno=fd))
    ready: dict[str, Any] = {"type": "ready", "pid": os.getpid(), "role": role, "problems": problems}
    try:
        handler = _start(role, chan, ready)
    except BaseException as e:  # noqa: BLE001
        traceback.print_exc()
        ready["error"] = f"{type(e).__name__}: {e}"
        chan.send(ready)
        return 1
    ready["startup_s"] = time.perf_counter() - t0
    chan.send(ready)
    while True:
        try:
            got = chan.recv()
        except (EOFError, OSError, ProtocolError):
            return 0
        if got is None:
            return 0
        req, fds = got
        rid, op, args = req.get("id"), req.get("op"), req.get("args", {})
        try:
            res = handler(op, args, fds)
            out, out_fds = res if isinstance(res, tuple) else (res, [])
            chan.send({"type": "result", "id": rid, "ok": True, **out}, out_fds)
        except BaseException as e:  # noqa: BLE001  (reported; the evaluator decides what it means)
            err: dict[str, Any] = {"type": "result", "id": rid, "ok": False, "error": f"{type(e).__name__}: {e}"[:4000],
                                   "error_type": type(e).__name__, "traceback": traceback.format_exc()[-4000:]}
            for attr in ("kind", "text", "detail"):
                if hasattr(e, attr):
                    err[attr] = str(getattr(e, attr))[:4000]
            try:
                chan.send(err)
            except OSError:
                return 1
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                return 1


def _start(role: str, chan: Any, ready: dict) -> Any:
    import torch

    ready["torch"] = torch.__version__
    ready["torch_cuda"] = torch.version.cuda
    ready["cuda_available"] = torch.cuda.is_available()

    if role == "pch":
        from .shared.pch import build_pch

        return lambda op, args, fds: build_pch()

    if role in ("recorder", "builder"):
        import torch.utils.cpp_extension  # noqa: F401

        from .sandboxed import build

        ready["salt"] = build.build_salt()
        if role == "builder":
            return lambda op, args, fds: build.build(args, _emit(chan))

        def record(op: str, args: dict, fds: list[int]) -> dict:
            def request_build(a: dict) -> dict:
                chan.send({"type": "build", "args": a})
                while True:
                    got = chan.recv()
                    if got is None:
                        raise RuntimeError("the evaluator went away")
                    msg, _ = got
                    if msg.get("type") == "built":
                        return msg

            return build.record(args, request_build, _emit(chan))

        return record

    dev = _device()
    ready["device"] = str(dev)
    ready["device_name"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    if dev.type == "cuda":
        from .trusted.devinfo import arch_list

        ready["arch_list"] = os.environ.get("TORCH_CUDA_ARCH_LIST") or arch_list()

    if role == "referee":
        from .trusted import devinfo, referee

        ref = referee.Referee(dev)
        info_cache: dict = {}

        def handle_referee(op: str, args: dict, fds: list[int]) -> Any:
            for fd in fds:
                os.close(fd)
            if op == "ping":
                return {}
            if op == "info":
                if not info_cache:
                    info_cache.update(devinfo.device_info(dev))
                return dict(info_cache)
            if op == "profile":
                return _profile_reference(ref, dev, args, info_cache)
            fn = getattr(ref, op, None)
            if op.startswith("_") or fn is None:
                raise ValueError(f"unknown op {op!r}")
            return fn(args)

        return handle_referee

    if role == "runner":
        from . import kernelcheck  # noqa: F401  (imported before the snapshot)
        from .sandboxed import runner
        from .shared import profiling, tree  # noqa: F401

        runner.warm_up(dev)
        r = runner.Runner(dev)  # the state snapshot: before any candidate code

        def handle_runner(op: str, args: dict, fds: list[int]) -> Any:
            if op == "attach":
                return r.attach(args, fds)
            for fd in fds:
                os.close(fd)
            if op == "diag":
                import tempfile

                return {"pid": os.getpid(), "env": sorted(os.environ), "cwd": os.getcwd(), "tmp": tempfile.gettempdir(),
                        "uid": os.getuid()}
            if op in ("load", "init", "to_device", "prepare", "call", "collect", "state", "profile"):
                return getattr(r, op)(args)
            raise ValueError(f"unknown op {op!r}")

        return handle_runner
    raise ValueError(f"unknown role {role!r}")


def _emit(chan: Any) -> Any:
    def emit(stage: str, message: str = "") -> None:
        try:
            chan.send({"type": "stage", "stage": stage, "message": message})
        except OSError:
            pass

    return emit


def _profile_reference(ref: Any, dev: Any, args: dict, info_cache: dict) -> dict:
    """Top operators and the roofline of the reference (for profile-guided prompts)."""
    import secrets

    from .shared import profiling
    from .trusted import devinfo, inputs

    if ref.model is None:
        ref.load({"reference_src": args["reference_src"], "settings": args["settings"],
                  "init_seed": secrets.randbits(31)})
    if not info_cache:
        info_cache.update(devinfo.device_info(dev))
    gen = inputs.make(ref.mod.get_inputs, secrets.randbits(31), "task", dev)
    p = profiling.profile_call(ref.model, gen, dev)
    limits = info_cache["limits"]
    r = ref.roofline({"limits": limits})
    p["flops"], p["bytes_moved"] = r["flops"] or p["flops"], float(r["bytes"])
    rl, bound = r["roofline_ms"], r["bound"]
    gpu = dict(info_cache.get("public") or {})
    gpu.update(limits)
    label = f"{dev} ({gpu.get('name', '')})" if dev.type == "cuda" else "cpu"
    return {"status": "ok", "profile": {"device": label, "total_ms": p["total_ms"], "ops": p["ops"],
                                        "flops": p["flops"], "bytes_moved": p["bytes_moved"], "roofline_ms": rl,
                                        "bound": bound, "gpu": gpu}}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
