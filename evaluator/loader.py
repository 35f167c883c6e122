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


def guard_pch(cache_dir: str) -> None:
    """Make torch's precompiled header shared and safe between concurrent workers.

    torch keeps one `torch/extension.h.gch` per installation: `use_pch=True` (re)builds it when its flags
    differ and `use_pch=False` deletes it. In workers we (1) never delete it, (2) build it under a file lock,
    (3) carry on without PCH if the torch folder is read-only or the build fails.
    """
    global _pch_patched
    if _pch_patched:
        return
    import torch.utils.cpp_extension as ce

    real = getattr(ce, "_check_and_build_extension_h_precompiler_headers", None)
    if real is None or not hasattr(ce, "remove_extension_h_precompiler_headers"):
        return
    lock_path = Path(cache_dir) / "pch.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)

    def locked_build(*args, **kwargs):
        with open(lock_path, "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                return real(*args, **kwargs)
            except Exception as e:  # read-only site-packages, no g++, ...: build without the PCH  # noqa: BLE001
                print(f"[evaluator] precompiled header unavailable: {e}", file=sys.stderr)
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    ce._check_and_build_extension_h_precompiler_headers = locked_build
    ce.remove_extension_h_precompiler_headers = lambda: None
    _pch_patched = True
