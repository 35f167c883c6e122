"""Shared: torch's precompiled `torch/extension.h`. The trusted `pch` worker checks it and, when it is missing or
stale, builds it (build_pch) under an exclusive lock; sandboxed builders only read it (pch_for_build), never wait
for it, and never read one that may be half-written.

Files beside the header (in torch's include folder, which only the trusted worker may write):
  .klsp-pch.lock      flock: builders that read the header hold it shared for their whole build; a build holds it
                      exclusively
  .klsp-pch.wanted    a build is due or running: builders that see it compile without the header (so they never
                      queue behind a build of 20-40 s, and a stream of builders cannot starve the build)
  .klsp-pch.building  the header is being written (left behind by a build that was killed: the header is
                      half-written; builders do not use it, the next build deletes it)
  .klsp-pch.stamp     the torch the header was built from (version and commit): torch's own check compares only
                      the compiler's command line, and GCC does not look at the headers a precompiled header was
                      made of, so after torch is upgraded in place the old header would be used; builders do not use
                      a header whose stamp names another torch, and the next check rebuilds it
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

LOCK, WANTED, BUILDING, STAMP = ".klsp-pch.lock", ".klsp-pch.wanted", ".klsp-pch.building", ".klsp-pch.stamp"
HEADER, SIGNATURE = "extension.h.gch", "extension.h.sign"
# the first token of a host compile that must not read the header: GCC looks for a precompiled header only until
# the first token of a translation unit, so after this forced include it never opens extension.h.gch (which may
# be being written) and parses torch's headers instead; nothing else changes (an empty namespace)
NO_PCH_HEADER = "klsp_no_pch.h"
NO_PCH_TEXT = "/* kernel-lsp: compiled without torch's precompiled header */\nnamespace klsp_no_pch {}\n"


def _pch_paths() -> tuple[Path, Path, Path] | None:
    import torch.utils.cpp_extension as ce

    torch_path = getattr(ce, "_TORCH_PATH", None)
    if torch_path is None:
        return None
    head = Path(torch_path) / "include" / "torch"
    return head, head / LOCK, head / BUILDING


def stamp_text() -> str:
    import torch

    return f"torch {torch.__version__} {getattr(torch.version, 'git_version', '')}\n"


def _state(head: Path) -> str:
    if not (head / HEADER).exists():
        return "absent"
    try:
        stamp = (head / STAMP).read_text()
    except OSError:
        return "use"  # made before stamps (or by torch itself): as torch would
    return "use" if stamp == stamp_text() else "stale"


@contextlib.contextmanager
def pch_for_build() -> Iterator[str]:
    """For a sandboxed builder, around its whole build: "use" (torch's header may be read: no build of it is due
    or running, and none can start until this build ends) or why not: "being built", "half-written", "stale",
    "absent". Never waits."""
    paths = _pch_paths()
    if paths is None:
        yield "absent"
        return
    head, lock_path, building = paths
    if (head / WANTED).exists() or building.exists():
        yield "being built" if (head / WANTED).exists() else "half-written"
        return
    if not lock_path.exists():  # no trusted build ever ran here: a header present is torch's own (complete)
        yield _state(head)
        return
    try:
        f = open(lock_path)  # noqa: SIM115
    except OSError:
        yield "absent"
        return
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:  # a build holds it exclusively
            yield "being built"
            return
        try:
            yield "half-written" if building.exists() else _state(head)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    finally:
        f.close()


@contextlib.contextmanager
def pch_readers_lock() -> Any:
    """Held by a reader for as long as it may read the header: no build can start meanwhile (waits for a build)."""
    paths = _pch_paths()
    f = None
    if paths is not None and paths[1].exists():
        try:
            f = open(paths[1])  # noqa: SIM115
            fcntl.flock(f, fcntl.LOCK_SH)
        except OSError:
            f = None
    try:
        yield
    finally:
        if f is not None:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()


def no_pch_flags(build_dir: str | Path) -> list[str]:
    """extra_cflags for a host compile that must not read torch's precompiled header."""
    p = Path(build_dir) / NO_PCH_HEADER
    p.write_text(NO_PCH_TEXT)
    return ["-include", str(p)]


