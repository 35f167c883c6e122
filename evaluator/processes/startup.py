"""Starting an evaluator's workers: the referee pool and its device probe (the first referee, which becomes the
first reference's), then the runner, recorder and builder pools sized for the device and the cores. The evaluator
(`api.py`) keeps the results and its own state; nothing here holds any."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import messages as M
from ..errors import EvaluatorError
from ..settings import EvalSettings
from .environment import scrubbed_env
from .handle import Spec, WorkerFailed
from .pool import Pool
from .referees import MAX_REFEREES

RUNNERS_AT_ONCE = max(2, min(8, (os.cpu_count() or 2) // 2))  # candidates on the device side by side (best-of-n)
# referees alive at once: the kept ones, and one for each candidate side by side on a reference of its own (a pool
# this size never makes a new reference wait, under the referee lock, for a slot only an eviction frees)
REFEREES_AT_ONCE = MAX_REFEREES + RUNNERS_AT_ONCE


COMPILE_CACHE = ".torch-compile"  # torch.compile's caches of the referees, in the build cache (see referee_env)


def referee_env(settings: EvalSettings, env: dict[str, str]) -> dict[str, str]:
    """The referees' environment: torch.compile's caches (inductor's compiled graphs, Triton's kernels) in one
    folder of the build cache, shared by every referee of every evaluator of this user, unless the user names
    folders of their own. A worker's own folder (its HOME and TMPDIR) goes when it does, so without this every
    referee compiled its reference cold (a new referee of the same reference after an edit, after an eviction, in
    the next session or sweep): on a two-core CPU 25-30 s, where a new evaluator's referee with the cache takes
    5.6 s (docs/compile-time.md). Only trusted referees write there: a sandbox may read the build cache, never
    write it, and this folder is its owner's alone."""
    out = dict(env)
    if not settings.cache_dir:
        return out
    base = Path(settings.cache_dir) / COMPILE_CACHE
    for var, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        if out.get(var):
            continue
        try:
            (base / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
            base.chmod(0o700)
        except OSError:  # no shared cache: each referee compiles in its own folder, as without one
            continue
        out[var] = str(base / sub)
    return out


def spec(settings: EvalSettings, role: str, env: dict[str, str], **kw: Any) -> Spec:
    return Spec(role=role, env=tuple(sorted(env.items())), cache_dir=settings.cache_dir, **kw)


def probe(settings: EvalSettings, env: dict[str, str],
          publish: Callable[[Pool], None]) -> tuple[Pool, M.Ready, M.DeviceInfo]:
    """The referee pool, its first referee's ready message and the device it probed (`env`'s KLSP_DEVICE falls
    back to the CPU where "auto" found a driver but no working GPU). `publish` is given each referee pool as it is
    made (the evaluator's close closes it). Raises WorkerError or EvaluatorError, the pool closed."""
    referees = Pool(spec(settings, "referee", referee_env(settings, env)), size=REFEREES_AT_ONCE, warm=1,
                    single_use=True)
    publish(referees)
    try:
        w = referees.acquire()
        ready = w.wait_ready()
        if ready.error and env["KLSP_DEVICE"].startswith("cuda") and settings.device == "auto":
            referees.release(w, tainted=True)  # "auto" on a machine whose driver is there but no GPU works
            referees.close()
            env["KLSP_DEVICE"] = "cpu"
            referees = Pool(spec(settings, "referee", referee_env(settings, env)), size=REFEREES_AT_ONCE, warm=1,
                            single_use=True)
            publish(referees)
            w = referees.acquire()
            ready = w.wait_ready()
        if ready.error:
            raise EvaluatorError(ready.error)
        try:
            info, _ = w.ask(M.RefereeOps.info, M.Empty(), timeout=120.0)
        except WorkerFailed as e:
            raise EvaluatorError(f"device probe failed: {e.failed.error}") from None
        referees.release(w, tainted=False)  # the probe becomes the first reference's referee
    except Exception:
        referees.close()
        raise
    return referees, ready, info


def worker_pools(settings: EvalSettings, env: dict[str, str],
                 ready: M.Ready) -> tuple[Pool, Pool, Pool, dict[str, str]]:
    """The runner, recorder and builder pools for the device the probe found (`env` is given its device and
    architectures), and the compile workers' environment (no GPU)."""
    s = settings
    device = ready.device or "cpu"
    gpu = device.startswith("cuda")
    env["KLSP_DEVICE"] = device
    arch = ready.arch_list
    if arch and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        env["TORCH_CUDA_ARCH_LIST"] = arch
    n = s.compile_workers or min(8, os.cpu_count() or 1)
    cpu_env = dict(env, CUDA_VISIBLE_DEVICES="", KLSP_DEVICE="cpu", MAX_JOBS="2")
    phys = physical_memory()
    runners = Pool(spec(s, "runner", env, gpu=gpu, memory_bytes=int(phys * 0.75), max_pids=256),
                   size=RUNNERS_AT_ONCE, warm=s.warm_workers, single_use=True,
                   ahead=max(1, min(6, (os.cpu_count() or 2) // 2)) if s.warm_workers else 0)
    recorders = Pool(spec(s, "recorder", cpu_env, memory_bytes=int(phys * 0.5), max_pids=128),
                     size=n, warm=min(s.warm_workers, n), single_use=True)
    builders = Pool(spec(s, "builder", cpu_env, memory_bytes=int(phys * 0.5), max_pids=512,
                         max_file_bytes=4 << 30),
                    size=n, warm=min(s.warm_workers, n), single_use=True)
    return runners, recorders, builders, cpu_env


def requested_device(settings: EvalSettings) -> str:
    d = settings.device
    return f"cuda:{settings.gpu}" if d == "cuda" else d


def requested_env(settings: EvalSettings) -> dict[str, str]:
    """The workers' scrubbed environment for the device asked for ("auto": a GPU where its driver is there)."""
    requested = requested_device(settings)
    env = scrubbed_env({"KLSP_DEVICE": requested, "KLSP_GPU": str(settings.gpu),
                        "KLSP_CPU_THREADS": str(settings.threads())})
    if requested == "auto":
        env["KLSP_DEVICE"] = "cuda:0" if Path("/dev/nvidiactl").exists() else "cpu"
    return env


def salt(recorders: Pool, cancel: threading.Event | None) -> str:
    """What changes a binary besides its sources (reported by every recorder/builder at start-up)."""
    w = recorders.acquire(cancel)
    try:
        ready = w.wait_ready(cancel=cancel)
    finally:
        recorders.release(w, tainted=False)
    return ready.salt


def device_index(device: str) -> int:
    """The index in "cuda:N" (NVML's index matches it where CUDA_VISIBLE_DEVICES does not reorder devices)."""
    try:
        return int(device.split(":", 1)[1])
    except (IndexError, ValueError):
        return 0


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 << 30
