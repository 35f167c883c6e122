"""Host-wide: who may use a device when, across processes (editor windows each with an evaluator, a headless sweep,
a local model offloaded to the same GPU); `gate.DeviceGate` orders one evaluator's candidates. `exclusive()`: a timed
round alone on the device. `turn()`: work that may overlap other turns, not a timer (a local model's forward, a turn
per token: four flock calls uncontended). Writer preference: a waiting `exclusive()` holds the turnstile: turns queue.

flock(2) on files in a folder all users share (`KLSP_LEASE_DIR` or `<tmp>/kernel-lsp-leases`, 1777; files 0666, never
removed). The kernel drops a dead process's locks; the holder record it leaves names a dead pid: ignored. flock locks
belong to an open file description: each `exclusive()` opens its own, so two threads (two Evaluators in one language
server) exclude each other as two processes do. In one thread, `turn()`/`exclusive()` in `exclusive()` and `turn()` in
`turn()` pass through; `exclusive()` in `turn()` raises. Never fails its caller: no usable folder, no lease (`reason`).
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass

from .gate import Cancelled

_EX, _SH, _NB, _UN = fcntl.LOCK_EX, fcntl.LOCK_SH, fcntl.LOCK_NB, fcntl.LOCK_UN
_forks = [0]  # bumped in a forked child: the descriptors it inherited share its parent's locks
os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))


WANT_FRESH_S = 5.0  # a want not rewritten for this long is stale (its process stopped waiting without saying so)
ADMIT_LOCK_S = 10.0  # how long an admission waits for another process's decision before it decides without the lock


class LeaseTimeout(TimeoutError):
    def __init__(self, holders: list[str]) -> None:
        super().__init__("device lease not granted in time" + (f"; held by {', '.join(holders)}" if holders else ""))
        self.holders = holders


@dataclass(frozen=True)
class Want:
    """Another process's wait for device memory, as its file on the board says."""
    pid: int
    need: int
    since: float  # when its wait began (time.time()); a file without it: when it was last written


@dataclass(frozen=True)
class Held:
    waited_s: float
    holders: list[str]  # the live exclusive holders seen while we waited


def _open(path: str) -> int:  # a lock file, made 0666 whatever the umask, never through a symlink (world-writable)
    with suppress(FileExistsError):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        os.fchmod(fd, 0o666)
        return fd
    return os.open(path, os.O_RDWR | os.O_NOFOLLOW)  # no O_CREAT: fs.protected_regular refuses it on others' files


def _close(fds: list[int]) -> None:
    for fd in fds:
        fcntl.flock(fd, _UN)  # explicitly: a forked child's copy of the descriptor would keep it locked
        os.close(fd)


def _try(fd: int, op: int) -> bool:  # (not contextlib.suppress: on the turn's fast path it costs more than flock)
    try:
        fcntl.flock(fd, op | _NB)
        return True
    except BlockingIOError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except PermissionError:
        return True  # another user's process: alive
    except (ProcessLookupError, OverflowError):
        return False


def _live(room: int) -> str:  # the holder record in the room file if complete and its process alive, else ""
    m = re.fullmatch(r"(.*\bpid (\d+))\n\0*", os.pread(room, 256, 0).decode(errors="replace"), re.S)
    return m.group(1) if m and _alive(int(m.group(2))) else ""


def _wait(fd: int, op: int, cancel: threading.Event | None, deadline: float | None = None,
          seen: list[str] | None = None, room: int = -1) -> None:
    delay = 0.002 / 1.5  # 2 ms growing to 20 ms
    while not _try(fd, op):
        if seen is not None and (rec := _live(room)) and rec not in seen:
            seen.append(rec)
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        if deadline is not None and time.monotonic() >= deadline:
            raise LeaseTimeout(list(seen or []))
        time.sleep(delay := min(delay * 1.5, 0.02))


class _Mine:  # a thread's descriptors and its turn (what `turn()` returns); its depth in turns and exclusive holds
    def __init__(self, fds: list[int]) -> None:  # no descriptors (no lease): as if this thread held it, all passes
        (self.t, self.r), self.fds, self.fork, self.depth, self.ex = fds or (-1, -1), fds, _forks[0], 0, int(not fds)
        self.cancel: threading.Event | None = None

    def __enter__(self) -> None:
        if self.depth or self.ex:
            self.depth += 1
            return
        cancel, self.cancel = self.cancel, None
        try:
            _wait(self.t, _EX, cancel)
            _wait(self.r, _SH, cancel)
        finally:
            fcntl.flock(self.t, _UN)
        self.depth = 1

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1
        if not self.depth and not self.ex:
            fcntl.flock(self.r, _UN)

    def __del__(self, close: Callable[[int], None] = os.close) -> None:  # (os may be gone at interpreter exit)
        for fd in self.fds:
            close(fd)  # no unlock: in a forked child these are copies, and the parent's locks stand


