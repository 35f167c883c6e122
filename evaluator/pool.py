"""Worker processes: spawned, isolated, killed and replaced when they fail.

Each worker is `python -m evaluator.worker` started with `subprocess.Popen`:

- its own process session (`start_new_session`), so killing the group also kills ninja, nvcc and cc1plus;
- a scrubbed environment (an allow-list: PATH, HOME, LANG, CUDA_*, TORCH_*, ...; no tokens, no keys);
- its own temporary folder as cwd and TMPDIR, removed when the worker goes;
- fds 1 and 2 go to a log file in that folder (candidate output never reaches the caller's stdout), and the
  protocol runs over two dedicated pipes, one JSON object per line.

The parent never unpickles anything from a worker: a candidate runs inside it and could write to the pipe.
Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Variables a worker may see; everything else (API keys, tokens, cloud credentials) is dropped.
ENV_ALLOW = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "SHELL", "PYTHONPATH", "VIRTUAL_ENV",
    "CONDA_PREFIX", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "CC", "CXX", "CUDAHOSTCXX", "MAX_JOBS",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "XDG_CACHE_HOME", "SSL_CERT_FILE",
}
ENV_ALLOW_PREFIXES = ("LC_", "CUDA_", "TORCH_", "TORCHINDUCTOR_", "TRITON_", "NVIDIA_", "NVCC_", "CUDNN_", "NCCL_")
# Never passed even when a prefix matches (credentials that happen to share a prefix).
ENV_DENY_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")

STARTUP_TIMEOUT = 180.0  # importing torch and creating a CUDA context on a cold, loaded machine


class WorkerError(Exception):
    """The worker could not answer: it died, hung, or the call was cancelled."""

    def __init__(self, kind: str, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.kind = kind  # "crashed" | "timeout" | "cancelled" | "protocol"
        self.message = message
        self.log_tail = log_tail


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {}
    for k, v in os.environ.items():
        if any(w in k.upper() for w in ENV_DENY_WORDS):
            continue
        if k in ENV_ALLOW or k.startswith(ENV_ALLOW_PREFIXES):
            env[k] = v
    # the worker must import this package also when it is not installed (e.g. run from a checkout)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def describe_exit(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        hint = " (killed: out of memory?)" if -rc == signal.SIGKILL else ""
        return f"signal {-rc} ({name}){hint}"
    return f"exit status {rc}"


class Worker:
    """One spawned worker process and its pipes. Not thread-safe: one caller at a time (the pool sees to it)."""

    def __init__(self, kind: str, env: dict[str, str], python: str | None = None) -> None:
        self.kind = kind
        self.tmpdir = tempfile.mkdtemp(prefix=f"klsp-{kind}-")
        self.log_path = os.path.join(self.tmpdir, "worker.log")
        env = dict(env, TMPDIR=self.tmpdir, TEMP=self.tmpdir, TMP=self.tmpdir)
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        log = open(self.log_path, "wb")  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                [python or sys.executable, "-m", "evaluator.worker", str(req_r), str(res_w), kind],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=self.tmpdir,
                pass_fds=(req_r, res_w), start_new_session=True, close_fds=True,
            )
        finally:
            log.close()
            os.close(req_r)
            os.close(res_w)
        self._req = req_w
        self._res = res_r
        self._buf = b""
        self.ready: dict[str, Any] | None = None
        self.jobs = 0
        self.dead = False
        self._next_id = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 25, chars: int = 3000) -> str:
        try:
            data = Path(self.log_path).read_bytes()[-20000:].decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(data.splitlines()[-lines:])[-chars:]

    def _readline(self, timeout: float) -> dict | None:
        """One message, or None when nothing came within `timeout`. Raises EOFError when the pipe closed."""
        while b"\n" not in self._buf:
            r, _, _ = select.select([self._res], [], [], max(0.0, timeout))
            if not r:
                return None
            chunk = os.read(self._res, 1 << 16)
            if not chunk:
                raise EOFError
            self._buf += chunk
            timeout = 0.0 if b"\n" in self._buf else timeout
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError as e:
            raise WorkerError("protocol", f"garbled message from the worker: {line[:200]!r}") from e
        if not isinstance(msg, dict):
            raise WorkerError("protocol", f"unexpected message from the worker: {line[:200]!r}")
        return msg

    def call(
        self,
        op: str,
        args: dict[str, Any],
        *,
        timeout: float,
        stage_timeouts: dict[str, float] | None = None,
        cancel: threading.Event | None = None,
        on_event: Callable[[dict], None] | None = None,
    ) -> dict:
        """Send one request and wait for its result.

        `timeout` bounds the whole call from the moment the worker is ready; a "stage" event naming a key of
        `stage_timeouts` restarts the clock with that budget. On timeout, cancel or death the worker is killed
        and `WorkerError` raised.
        """
        if self.dead:
            raise WorkerError("crashed", "worker is gone")
        self._next_id += 1
        rid = self._next_id
        self.jobs += 1
        try:
            os.write(self._req, (json.dumps({"id": rid, "op": op, "args": args}) + "\n").encode())
        except OSError:
            self._died()
        start = time.monotonic()
        stage, budget = op, timeout
        deadline = start + (timeout if self.ready else STARTUP_TIMEOUT + timeout)
        while True:
            if cancel is not None and cancel.is_set():
                self.kill()
                raise WorkerError("cancelled", "cancelled")
            now = time.monotonic()
            if now > deadline:
                self.kill()
                raise WorkerError("timeout", f"timeout after {budget:g} s ({stage})", self.log_tail())
            try:
                msg = self._readline(min(0.1, deadline - now))
            except EOFError:
                self._died()
            except WorkerError:
                self.kill()
                raise
            if msg is None:
                if self.proc.poll() is not None:
                    self._died()
                continue
            kind = msg.get("type")
            if kind == "ready":
                self.ready = msg
                deadline = time.monotonic() + timeout
            elif kind == "stage":
                stage = str(msg.get("stage", ""))
                if stage_timeouts and stage in stage_timeouts:
                    budget = stage_timeouts[stage]
                    deadline = time.monotonic() + budget
                if on_event:
                    on_event(msg)
            elif kind == "result" and msg.get("id") == rid:
                return msg
            elif kind == "result":
                continue  # a stale or forged answer: ignore

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> dict:
        end = time.monotonic() + timeout
        while self.ready is None:
            if time.monotonic() > end:
                self.kill()
                raise WorkerError("timeout", f"worker did not start within {timeout:g} s", self.log_tail())
            try:
                msg = self._readline(0.1)
            except EOFError:
                self._died()
            if msg is None:
                if self.proc.poll() is not None:
                    self._died()
                continue
            if msg.get("type") == "ready":
                self.ready = msg
        return self.ready

    def _died(self) -> None:
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        tail = self.log_tail()
        self.kill()
        raise WorkerError("crashed", f"crashed: {describe_exit(rc)}", tail)

    def kill(self) -> None:
        """Kill the worker's whole process group, reap it, and remove its temp folder. Idempotent."""
        if self.dead:
            return
        self.dead = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        # ninja starts each build command in a process group of its own, which killpg misses; they all stay in
        # the worker's session, so kill the whole session too (compilers must not outlive a timed-out build).
        kill_session(self.proc.pid)
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - an unkillable process (D state)
            pass
        for fd in (self._req, self._res):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def session_members(sid: int) -> list[int]:
    """PIDs of the processes in session `sid` (Linux /proc; empty elsewhere)."""
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) == sid:  # fields after the command: state, ppid, pgrp, session, ...
                pids.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def kill_session(sid: int) -> None:
    for _ in range(3):  # a dying ninja may still fork: sweep until the session is empty
        members = [p for p in session_members(sid) if p != os.getpid()]
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


