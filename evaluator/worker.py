"""The process entry of every worker: `python -m evaluator.worker FD ROLE POLICY_JSON`; `python -m evaluator.worker
--prime` replays a builder's and a runner's start to fill the bytecode cache (processes/bytecode.py).

Roles: ``referee`` and ``pch`` are trusted (trusted/serve.py); ``runner``, ``recorder`` and ``builder`` are the
candidate's side (sandboxed/serve.py), and harden themselves (sandboxed/harden.py) before anything else.

fd 1 is pointed at fd 2 (the worker's log) first thing, so nothing printed reaches a caller's stdout; requests and
answers travel on the socket FD. A worker answers only the ops of its role's table (messages.OPS), each request
decoded into its dataclass before the handler (bound at start-up, before any candidate code) sees it.
"""

from __future__ import annotations

import os
import resource
import socket
import sys
import time
import traceback
from typing import Any

# KLSP_DEBUG_TIMING: every answer also says when the worker took its request and when it had the answer (its own
# CLOCK_MONOTONIC, and its CPU time at both), to place a request's time between delivery, work and the way back;
# printed, never used
STAMPS = bool(os.environ.get("KLSP_DEBUG_TIMING"))


def main(argv: list[str]) -> int:
    from .shared.policy import WorkerPolicy

    fd, role, policy = int(argv[0]), argv[1], WorkerPolicy.from_json(argv[2])
    _same_allocator()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    t0 = time.perf_counter()
    problems: list[str] = []
    phases: dict[str, float] = {}
    if policy.sandboxed:
        from .sandboxed.harden import harden

        problems = harden(policy)
        phases["harden"] = time.perf_counter() - t0
    else:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the evaluator
        if policy.parent and os.getppid() != policy.parent:
            return 1  # the evaluator died before the signal was armed: nobody will ever ask or reap
    from . import messages as M
    from .shared.protocol import Channel, ProtocolError

    chan = Channel(socket.socket(fileno=fd))
    ready: dict[str, Any] = {"pid": os.getpid(), "role": role, "problems": problems, "startup_phases": phases}
    ops = M.OPS.get(role, {})
    try:
        t1 = time.perf_counter()
        if role in M.TRUSTED_ROLES:
            from .trusted.serve import start
        else:
            from .sandboxed.serve import start
        phases["modules"] = time.perf_counter() - t1  # torch's import, mostly
        handlers = start(role, chan, ready)
    except BaseException as e:  # noqa: BLE001
        traceback.print_exc()
        ready["error"] = f"{type(e).__name__}: {e}"
        chan.send(_ready(ready))
        return 1
    ready["bytecode"] = _bytecode()
    ready["startup_s"] = time.perf_counter() - t0
    phases["total"] = ready["startup_s"]
    ready["startup_phases"] = {k: round(v, 3) for k, v in phases.items()}
    chan.send(_ready(ready))
    while True:
        try:
            got = chan.recv()
        except (EOFError, OSError, ProtocolError):
            return 0
        if got is None:
            return 0
        req, fds = got
        t_in, c_in = (time.perf_counter(), time.process_time()) if STAMPS else (0.0, 0.0)
        u_in = resource.getrusage(resource.RUSAGE_SELF) if STAMPS else None
        rid, name, args = req.get("id"), req.get("op"), req.get("args", {})
        try:
            op, fn = ops.get(name), handlers.get(name)
            if op is None or fn is None:
                raise ValueError(f"unknown op {name!r}")
            request = op.request.from_wire(args)
            if op.fds_in:
                res = fn(request, fds)
            else:
                for f in fds:
                    os.close(f)
                res = fn(request)
            out, out_fds = res if isinstance(res, tuple) else (res, [])
            msg = {"type": "result", "id": rid, "ok": True, "reply": out.to_wire()}
            if STAMPS:  # a diagnostic's claim (when it took the request and when it had its answer), never a figure
                u = resource.getrusage(resource.RUSAGE_SELF)  # and the page faults and preemptions meanwhile
                msg["t"] = [t_in, time.perf_counter(), c_in, time.process_time(), u.ru_minflt - u_in.ru_minflt,
                            u.ru_majflt - u_in.ru_majflt, u.ru_nivcsw - u_in.ru_nivcsw]
            chan.send(msg, out_fds)
        except BaseException as e:  # noqa: BLE001  (reported; the evaluator decides what it means)
            # An error meant for people (the reference failed: `for_users`) is its message alone, and its detail is
            # the message's own lines (the user's frames), not our worker's stack or class names.
            for_users = bool(getattr(e, "for_users", False))
            err: dict[str, Any] = {"type": "result", "id": rid, "ok": False,
                                   "error": (str(e) if for_users else f"{type(e).__name__}: {e}")[:4000],
                                   "error_type": type(e).__name__,
                                   "traceback": (str(e) if for_users else traceback.format_exc())[-4000:]}
            for attr in ("kind", "text", "detail"):
                if hasattr(e, attr):
                    err[attr] = str(getattr(e, attr))[:4000]
            try:
                chan.send(err)
            except OSError:
                return 1
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                return 1


