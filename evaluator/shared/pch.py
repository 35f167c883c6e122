"""Shared: torch's precompiled `torch/extension.h`. The trusted `pch` worker builds it (build_pch) under an
exclusive lock; sandboxed builders only read it, holding the shared lock for their whole build."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Any


def _pch_paths() -> tuple[Path, Path, Path] | None:
    import torch.utils.cpp_extension as ce

    torch_path = getattr(ce, "_TORCH_PATH", None)
    if torch_path is None:
        return None
    head = Path(torch_path) / "include" / "torch"
    return head, head / ".klsp-pch.lock", head / ".klsp-pch.building"


@contextlib.contextmanager
def pch_readers_lock() -> Any:
    """Held by a sandboxed builder for its whole build: the trusted PCH build waits for readers to finish."""
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


def build_pch() -> dict:
    """Trusted: (re)build torch's precompiled extension.h for the default flags, under an exclusive lock.

    A builder killed mid-way leaves the `building` mark: the next one deletes the half-written header."""
    import torch.utils.cpp_extension as ce

    paths = _pch_paths()
    real = getattr(ce, "_check_and_build_extension_h_precompiler_headers", None)
    if paths is None or real is None:
        return {"ok": False, "note": "this torch has no precompiled-header support"}
    head, lock_path, building = paths
    if not os.access(head, os.W_OK):
        return {"ok": False, "note": f"{head} is not writable: builds go without a precompiled header"}
    t0 = time.perf_counter()
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if building.exists():
                for stale in (head / "extension.h.gch", head / "extension.h.sign", building):
                    with contextlib.suppress(OSError):
                        stale.unlink()
            existed = (head / "extension.h.gch").exists()
            building.touch()
            real([], [])
            building.unlink()
        except Exception as e:  # noqa: BLE001  (no g++, ...): builds go without it
            return {"ok": False, "note": f"precompiled header unavailable: {type(e).__name__}: {e}"}
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return {"ok": True, "seconds": time.perf_counter() - t0, "built": not existed}
