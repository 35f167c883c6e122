"""SIGTERM / SIGINT to the server while a kernel builds: the server stops its jobs, its evaluator workers and their
compilers, then exits; no process of its tree is left (issue 12, item 5)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from lsp_helpers import (
    CPP_SRC,
    MODEL_SRC,
    lsp_session,
    model_new,
    needs_evaluator,
    open_doc,
    run_command,
    wait_until,
)

pytestmark = [needs_evaluator, pytest.mark.slow]

SLOW_TO_COMPILE = """#include <torch/extension.h>
constexpr long slow_sum(long n) {  // 4e8 steps at compile time, in loops within GCC's iteration limit
    long s = SEED;
    for (long i = 0; i < n; ++i)
        for (long j = 0; j < n; ++j) s += (i ^ j) & 1;
    return s;
}
static_assert(slow_sum(20000) > 0, "never false: it only keeps the compiler busy");
"""


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, name, start time) of a live process, else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    name = raw[raw.index("(") + 1: raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), name, int(fields[19])


def tree(root: int) -> dict[int, tuple[str, int]]:
    """The live descendants of `root`: pid -> (name, start time)."""
    procs = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(int(p))) is not None}
    out: dict[int, tuple[str, int]] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, name, start) in procs.items():
            if ppid == parent and pid not in out:
                out[pid] = (name, start)
                frontier.append(pid)
    return out


def alive(pid: int, start: int) -> bool:
    s = _stat(pid)
    return s is not None and s[2] == start


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_during_a_build_leaves_no_process_behind(tmp_path: Path, cache_dir: Path, sig) -> None:
    # A kernel nobody built before (a new constant) whose compile takes minutes (the compiler evaluates a long
    # constant expression): it is still compiling when the signal comes, and would go on long after.
    slow = CPP_SRC.replace("#include <torch/extension.h>", SLOW_TO_COMPILE.replace("SEED", str(time.time_ns() % 997)))
    text = MODEL_SRC + model_new().replace(CPP_SRC, slow)
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", text)
        pid = (await run_command(client, "kernel-lsp.debugInfo"))["pid"]
        await run_command(client, "kernel-lsp.verify", {"uri": uri, "module": "Model"})
        compilers = ("cc1plus", "c++", "g++", "gcc", "ninja", "clang")
        seen: dict = {}

        def compiling() -> bool:
            t = tree(pid)
            if any(name in compilers for name, _ in t.values()):
                seen.update(t)
                return True
            return False

        await wait_until(compiling, timeout=180)
        # the tree that showed a compiler, and the one just before the signal (the driver hands over to cc1plus,
        # ninja to the next step: a second look alone can fall between two of them)
        before = {**seen, **tree(pid)}
        os.kill(pid, sig)
        await wait_until(lambda: _stat(pid) is None, timeout=20)  # the server exited
        await wait_until(lambda: not [p for p, (_, start) in before.items() if alive(p, start)], timeout=5)
        assert any(name in compilers for name, _ in before.values()), before
        await wait_until(lambda: client._server.returncode is not None, timeout=5)
        assert client._server.returncode == 128 + sig