class Pool:
    """Workers of one kind: at most `size` busy at once, `warm` idle ones kept started in the background.

    `single_use` workers are killed after every job (candidate code leaves no state behind); others are reused
    up to `max_jobs` times and replaced after any failure.
    """

    def __init__(self, kind: str, env: dict[str, str], size: int, warm: int, single_use: bool,
                 max_jobs: int = 25) -> None:
        self.kind = kind
        self.env = env
        self.size = max(1, size)
        # spares of a single-use pool are not busy workers: keep as many as asked; others never exceed `size`
        self.warm = max(0, warm if single_use else min(warm, self.size))
        self._spawning = 0  # spares being started by refill threads (counted so two refills do not overshoot)
        self.single_use = single_use
        self.max_jobs = max_jobs
        self._slots = threading.Semaphore(self.size)
        self._lock = threading.Lock()
        self._idle: list[Worker] = []
        self._all: set[Worker] = set()
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------------------
    def _spawn(self) -> Worker:
        w = Worker(self.kind, self.env)
        with self._lock:
            if self._closed:
                w.kill()
                raise WorkerError("cancelled", "the evaluator is closed")
            self._all.add(w)
        return w

    def _refill(self) -> None:
        with self._lock:
            pending = max(0, self.warm - len(self._idle) - self._spawning)
            self._spawning += pending
        try:
            while pending:
                w = self._spawn()
                with self._lock:
                    self._spawning -= 1
                    pending -= 1
                    if self._closed:
                        w.kill()
                        return
                    self._idle.append(w)
        except (WorkerError, OSError):
            return
        finally:
            with self._lock:
                self._spawning -= pending

    def refill_async(self) -> None:
        if self.warm and not self._closed:
            threading.Thread(target=self._refill, name=f"klsp-{self.kind}-refill", daemon=True).start()

    def acquire(self, cancel: threading.Event | None = None) -> Worker:
        while not self._slots.acquire(timeout=0.1):
            if cancel is not None and cancel.is_set():
                raise WorkerError("cancelled", "cancelled while waiting for a worker")
            if self._closed:
                raise WorkerError("cancelled", "the evaluator is closed")
        try:
            with self._lock:
                if self._closed:
                    raise WorkerError("cancelled", "the evaluator is closed")
                while self._idle:
                    w = self._idle.pop(0)
                    if not w.dead and w.proc.poll() is None:
                        break
                    self._forget(w)
                else:
                    w = None
            if w is None:
                w = self._spawn()
            if self.single_use:
                self.refill_async()  # its replacement starts now, while this worker runs its candidate
            return w
        except BaseException:
            self._slots.release()
            raise

    def release(self, w: Worker, tainted: bool) -> None:
        """Give a worker back. `tainted`: candidate code ran in it (a single-use pool then replaces it)."""
        keep = (not w.dead and not self._closed and w.jobs < self.max_jobs and w.proc.poll() is None
                and not (self.single_use and tainted))
        if keep:
            with self._lock:
                self._idle.append(w)
        else:
            w.kill()
            with self._lock:
                self._forget(w)
        self._slots.release()
        self.refill_async()

    def _forget(self, w: Worker) -> None:
        w.kill()
        self._all.discard(w)

    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._all if not w.dead]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for w in workers:
            w.kill()
