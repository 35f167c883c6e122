"""Trusted: a runner's and a builder's start-up (their imports and warm-up, the profiler's first use included) and
every module of this package compiled, in a process of its own with PYTHONPYCACHEPREFIX set, so that Python writes
the bytecode of all of it there (processes/bytecode.py). Only our code and the installed packages run here: never a
candidate's or a reference's.

    python -m evaluator.trusted.prime
"""

from __future__ import annotations

import compileall
import sys
from pathlib import Path


def main() -> int:
    import ctypes
    import os
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlives the evaluator
    if os.getppid() == 1:
        return 1
    if not sys.pycache_prefix:
        print("PYTHONPYCACHEPREFIX is not set: nothing to prime", file=sys.stderr)
        return 2
    from ..sandboxed import serve
    from ..sandboxed.harden import harden  # noqa: F401  (what a sandboxed worker imports first)
    from . import serve as trusted_serve  # noqa: F401

    serve.start("builder", None, {})
    serve.start("runner", None, {})  # torch, the device, the runner's modules, the warm-up (the profiler's first use)
    root = Path(__file__).resolve().parents[1]
    ok = compileall.compile_dir(str(root), quiet=1, workers=1)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
