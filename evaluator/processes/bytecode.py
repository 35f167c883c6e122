"""Parent side: compiled bytecode for what the workers import.

A worker may not write outside its folder, so Python cannot keep the bytecode of the modules it compiles. Where the
installed packages carry none (installed with `pip --no-compile`, an image built with PYTHONDONTWRITEBYTECODE, a
read-only install), every worker compiles torch's source again at every start: on an H200 seconds of torch's own
import and of the profiler's first use, in every runner, every referee and every build.

There the evaluator primes a bytecode folder once per interpreter and installation: a process of ours, never
candidate or reference code (`python -m evaluator.worker --prime`), makes a runner's and a builder's start-up
(imports and warm-up) with PYTHONPYCACHEPREFIX pointing at a fresh folder, which becomes the cache once the run is
whole. Workers started after that read it (PYTHONPYCACHEPREFIX); it lies inside the cache folder they may read and
never write, and only this module writes it. Where the packages carry their bytecode, nothing changes: a prefix
would hide that bytecode from every module the primer did not import. `KLSP_BYTECODE=never` turns this off,
`always` primes even then.
Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

# modules every runner imports (torch, the extension builder, the profiler)
SAMPLE = ("torch/__init__.py", "torch/utils/cpp_extension.py", "torch/profiler/profiler.py")
PRIME_TIMEOUT_S = 240.0
MARK = "complete"


def _site() -> Path | None:
    """The folder torch is installed in (site-packages), found without importing it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).resolve().parents[1]


def _pyc(src: Path) -> Path:
    return src.parent / "__pycache__" / f"{src.stem}.{sys.implementation.cache_tag}.pyc"


def missing(site: Path | None = None) -> list[str]:
    """The sampled modules whose bytecode the installation lacks (none, or older than their source)."""
    site = site or _site()
    if site is None:
        return []
    out = []
    for rel in SAMPLE:
        src = site / rel
        if not src.is_file():
            continue
        pyc = _pyc(src)
        try:
            if pyc.stat().st_mtime < src.stat().st_mtime:
                out.append(rel)
        except OSError:
            out.append(rel)
    return out


def key(site: Path) -> str:
    """One cache per interpreter and installation: a new torch (or Python) gets a fresh folder."""
    parts = [os.path.realpath(sys.executable), sys.version, str(site)]
    for rel in SAMPLE[:1] + ("torch/version.py",):
        try:
            st = (site / rel).stat()
            parts.append(f"{rel}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{rel}:-")
    return f"{sys.implementation.cache_tag}-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def folder(cache_dir: str, site: Path) -> Path:
    return Path(cache_dir) / ".bytecode" / key(site)


def mode() -> str:
    m = os.environ.get("KLSP_BYTECODE", "auto").strip().lower()
    return m if m in ("auto", "always", "never") else "auto"


def _wanted(cache_dir: str) -> Path | None:
    """Where torch is installed, when its workers want a bytecode cache (else None)."""
    site = _site()
    if not cache_dir or site is None or mode() == "never" or (mode() == "auto" and not missing(site)):
        return None
    return site


def ready_prefix(cache_dir: str) -> str | None:
    """The prefix workers get now: a whole cache for this installation, where one is wanted."""
    site = _wanted(cache_dir)
    if site is None:
        return None
    d = folder(cache_dir, site)
    return str(d / "tree") if (d / MARK).is_file() else None


def prime(cache_dir: str, env: dict[str, str], timeout: float = PRIME_TIMEOUT_S) -> str | None:
    """Make the cache (once: a whole one is reused) and return the prefix for workers, or None where none is wanted
    or priming failed (workers then compile as before; the log says why)."""
    site = _wanted(cache_dir)
    if site is None:
        return None
    d = folder(cache_dir, site)
    if (d / MARK).is_file():
        return str(d / "tree")
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = d.parent / f"{d.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    penv = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    penv.update(PYTHONPYCACHEPREFIX=str(tmp / "tree"), HOME=str(tmp), TMPDIR=str(tmp),
                XDG_CACHE_HOME=str(tmp / ".cache"))
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "evaluator.worker", "--prime"], env=penv, cwd=str(tmp),
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout)
        ok, out = p.returncode == 0, p.stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        ok, out = False, f"{type(e).__name__}: {e}"
    if not ok:
        log.warning("bytecode cache not made (workers compile their imports as before): %s", out[-1500:])
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    shutil.rmtree(tmp / ".cache", ignore_errors=True)  # only the bytecode stays
    os.chmod(tmp, 0o755)
    (tmp / MARK).write_text(f"primed in {time.monotonic() - t0:.1f} s\n")
    try:
        os.rename(tmp, d)
    except OSError:  # another evaluator made it meanwhile: theirs is as good
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("bytecode cache for the workers' imports made in %.1f s: %s", time.monotonic() - t0, d)
    return str(d / "tree") if (d / MARK).is_file() else None


class Primer:
    """`prime` on a thread of its own, started at once, so that it runs while the first referee starts."""

    def __init__(self, cache_dir: str, env: dict[str, str]) -> None:
        self.prefix: str | None = ready_prefix(cache_dir)
        self._done = threading.Event()
        if self.prefix is not None or _wanted(cache_dir) is None:
            self._done.set()
            return
        env = dict(env)

        def run() -> None:
            try:
                self.prefix = prime(cache_dir, env)
            except Exception as e:  # noqa: BLE001  (a cache: never a reason the evaluator fails)
                log.warning("bytecode cache not made: %s", e)
            finally:
                self._done.set()

        threading.Thread(target=run, name="klsp-bytecode", daemon=True).start()

    def wait(self, timeout: float) -> str | None:
        """The prefix, waiting up to `timeout` for the cache being made (workers started sooner go without)."""
        self._done.wait(timeout)
        return self.prefix
