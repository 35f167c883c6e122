"""Parent side: one worker process, started, spoken to, stopped and killed. Nothing here imports torch.

Each worker is `python -m evaluator.worker FD ROLE POLICY` with:

- its own process session, its own folder (HOME, TMPDIR, cwd), a scrubbed environment (an allow-list);
- fds 1 and 2 going to a log file in its folder; the protocol on a Unix socket (`protocol.Channel`), one JSON
  object per line, descriptors alongside; request ids are random, so nothing can answer a request before it
  is asked;
- for roles that run candidate code or its compiler (runner, recorder, builder): the sandbox
  (`sandbox.command` + `sandboxed/harden.py`) and, where the machine allows it, a cgroup.

Every request has a timeout enforced here; the worker's own messages never extend it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import messages as M
from ..shared.policy import WorkerPolicy
from ..shared.protocol import Channel, ProtocolError, close_all
from . import cgroup, proctree, sandbox
from .environment import HOST_CACHE_VARS
from .members import CpuTime, Members

STARTUP_TIMEOUT = 180.0  # importing torch and creating a CUDA context on a cold, loaded machine

# Workers die with the evaluator through the parent-death signal (bwrap's --die-with-parent, prctl in trusted
# workers). Linux sends it when the *thread* that started the child ends, not the process: so every worker is
# started from this one thread, which lives as long as the process (a worker started from a short-lived refill
# thread would be killed the moment that thread returned).
_keeper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="klsp-spawn")


def _popen(*args: Any, **kwargs: Any) -> subprocess.Popen:
    return _keeper.submit(subprocess.Popen, *args, **kwargs).result()


SANDBOXED_ROLES = ("runner", "recorder", "builder")


class WorkerError(Exception):
    """The worker could not answer: it died, hung, broke the protocol, or the call was cancelled."""

    def __init__(self, kind: str, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.kind = kind  # "crashed" | "timeout" | "cancelled" | "protocol"
        self.message = message
        self.log_tail = log_tail


class WorkerFailed(Exception):
    """The worker answered that the request raised (`failed` says what; from a sandboxed worker that is a claim)."""

    def __init__(self, failed: M.Failed) -> None:
        super().__init__(failed.error)
        self.failed = failed


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


@dataclass(frozen=True)
class Spec:
    """What kind of worker to start."""

    role: str  # "referee" | "runner" | "recorder" | "builder" | "pch"
    env: tuple[tuple[str, str], ...]
    cache_dir: str = ""
    gpu: bool = False
    memory_bytes: int = 0
    max_pids: int = 0
    max_file_bytes: int = 256 << 20  # the largest file the worker may write (builders: their libraries)

    @property
    def sandboxed(self) -> bool:
        return self.role in SANDBOXED_ROLES


class Worker:
    """One worker process. Not thread-safe: one caller at a time (the pool sees to it)."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.role = spec.role
        self.caps = sandbox.capabilities()
        self.workdir = tempfile.mkdtemp(prefix=f"klsp-{spec.role}-")
        self.log_path = os.path.join(self.workdir, "worker.log")
        self.build_dir = os.path.join(self.workdir, "build")
        self.sandboxed = spec.sandboxed
        self.cgroup: cgroup.Cgroup | None = None
        if self.sandboxed:
            os.makedirs(self.build_dir, exist_ok=True)
            if self.caps.root:
                for d in (self.workdir, self.build_dir):
                    os.chown(d, sandbox.NOBODY, sandbox.NOBODY)
        env = dict(spec.env)
        if self.sandboxed:  # the candidate's caches go in its own folder: never a host folder the sandbox refuses
            for k in HOST_CACHE_VARS:
                env.pop(k, None)
        env.update(HOME=self.workdir, TMPDIR=self.workdir, TEMP=self.workdir, TMP=self.workdir,
                   XDG_CACHE_HOME=os.path.join(self.workdir, ".cache"))
        policy = WorkerPolicy(role=spec.role, workdir=self.workdir, sandboxed=self.sandboxed,
                              readable=(spec.cache_dir,) if spec.cache_dir else (), gpu=spec.gpu,
                              namespaces=bool(self.caps.bwrap) and self.sandboxed,
                              read_paths=tuple(sandbox.needed_read_paths(hidden_only=False)), max_file_bytes=spec.max_file_bytes,
                              parent=0 if self.sandboxed else os.getpid())
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [sys.executable, "-m", "evaluator.worker", str(theirs.fileno()), spec.role, policy.to_json()]
        if self.sandboxed:
            argv = sandbox.command(argv, policy, self.caps)
        log = open(self.log_path, "wb")  # noqa: SIM115
        try:
            self.proc = _popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                               cwd=self.workdir, pass_fds=(theirs.fileno(),), start_new_session=True, close_fds=True)
        finally:
            log.close()
            theirs.close()
        if self.sandboxed and self.caps.root:
            os.chown(self.log_path, sandbox.NOBODY, sandbox.NOBODY)
        self.chan = Channel(ours)
        self.ready: M.Ready | None = None
        self.jobs = 0
        self.dead = False
        self.worker_pid = self.proc.pid  # the worker itself (inside bwrap: found at ready)
        self.reply_at = 0.0  # perf_counter (CLOCK_MONOTONIC) when the last answer arrived
        # called once, at the moment the next answer's bytes are whole (before they are decoded): the outside
        # clock's end (stopping the process that answered, the device's idle probe), then cleared
        self.at_answer: Callable[[], None] | None = None
        self.stamps: Any = None
        # the sandbox's processes (bubblewrap's own are kept running: they run no candidate code)
        self.members = Members(self.proc.pid, keep=(self.proc.pid,) if self.sandboxed and self.caps.bwrap else ())
        self._holds = 0  # freeze() calls not yet undone by thaw(): frozen while > 0
        self._hold_lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 25, chars: int = 3000) -> str:
        try:
            data = Path(self.log_path).read_bytes()[-20000:].decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(data.splitlines()[-lines:])[-chars:]

    # -- messages -------------------------------------------------------------------------------------------------
    def _recv(self, timeout: float, on_line: Callable[[bytes], None] | None = None
              ) -> tuple[dict, list[int]] | None:
        try:
            return self.chan.recv(timeout, on_line)
        except EOFError:
            self._died()
        except ProtocolError as e:
            tail = self.log_tail()
            self.kill()
            raise WorkerError("protocol", f"broke the protocol: {e}", tail) from None
        except OSError:
            self._died()
        return None  # pragma: no cover

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT, cancel: threading.Event | None = None) -> M.Ready:
        end = time.monotonic() + timeout
        while self.ready is None:
            if cancel is not None and cancel.is_set():
                self.kill()
                raise WorkerError("cancelled", "cancelled")
            if time.monotonic() > end:
                self.kill()
                raise WorkerError("timeout", f"worker did not start within {timeout:g} s", self.log_tail())
            got = self._recv(0.1)
            if got is None:
                if self.proc.poll() is not None:
                    self._died()
                continue
            msg, fds = got
            close_all(fds)
            if msg.get("type") == "ready":
                try:
                    ready = M.Ready.from_wire({k: v for k, v in msg.items() if k != "type"})
                except M.WireError as e:
                    tail = self.log_tail()
                    self.kill()
                    raise WorkerError("protocol", f"broke the protocol: {e}", tail) from None
                self.ready = ready
                if ready.error and self.role != "referee":  # the referee's is reported by the evaluator
                    tail = self.log_tail()
                    self.kill()
                    raise WorkerError("crashed", f"the {self.role} failed to start: {ready.error}", tail)
                self._after_ready()
        return self.ready

    def _after_ready(self) -> None:
        if not self.sandboxed:
            return
        below = proctree.descendants(self.proc.pid)
        for p in below:
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            except OSError:
                continue
            if b"evaluator.worker" in cmd and b"bwrap" not in cmd.split(b"\0", 1)[0]:
                self.worker_pid = p
                break
        if self.caps.cgroup and (self.spec.memory_bytes or self.spec.max_pids):
            self.cgroup = cgroup.Cgroup(f"klsp-{self.role}-{self.proc.pid}", self.spec.memory_bytes,
                                        self.spec.max_pids, self.caps.cgroup)
            for p in [self.proc.pid, *below]:
                self.cgroup.add(p)
        keep = set(self.members.keep)
        if self.caps.bwrap and self.worker_pid != self.proc.pid:
            st = proctree.stat(self.worker_pid)
            if st is not None and int(st[1]) != self.proc.pid:
                keep.add(int(st[1]))  # bubblewrap's init in the PID namespace: the worker's parent
        self.members = Members(self.proc.pid, self.cgroup, tuple(keep))

    def call(self, op: str, args: dict[str, Any], *, timeout: float, fds: list[int] | None = None,
             cancel: threading.Event | None = None,
             on_message: Callable[[dict, list[int]], dict | None] | None = None,
             kill_on_cancel: bool = True) -> tuple[dict, list[int]]:
        """Send one request and wait for its answer (and the descriptors that came with it).

        `timeout` bounds the call from the moment the worker is ready, less the time `on_message` spends (the
        recorder's build requests are bounded by their own timeout). On timeout, cancel or death the worker is
        killed and `WorkerError` raised (`kill_on_cancel` off: on cancel the caller kills it, when it has let go
        of what it holds: a dying device process's teardown takes seconds)."""
        if self.dead:
            raise WorkerError("crashed", "worker is gone")
        if self.ready is None:
            self.wait_ready(cancel=cancel)
        rid = secrets.token_hex(8)
        answer = b'{"type":"result","id":"%s",' % rid.encode()  # how worker.py begins its answer to this request

        def arrived(line: bytes) -> None:
            if line.startswith(answer):
                self._answered()
        self.jobs += 1
        try:
            self.chan.send({"id": rid, "op": op, "args": args}, fds)
        except OSError:
            self._died()
        deadline = time.monotonic() + timeout
        while True:
            if cancel is not None and cancel.is_set():
                if kill_on_cancel:
                    self.kill()
                raise WorkerError("cancelled", "cancelled")
            now = time.monotonic()
            if now > deadline:
                tail = self.log_tail()
                self.kill()
                raise WorkerError("timeout", f"timeout after {timeout:g} s ({op})", tail)
            got = self._recv(min(0.1, deadline - now), arrived)
            if got is None:
                if self.proc.poll() is not None:
                    self._died()
                continue
            msg, rfds = got
            kind = msg.get("type")
            if kind == "result" and msg.get("id") == rid:
                if self.at_answer is not None:  # an answer worded otherwise than worker.py words it: its end is
                    self._answered()  # only now, after it was decoded (a longer clock, never a shorter one)
                self.stamps = msg.get("t")  # KLSP_DEBUG_TIMING only: the worker's own claim, printed, never used
                return msg, rfds
            close_all(rfds)
            if kind == "result":
                continue  # a stale or forged answer: ignored
            if on_message is not None and kind in ("build", "stage", "host"):
                t0 = time.monotonic()
                reply = on_message(msg, [])
                deadline += time.monotonic() - t0
                if reply is not None:
                    try:
                        self.chan.send(reply)
                    except OSError:
                        self._died()

    def _answered(self) -> None:
        self.reply_at = time.perf_counter()  # the outside clock's end
        hook, self.at_answer = self.at_answer, None
        if hook is not None:
            hook()

    def ask(self, op: M.Op[M.Req, M.Rep], request: M.Req, *, timeout: float, fds: list[int] | None = None,
            cancel: threading.Event | None = None,
            on_message: Callable[[dict, list[int]], dict | None] | None = None,
            kill_on_cancel: bool = True) -> tuple[M.Rep, list[int]]:
        """One typed request of this worker's ops table; its typed reply and descriptors. A reply that is not what
        the op promises is a protocol violation (the worker is killed); a request that raised is `WorkerFailed`."""
        if M.OPS[self.role].get(op.name) is not op:
            raise KeyError(f"{op.name!r} is not an op of the {self.role}")
        res, rfds = self.call(op.name, request.to_wire(), timeout=timeout, fds=fds, cancel=cancel,
                              on_message=on_message, kill_on_cancel=kill_on_cancel)
        if not res.get("ok"):
            close_all(rfds)
            body = {k: str(v)[:4000] for k, v in res.items() if k in ("error", "error_type", "traceback", "kind",
                                                                     "text", "detail")}
            raise WorkerFailed(M.Failed(**body))
        try:
            reply = op.reply.from_wire(res.get("reply"))
        except M.WireError as e:
            close_all(rfds)
            tail = self.log_tail()
            self.kill()
            raise WorkerError("protocol", f"its reply to {op.name!r} broke the protocol: {e}", tail) from None
        return reply, rfds

    def _died(self) -> None:
        if self.dead:  # killed by this evaluator meanwhile (its close), from another thread: nobody's fault
            raise WorkerError("cancelled", "cancelled: the evaluator stopped the worker", self.log_tail())
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        if self.sandboxed and self.caps.bwrap and rc is not None and rc > 128:
            rc = -(rc - 128)  # bwrap reports a child killed by signal N as 128 + N
        tail = self.log_tail()
        oom = self.cgroup is not None and self.cgroup.oom_killed()
        self.kill()
        what = "killed: out of memory (the sandbox's memory limit)" if oom else describe_exit(rc)
        raise WorkerError("crashed", f"crashed: {what}", tail)

    # -- process control ------------------------------------------------------------------------------------------
    def processes(self) -> list[int]:
        """The worker and every process of its sandbox (bubblewrap's own excluded, known by pid, not by name)."""
        return self.members.pids()

    def extra_processes(self) -> list[int]:
        """Processes of the sandbox other than the worker that are still alive."""
        return [p for p in self.processes() if p != self.worker_pid]

    def freeze(self) -> None:
        """Stop every process of the sandbox (see `members.py`); undone by one `thaw()`. Calls nest: the device
        stage holds its runner frozen between requests, the gate holds other candidates' runners while one is
        timed, and the runner runs only when nobody holds it."""
        with self._hold_lock:
            self._holds += 1
            try:
                self.members.freeze()
            except BaseException:
                # a freeze that failed holds nothing: left counted, no thaw would ever come (the caller has no hold
                # to undo), and a spare or a builder stopped half-way would wait, stopped, for good
                self._holds -= 1
                if self._holds == 0:
                    self.members.thaw()
                raise

    def thaw(self, pids: list[int] | None = None) -> None:
        """Undo one `freeze()`; the sandbox runs again once none is left. `pids`: its members, listed beforehand
        (a clock that starts just before the thaw need not include the listing)."""
        with self._hold_lock:
            if self._holds == 0:
                return
            self._holds -= 1
            if self._holds == 0:
                if pids is None or (self.cgroup is not None and self.cgroup.can_freeze):
                    self.members.thaw()
                else:
                    proctree.signal_all(pids, signal.SIGCONT)

    def stop_now(self, pids: list[int]) -> None:
        """SIGSTOP to `pids` (members listed beforehand), at once and nothing more: the clock's stop, before the
        device probe; `freeze()` then finds and stops every member."""
        proctree.signal_all(pids, signal.SIGSTOP)

    def cpu(self) -> CpuTime:
        """CPU time of the whole sandbox (every member, helpers and ended processes included)."""
        return self.members.cpu()

    def cpu_ns(self) -> int:
        return self.members.cpu_ns()

    def cpu_seconds(self) -> float:
        return self.cpu_ns() / 1e9

    def wanted_seconds(self) -> dict[int, float] | None:
        """Seconds each live thread of the sandbox ran or waited to run, by thread id (`proctree.wanted_ns`): on a
        loaded machine a thread kept busy gets little of a core but wants all of it. None where the kernel does not
        say."""
        ns = proctree.wanted_ns(self.processes())
        return None if ns is None else {t: v / 1e9 for t, v in ns.items()}

    def kill(self) -> None:
        """Kill the worker and everything below it, reap it, remove its folder. Idempotent."""
        if self.dead:
            return
        self.dead = True
        members = [self.proc.pid, *proctree.descendants(self.proc.pid)]
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proctree.signal_all(members, signal.SIGKILL)
        proctree.kill_session(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - an unkillable process (D state)
            pass
        if self.cgroup is not None:
            self.cgroup.close()
        self.members.close()
        self.chan.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