class DeviceLease:
    def __init__(self, key: str, folder: str | None = None) -> None:
        self.key, self.reason, self._tls = key, "", threading.local()  # reason: why it is a no-op ("" if none)
        self.folder = folder or os.environ.get("KLSP_LEASE_DIR") or f"{tempfile.gettempdir()}/kernel-lsp-leases"
        self._base = os.path.join(self.folder, re.sub(r"[^A-Za-z0-9._-]", "_", key)[:120])
        try:
            with suppress(FileExistsError):
                os.makedirs(self.folder)
                os.chmod(self.folder, 0o1777)  # like /tmp (the umask would narrow it)
            _try(os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY), _SH)  # kept: systemd-tmpfiles spares the folder
            if (st := self._mine()).fds and _try(st.r, _SH):  # flock works here (not on every NFS)
                fcntl.flock(st.r, _UN)
        except OSError as e:
            self.reason, self._tls.st = f"no device lease across processes ({self.folder}): {e}", None

    def _files(self) -> list[int]:
        fds: list[int] = []
        try:
            for s in [] if self.reason else [".turnstile", ".room"]:
                fds.append(_open(self._base + s))
        except OSError as e:
            _close(fds)
            self.reason, fds = f"no device lease across processes ({self.folder}): {e}", []
        return fds

    def _mine(self) -> _Mine:
        st: _Mine | None = getattr(self._tls, "st", None)
        if st is None or st.fork != _forks[0]:
            st = self._tls.st = _Mine(self._files())
        return st

    @contextmanager
    def exclusive(self, cancel: threading.Event | None = None, timeout: float | None = None,
                  who: str = "") -> Iterator[Held]:
        """The device alone on this host (a timed round). Raises Cancelled, or LeaseTimeout naming the holders."""
        st = self._mine()
        if st.depth and not st.ex:
            raise RuntimeError("exclusive() inside this thread's own turn() would wait for itself")
        fds = [] if st.ex else self._files()  # none: no lease, or this thread holds it
        t0, inside, deadline = time.monotonic(), False, None if timeout is None else time.monotonic() + timeout
        seen: list[str] = []
        st.ex += 1
        try:
            if fds:
                _wait(fds[0], _EX, cancel, deadline, seen, fds[1])  # the turnstile: new turns queue behind us
                _wait(fds[1], _EX, cancel, deadline, seen, fds[1])  # the room: turns in flight drain
                fcntl.flock(fds[0], _UN)
                inside = True
                with suppress(OSError):  # padded to 256 bytes: one write replaces the record (its end kept)
                    os.pwrite(fds[1], f"{who} pid {os.getpid()}\n".lstrip().encode()[-255:].ljust(256, b"\0"), 0)
            yield Held(time.monotonic() - t0 if fds else 0.0, seen)
        finally:
            if inside:  # before unlocking: never over the next holder's record
                with suppress(OSError):
                    os.pwrite(fds[1], bytes(256), 0)
            st.ex -= 1
            _close(fds)

    def turn(self, cancel: threading.Event | None = None) -> AbstractContextManager[None]:
        """Shared use: overlaps other turns, never an exclusive holder. Raises Cancelled while waiting."""
        (st := self._mine()).cancel = cancel
        return st

    def busy(self) -> bool:
        """Someone holds or waits for the exclusive side (a look at the turnstile, then the room: waits for nothing)."""
        fds = self._files()
        try:
            return any(not _try(fd, _SH) or fcntl.flock(fd, _UN) for fd in fds)
        finally:
            _close(fds)

    # -- memory wanted: a process that waits for device memory other processes hold says so here, and every
    # evaluator on the device lets its idle referees go for it (`memory.MemoryLedger.watch`): memory kept for later
    # by one process is never what another waits for. One file per waiting process (`<key>.want-<pid>`: what it
    # waits for in bytes, and when its wait began, wall-clock seconds), rewritten while it waits; a dead process's
    # or a stale one is ignored. When the waits began orders them: of two processes that each hold what the other
    # waits for (each a referee kept for the candidate it admits), the one that began later gives way.
    def want(self, need: int, since: float | None = None) -> None:
        """This process waits for `need` bytes of device memory that other processes hold (0: it no longer does),
        since `since` (time.time(); now when not given)."""
        self._post(".want-", f"{int(need)} {time.time() if since is None else since:.3f}" if need > 0 else "")

    def _post(self, kind: str, text: str) -> None:
        """This process's file of `kind` on the board says `text` ("": removed). One write of a fixed width: a
        reader never finds it empty (no truncation before it)."""
        if self.reason:
            return
        path = f"{self._base}{kind}{os.getpid()}"
        if not text:
            with suppress(OSError):
                os.unlink(path)
            return
        with suppress(OSError):
            fd = _open(path)
            try:
                os.pwrite(fd, f"{text:<63}\n".encode(), 0)
            finally:
                os.close(fd)

    def wants(self, fresh_s: float = WANT_FRESH_S) -> list[Want]:
        """What other live processes said they wait for within the last `fresh_s` seconds."""
        out = []
        for pid, text, mtime in self._posts(".want-", fresh_s):
            if m := re.fullmatch(r"\s*(\d+)(?:\s+(\d+(?:\.\d*)?))?\s*", text):
                out.append(Want(pid, int(m.group(1)), float(m.group(2)) if m.group(2) else mtime))
        return out

    def _posts(self, kind: str, fresh_s: float) -> list[tuple[int, str, float]]:
        """Other live processes' files of `kind` on the board written within the last `fresh_s` seconds: (pid,
        text, when it was written)."""
        if self.reason:
            return []
        prefix, out, now = os.path.basename(self._base) + kind, [], time.time()
        try:
            names = [n for n in os.listdir(self.folder) if n.startswith(prefix)]
        except OSError:
            return []
        for n in names:
            pid = n[len(prefix):]
            if not pid.isdigit() or int(pid) == os.getpid() or not _alive(int(pid)):
                continue
            try:
                fd = os.open(os.path.join(self.folder, n), os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    mtime = os.fstat(fd).st_mtime
                    if now - mtime > fresh_s:
                        continue
                    text = os.pread(fd, 64, 0).decode(errors="replace")
                finally:
                    os.close(fd)
            except OSError:
                continue
            out.append((int(pid), text.rstrip("\0"), mtime))
        return out

    # -- memory promised: what a process has admitted and its evaluations have not yet allocated (`<key>.held-<pid>`,
    # in bytes, rewritten while it holds any: stale after WANT_FRESH_S). A process admits a candidate only when the
    # device's free memory, less what every process promised and has yet to take, covers its need, one decision at a
    # time on the host (`admitting`): two processes that each see the same free memory never both take it.
    def reserve(self, pending: int) -> None:
        """This process's admitted evaluations have yet to take `pending` bytes of the device (0: none)."""
        self._post(".held-", str(int(pending)) if pending > 0 else "")

    def reserved_by_others(self, fresh_s: float = WANT_FRESH_S) -> int:
        """Bytes other live processes admitted and have yet to take (said within the last `fresh_s` seconds)."""
        return sum(int(t) for _, t, _ in self._posts(".held-", fresh_s) if t.strip().isdigit())

    @contextmanager
    def admitting(self, timeout: float = ADMIT_LOCK_S) -> Iterator[None]:
        """One admission decision at a time on this host: free memory read, others' promises read, and this one's
        posted, with no other process deciding in between. Past `timeout` (a process stuck inside), it goes on
        without: the board is best effort, never what stops an evaluation."""
        fds = []
        if not self.reason:
            with suppress(OSError):
                fds.append(_open(self._base + ".admit"))
        try:
            if fds:
                try:
                    _wait(fds[0], _EX, None, time.monotonic() + timeout)
                except LeaseTimeout:
                    _close(fds)
                    fds = []
            yield
        finally:
            _close(fds)

    def wanted_by_others(self, fresh_s: float = WANT_FRESH_S) -> int:
        """Bytes of device memory other live processes said they wait for within the last `fresh_s` seconds."""
        return sum(w.need for w in self.wants(fresh_s))

    def wanted_before(self, since: float) -> int:
        """Bytes other live processes wait for whose waits began before one that began at `since` (the same
        moment: the lower pid first)."""
        me, since = os.getpid(), float(f"{since:.3f}")  # to the millisecond, as the board has it: one order for all
        return sum(w.need for w in self.wants() if (w.since, w.pid) < (since, me))

    def holders(self) -> list[str]:
        fds = self._files()
        try:
            return [rec] if fds and (rec := _live(fds[1])) else []
        finally:
            _close(fds)


@functools.cache
def for_device(key: str, folder: str | None = None) -> DeviceLease:
    """This process's lease for a device (one object per key and folder: each thread keeps its descriptors)."""
    return DeviceLease(key, folder)