def _same_allocator() -> None:
    """The C allocator's thresholds fixed, in every worker alike, before anything allocates. Left to glibc's
    dynamic thresholds, whether a freed output's memory goes back to the kernel depends on what else a process
    happens to hold at the top of its heap: measured on the CPU, the runner took 480 page faults and 0.24 ms of
    system time per request of 16 calls (2 MB outputs) where the referee running the same code took none. With
    fixed thresholds both keep freed memory below 512 MB for reuse, and take blocks under 64 MB from the heap."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_TRIM_THRESHOLD, 512 << 20)
        libc.mallopt(_M_MMAP_THRESHOLD, 64 << 20)
    except (OSError, AttributeError):  # not glibc
        pass


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def _bytecode() -> str:
    """Where torch's bytecode came from: the evaluator's bytecode cache (PYTHONPYCACHEPREFIX), the installation's,
    or neither (compiled from source at this start); "" without torch."""
    import importlib.util

    torch = sys.modules.get("torch")
    if torch is None or not getattr(torch, "__file__", None):
        return ""
    if not os.access(importlib.util.cache_from_source(torch.__file__), os.R_OK):
        return "source"
    return "cache" if sys.pycache_prefix else "installed"


def _ready(facts: dict[str, Any]) -> dict[str, Any]:
    """The ready message, its fields checked as the parent will check them."""
    from .messages import Ready

    return {"type": "ready", **Ready.from_wire(facts).to_wire()}


def prime() -> int:
    """A builder's and a runner's start-up (their imports and warm-up, the profiler's first use included) and every
    module of this package compiled, with PYTHONPYCACHEPREFIX set, so that Python writes the bytecode of all of it
    there (processes/bytecode.py). Only our code and the installed packages run here: never a candidate's or a
    reference's; nothing is sandboxed, nothing is served."""
    import compileall
    import ctypes
    import signal
    from pathlib import Path

    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlives the evaluator
    if os.getppid() == 1:
        return 1
    if not sys.pycache_prefix:
        print("PYTHONPYCACHEPREFIX is not set: nothing to prime", file=sys.stderr)
        return 2
    from .sandboxed.harden import harden  # noqa: F401  (what a sandboxed worker imports first)
    from .sandboxed.serve import start
    from .trusted.serve import start as trusted_start  # noqa: F401  (a referee's modules)

    start("builder", None, {})
    start("runner", None, {})  # torch, the device, the runner's modules, the warm-up (the profiler's first use)
    return 0 if compileall.compile_dir(str(Path(__file__).resolve().parent), quiet=1, workers=1) else 1


if __name__ == "__main__":
    sys.exit(prime() if sys.argv[1:] == ["--prime"] else main(sys.argv[1:]))