class _NeedsBuild(Exception):
    pass


def _is_current(real: Any, ce: Any) -> bool:
    """torch's own check (`_check_and_build_extension_h_precompiler_headers`), run dry: True when it finds the
    header there and its signature matching, False when it would build one (the build's command is intercepted:
    nothing is written). Runs its compiler check (`c++ -v`) for real."""
    import subprocess

    def guard(fn: Any) -> Any:
        def call(cmd: Any, *a: Any, **k: Any) -> Any:
            argv = cmd if isinstance(cmd, (list, tuple)) else str(cmd).split()
            if "c++-header" in " ".join(str(x) for x in argv):
                raise _NeedsBuild()
            return fn(cmd, *a, **k)
        return call

    if not isinstance(getattr(ce, "subprocess", None), type(subprocess)):
        return False  # not the torch this was written against: build under the lock (safe, if slower)
    shim = SimpleNamespace(**{k: getattr(subprocess, k) for k in dir(subprocess) if not k.startswith("__")})
    for name in ("run", "check_output", "check_call", "call", "Popen"):
        setattr(shim, name, guard(getattr(subprocess, name)))
    saved = ce.subprocess
    ce.subprocess = shim
    try:
        real([], [])
    except _NeedsBuild:
        return False
    finally:
        ce.subprocess = saved
    return True


def build_pch() -> dict:
    """Trusted: check torch's precompiled extension.h for the default flags and (re)build it when it is missing or
    stale, under the exclusive lock, with the `wanted` mark set from before the lock is asked for until the build
    ends (builders that start meanwhile compile without it rather than wait).

    A build killed mid-way leaves the `building` mark: the next one deletes the half-written header. A header
    without this torch's stamp is rebuilt."""
    import torch.utils.cpp_extension as ce

    paths = _pch_paths()
    real = getattr(ce, "_check_and_build_extension_h_precompiler_headers", None)
    if paths is None or real is None:
        return {"ok": False, "note": "this torch has no precompiled-header support"}
    head, lock_path, building = paths
    if not os.access(head, os.W_OK):
        return {"ok": False, "note": f"{head} is not writable: builds go without a precompiled header"}
    wanted, stamp = head / WANTED, head / STAMP

    def stamped() -> bool:  # built by this code from this torch (a header without a stamp is rebuilt once)
        try:
            return stamp.read_text() == stamp_text()
        except OSError:
            return False

    t0 = time.perf_counter()
    with open(lock_path, "a") as lock:
        try:
            if not building.exists() and not wanted.exists() and stamped() and _is_current(real, ce):
                return {"ok": True, "seconds": time.perf_counter() - t0, "built": False}
        except Exception as e:  # noqa: BLE001  (no g++, ...): builds go without it
            return {"ok": False, "note": f"precompiled header unavailable: {type(e).__name__}: {e}"}
        with contextlib.suppress(OSError):
            os.nice(10)  # a one-off in the background: the candidates' builds go first on a small machine
        wanted.touch()
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if building.exists() or not stamped():  # half-written, or from another torch: torch's own check would keep it
                for old in (head / HEADER, head / SIGNATURE, stamp, building):
                    with contextlib.suppress(OSError):
                        old.unlink()
            existed = (head / HEADER).exists()
            building.touch()
            real([], [])
            stamp.write_text(stamp_text())
            building.unlink()
        except Exception as e:  # noqa: BLE001  (no g++, ...): builds go without it
            return {"ok": False, "note": f"precompiled header unavailable: {type(e).__name__}: {e}"}
        finally:
            with contextlib.suppress(OSError):
                wanted.unlink()
            fcntl.flock(lock, fcntl.LOCK_UN)
    return {"ok": True, "seconds": time.perf_counter() - t0, "built": not existed}  # messages.PchReport
