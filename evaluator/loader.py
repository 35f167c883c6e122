"""Worker side: turn a source string into a module, with load_inline builds going to a private, cached folder."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_counter = 0


def source_hash(src: str) -> str:
    return hashlib.sha256(src.encode()).hexdigest()


def build_key(candidate_src: str, torch_version: str | None = None, torch_cuda: str | None = None,
              arch_list: str | None = None) -> str:
    """The build folder's name: the candidate's source hash plus what changes the binary (torch, arch list).

    The parent computes the same key (without importing torch) from what the workers report.
    """
    if torch_version is None:
        import torch

        torch_version, torch_cuda = torch.__version__, torch.version.cuda
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "") if arch_list is None else arch_list
    salt = f"{torch_version}|{torch_cuda}|{arch}"
    return hashlib.sha256((salt + "\n" + candidate_src).encode()).hexdigest()[:20]


@contextlib.contextmanager
def extensions_dir(cache_dir: str, candidate_src: str) -> Iterator[Path]:
    """Point load_inline at <cache>/<hash>/: candidates that reuse an extension name never collide."""
    path = Path(cache_dir) / build_key(candidate_src)
    path.mkdir(parents=True, exist_ok=True)
    # One live builder per folder. The kernel drops an flock when its holder dies, unlike torch's own `lock`
    # file, which a build killed mid-way (timeout, a killed parent) leaves behind for every later build to wait
    # on until its timeout. Holding the flock proves that any torch lock file still there is stale.
    guard = open(path / ".klsp-build.lock", "w")  # held for the whole build
    fcntl.flock(guard, fcntl.LOCK_EX)
    for stale in path.glob("*/lock"):
        try:
            stale.unlink()
        except OSError:
            pass
    old = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(path)
    try:
        yield path
    finally:
        release_pch()
        fcntl.flock(guard, fcntl.LOCK_UN)
        guard.close()
        if old is None:
            os.environ.pop("TORCH_EXTENSIONS_DIR", None)
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = old


def built_libraries(path: Path) -> list[Path]:
    return sorted(path.glob("*/*.so"))


def exec_module(src: str, filename: str) -> types.ModuleType:
    """Execute `src` as a fresh module (registered in sys.modules so dataclasses, pickling etc. work)."""
    global _counter
    _counter += 1
    name = f"_klsp_{Path(filename).stem}_{_counter}"
    mod = types.ModuleType(name)
    mod.__file__ = filename
    sys.modules[name] = mod
    code = compile(src, filename, "exec")
    exec(code, mod.__dict__)  # noqa: S102
    return mod


_pch_patched = False
_pch_lock: Any = None  # the open lock file while this process holds the PCH lock (shared after a (re)build)


def guard_pch(cache_dir: str) -> None:
    """Make torch's precompiled header shared and safe between concurrent workers.

    torch keeps one `torch/extension.h.gch` per installation (785 MB for torch 2.13): `use_pch=True` (re)builds
    it in place whenever a candidate's flags differ from the last build's, and `use_pch=False` deletes it. A
    compiler reading it while another process rewrites it crashes (cc1plus segfaults). In workers we:
    1. never delete it;
    2. check / (re)build it under an exclusive flock that lives next to it (so workers of every evaluator and
       cache folder agree), then keep a shared flock until this candidate's build is over (`release_pch`), so
       no rebuild can start while a compiler may read it;
    3. mark a (re)build in progress: a builder killed mid-way leaves the mark, and the next one deletes the
       half-written header and its signature instead of trusting them;
    4. carry on without PCH if the torch folder is read-only or the build fails.
    """
    global _pch_patched
    if _pch_patched:
        return
    import torch.utils.cpp_extension as ce

    real = getattr(ce, "_check_and_build_extension_h_precompiler_headers", None)
    torch_path = getattr(ce, "_TORCH_PATH", None)
    if real is None or torch_path is None or not hasattr(ce, "remove_extension_h_precompiler_headers"):
        return
    head = Path(torch_path) / "include" / "torch"
    lock_path = head / ".klsp-pch.lock"
    if not os.access(head, os.W_OK):
        lock_path = Path(cache_dir) / "pch.lock"  # the header cannot be (re)built there anyway
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    building = head / ".klsp-pch.building"

    def locked_build(*args: Any, **kwargs: Any) -> None:
        global _pch_lock
        if _pch_lock is None:
            _pch_lock = open(lock_path, "a")  # noqa: SIM115  (held across calls, closed by release_pch)
        fcntl.flock(_pch_lock, fcntl.LOCK_EX)  # from shared (an earlier call of this candidate) or unlocked
        try:
            if building.exists():  # a builder died mid-way: its header may be half written
                for stale in (head / "extension.h.gch", head / "extension.h.sign", building):
                    with contextlib.suppress(OSError):
                        stale.unlink()
            try:
                building.touch()
            except OSError:
                pass
            real(*args, **kwargs)
            with contextlib.suppress(OSError):
                building.unlink()
        except Exception as e:  # read-only site-packages, no g++, ...: build without the PCH  # noqa: BLE001
            print(f"[evaluator] precompiled header unavailable: {e}", file=sys.stderr)
        finally:
            fcntl.flock(_pch_lock, fcntl.LOCK_SH)  # readers until this candidate's build is over

    ce._check_and_build_extension_h_precompiler_headers = locked_build
    ce.remove_extension_h_precompiler_headers = lambda: None
    _pch_patched = True


def release_pch() -> None:
    """End of a candidate's build: drop this process's hold on the precompiled header."""
    global _pch_lock
    if _pch_lock is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(_pch_lock, fcntl.LOCK_UN)
            _pch_lock.close()
        _pch_lock = None
