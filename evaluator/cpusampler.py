"""Parent side (torch-free): where a sandbox's threads spent their CPU time, sampled by the kernel for the evaluator.

The runner's profile says how long the candidate's own functions ran; the runner is the candidate, so that is a
claim (a label it can read, a profile handler it can replace). This module measures the same thing from outside:
`perf_event_open` on every thread of every process of the sandbox, opened by the evaluator while the sandbox is
frozen, samples each thread's instruction pointer every `period_ns` of its CPU time (the software task clock: no
hardware counters, user space only, allowed at `perf_event_paranoid` 2 for the evaluator's own processes). The
candidate cannot see, stop or write those buffers: they are the evaluator's file descriptors. The events are
inherited: a thread or process any sampled thread creates during the call (a pool's worker, a helper cloned beside
the sandbox's init) is sampled too. The kernel maps an inherited event's buffer only per CPU, so each thread gets
one event per CPU, and every event of a CPU writes into that CPU's one buffer; an inherited counting event per
thread gives their whole CPU time. CPU time the sampling still did not see (samples the kernel dropped or held
back, processes of the sandbox outside the sampled threads' descendants) is reported as `unsampled_ms`; time in the
kernel apart (`kernel_ms`: no code of the candidate's runs there).

Each sample's address is placed in the mapping it falls in (`/proc/<pid>/maps`, read by the evaluator after the
call, while the sandbox is frozen) and classed. A process gone by then (a child forked for the call that exited before
it returned) cannot be placed: its samples are counted apart (`gone`), never as its own code, and the kernel check
holds them against its own code as it holds library time. The classes:

- `own`: the executable code of a library the evaluator's builder compiled from the candidate's sources (matched by
  device and inode, not by name: a file the candidate writes under the same name is not it);
- `runtime`: the C and C++ runtime (libm, libc, libstdc++, libgomp): counted with its own code where the same
  thread's nearest sample outside the runtime is in its own code (its loop's `expf`, its OpenMP team), as an upper
  bound; the interpreter's and numpy's calls into libc are not;
- `foreign`: a third-party package's code other than PyTorch's (numpy and the BLAS it bundles, scipy: a file under
  `site-packages` outside `torch/`): library work no PyTorch operator records, so no profiler event shows it;
- `other`: everything else — PyTorch's libraries, the interpreter, anonymous (JIT) memory.

PyTorch's profiler records the operators of the thread that runs the call (its callbacks are that thread's), not
those of a thread the candidate starts itself. Samples in PyTorch's libraries (and anonymous, JIT-compiled code) on
any other thread than the calling one are counted apart (`side_library`): the evaluator holds them against what the
profiled operators' own worker threads can have done.

Time is counted in samples' bins of one period of wall time (a bin is its own code's when any thread was sampled
there in its own code), so that one thread in its own code and sixteen in a library operator compare as wall time,
as the profile's ranges do. A thread off the CPU between two of its samples (asleep, blocked, descheduled by other
processes' load) leaves bins where no thread ran: they are its own code's when the thread came back in its own code
(a loop descheduled halfway, a kernel that waits inside itself), and nobody's otherwise — a wait the sampling cannot
place is never credited to the candidate. Nothing here imports torch.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import fcntl
import mmap
import os
import struct
import threading
from dataclasses import dataclass, field

_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}.get(os.uname().machine, -1)
_PERF_TYPE_SOFTWARE = 1
_PERF_COUNT_SW_TASK_CLOCK = 1
_SAMPLE_IP, _SAMPLE_TID, _SAMPLE_TIME = 1 << 0, 1 << 1, 1 << 2
_FLAG_INHERIT, _FLAG_EXCLUDE_KERNEL, _FLAG_EXCLUDE_HV = 1 << 1, 1 << 5, 1 << 6
_RECORD_LOST, _RECORD_THROTTLE, _RECORD_UNTHROTTLE, _RECORD_SAMPLE = 2, 5, 6, 9
_IOC_DISABLE = 0x2401  # _IO('$', 1)
_IOC_SET_OUTPUT = 0x2405  # _IO('$', 5)
_PAGE = mmap.PAGESIZE
DATA_PAGES = 64  # per thread: 256 KiB, 8,192 samples of 32 bytes ...
DRAIN_S = 0.005  # ... emptied this often while the call runs
RUNTIME_LIBS = ("libm.so", "libm-", "libc.so", "libc-", "libgcc_s", "libstdc++", "libgomp", "libpthread", "ld-linux",
                "libmvec", "libdl.so", "librt.so")
_PACKAGES = ("/site-packages/", "/dist-packages/")
GONE = "(a process that ended)"
HOST_PACKAGES = ("torch", "torch.libs", "functorch", "torchgen", "nvidia", "triton")  # PyTorch's own and its device


class _Attr(ctypes.Structure):
    """struct perf_event_attr, its first 64 bytes (PERF_ATTR_SIZE_VER0)."""

    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("wakeup_events", ctypes.c_uint32),
                ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _open(tid: int, period_ns: int, cpu: int = -1, inherit: bool = False) -> int:
    """An event on thread `tid`, inherited by whatever it creates where `inherit`: sampling every `period_ns` of
    its CPU time on one CPU (a buffer can be mapped only so), or, with `period_ns` 0, counting its CPU time."""
    attr = _Attr(type=_PERF_TYPE_SOFTWARE, size=ctypes.sizeof(_Attr), config=_PERF_COUNT_SW_TASK_CLOCK,
                 sample_period=period_ns, sample_type=_SAMPLE_IP | _SAMPLE_TID | _SAMPLE_TIME if period_ns else 0,
                 flags=_FLAG_EXCLUDE_KERNEL | _FLAG_EXCLUDE_HV | (_FLAG_INHERIT if inherit else 0))
    fd = _libc.syscall(_NR_PERF_EVENT_OPEN, ctypes.byref(attr), ctypes.c_int(tid), ctypes.c_int(cpu),
                       ctypes.c_int(-1), ctypes.c_ulong(0))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return int(fd)


def count_cpu(tid: int) -> int:
    """A counter of thread `tid`'s CPU time (ns) and that of every thread and process it creates from now on, those
    that ended included (however they ended: reaped or not, whoever their parent); read it with `read_count`."""
    return _open(tid, 0, inherit=True)


def read_count(fd: int) -> int:
    return int(struct.unpack("<Q", os.read(fd, 8))[0])


@dataclass
class Tally:
    """Samples of one sampled call, classed (see the module's docstring)."""

    period_ns: int = 0
    samples: int = 0
    lost: int = 0
    own: int = 0
    runtime: int = 0
    foreign: int = 0  # samples in a third-party package's code other than PyTorch's (numpy, its BLAS)
    side_library: int = 0  # samples in PyTorch's libraries on threads other than the calling one
    calling_library: int | None = None  # ... on the calling thread (None: the calling thread was not named)
    gone: int = 0  # samples in processes that ended before their mappings could be read (what ran there: unknown)
    bins: int = 0  # bins of one period with any sample
    own_bins: int = 0  # ... with a sample in its own code or the runtime
    sampled_ms: float = 0.0  # CPU time of the sampled threads (and what they created) during the call
    unsampled_ms: float = 0.0  # CPU time the sampler did not see: samples dropped or held back, processes outside
    kernel_ms: float = 0.0  # CPU time the sampled threads spent in the kernel (system calls, page faults)
    waited_ms: float = 0.0  # wall time, within `own_ms`, of threads off the CPU that came back in their own code
    idle_ms: float = 0.0  # wall time of threads off the CPU that came back elsewhere (counted for nobody)
    where: dict[str, int] = field(default_factory=dict)  # mapping basename -> samples (the top ones)
    foreign_names: set[str] = field(default_factory=set)  # the basenames among them that are `foreign`

    @property
    def own_ms(self) -> float:
        """Wall time its own code (and the runtime it calls) ran on at least one thread, by the sampler."""
        return self.own_bins * self.period_ns / 1e6

    @property
    def foreign_ms(self) -> float:
        """CPU time in third-party packages' code other than PyTorch's, by the sampler (all threads together)."""
        return self.foreign * self.period_ns / 1e6

    @property
    def side_library_ms(self) -> float:
        """CPU time in PyTorch's libraries on threads other than the calling one, by the sampler."""
        return self.side_library * self.period_ns / 1e6

    @property
    def calling_library_ms(self) -> float | None:
        """CPU time in PyTorch's libraries on the calling thread (its profiled operators' own), by the sampler."""
        return None if self.calling_library is None else self.calling_library * self.period_ns / 1e6

    @property
    def gone_ms(self) -> float:
        """CPU time in processes that ended before the evaluator could read their mappings, by the sampler."""
        return self.gone * self.period_ns / 1e6

    def foreign_where(self) -> dict[str, int]:
        """Those samples by file (the top ones)."""
        return {n: c for n, c in self.where.items() if n in self.foreign_names}

    def own_ms_upper(self) -> float:
        """A generous upper bound of `own_ms` (counting noise of a few samples)."""
        k = self.own_bins
        return (k + 2.0 + 2.0 * (k + 1.0) ** 0.5) * self.period_ns / 1e6

    def describe(self) -> str:
        top = ", ".join(f"{n} {c}" for n, c in sorted(self.where.items(), key=lambda kv: -kv[1])[:4])
        return (f"{self.samples} samples every {self.period_ns / 1e3:.4g} µs of CPU time: {self.own} in its own "
                f"binaries, {self.runtime} in the C runtime they call, {self.samples - self.own - self.runtime} "
                f"elsewhere"
                + (f" ({top})" if top else "")
                + (f", {self.foreign} of them in other packages than PyTorch's" if self.foreign else "")
                + (f", {self.gone} in processes that ended during the call" if self.gone else "")
                + (f", {self.lost} lost" if self.lost else "")
                + (f"; {self.waited_ms:.3g} ms off the CPU inside its own code" if self.waited_ms else "")
                + (f"; {self.idle_ms:.3g} ms off the CPU outside it" if self.idle_ms else "")
                + (f"; {self.kernel_ms:.3g} ms in the kernel" if self.kernel_ms >= 0.1 else "")
                + (f"; {self.unsampled_ms:.3g} ms of CPU time it did not see" if self.unsampled_ms else ""))


def unavailable() -> str:
    """"" when this machine lets the evaluator sample its own child processes; else why not."""
    if _NR_PERF_EVENT_OPEN < 0:
        return f"perf_event_open is not known on {os.uname().machine}"
    try:
        fd = _open(os.getpid(), 1_000_000, _cpus()[0], inherit=True)
    except OSError as e:
        return f"perf_event_open: {e.strerror}" + (
            " (perf_event_paranoid or a seccomp filter forbids it)" if e.errno in (errno.EACCES, errno.EPERM) else "")
    os.close(fd)
    return ""


class Sampler:
    """The sampling of one call: `open` while the sandbox is frozen, `start`, let it run, `close` once it is
    frozen again, then `tally`. Usable once."""

    def __init__(self, pids: list[int], period_ns: int) -> None:
        self.pids = list(pids)
        self.period_ns = max(10_000, int(period_ns))
        self._rings: list[tuple[int, mmap.mmap]] = []  # one per CPU: (its first event, its buffer)
        self._events: dict[int, list[int]] = {}  # ring's fd -> every event writing into it (itself first)
        self._records: list[tuple[int, int, int, int]] = []  # (pid, tid, ip, time)
        self.lost = 0
        self.cpu_ns = 0  # the sampled threads' CPU time in user space (with what they created meanwhile), by samples
        self.counted_ns = 0  # ... their whole CPU time (user and kernel), counted
        self.throttled_ns = 0  # time the kernel held sampling back (too many samples a second)
        self._counters: list[int] = []  # per thread: its CPU time and its descendants', counted
        self._throttled_at: dict[int, int] = {}  # ring -> when the kernel began to hold its sampling back
        self._before: dict[int, list[tuple[int, int, str, str]]] = {}  # executable mappings when sampling began
        self._drainer: threading.Thread | None = None
        self._stop = threading.Event()
        self.error = ""

    def open(self) -> bool:
        """Events on every thread of every process, one per CPU each, inherited. False (and `error`) when any
        thread could not be sampled: a partial sampling is no sampling."""
        cpus = _cpus()
        try:
            threads: list[int] = []
            for pid in self.pids:
                self._before[pid] = _maps(pid, set())
                try:
                    threads += [int(t) for t in os.listdir(f"/proc/{pid}/task")]
                except FileNotFoundError:
                    continue
            _enough_files((len(threads) + 1) * len(cpus) + len(threads) + 64)
            for tid in threads:
                try:
                    self._counters.append(_open(tid, 0, inherit=True))
                except OSError as e:
                    if e.errno != errno.ESRCH:
                        raise
            for cpu in cpus:
                ring_fd = -1
                for tid in threads:
                    try:
                        fd = _open(tid, self.period_ns, cpu, inherit=True)
                    except OSError as e:
                        if e.errno == errno.ESRCH:  # a thread that ended meanwhile
                            continue
                        raise
                    if ring_fd < 0:
                        try:
                            ring = mmap.mmap(fd, (1 + DATA_PAGES) * _PAGE, mmap.MAP_SHARED,
                                             mmap.PROT_READ | mmap.PROT_WRITE)
                        except OSError:
                            os.close(fd)
                            raise
                        ring_fd = fd
                        self._rings.append((fd, ring))
                        self._events[fd] = [fd]
                        continue
                    self._events[ring_fd].append(fd)
                    fcntl.ioctl(fd, _IOC_SET_OUTPUT, ring_fd)  # this CPU's samples of it go to the CPU's buffer
        except OSError as e:
            self.error = f"perf_event_open: {e.strerror}"
            self.close()
            return False
        return True

    def start(self) -> None:
        """Empty the buffers every DRAIN_S while the call runs (a full buffer drops samples)."""
        if self._rings and self._drainer is None:
            self._drainer = threading.Thread(target=self._drain_loop, name="klsp-cpusampler", daemon=True)
            self._drainer.start()

    def _drain_loop(self) -> None:
        while not self._stop.wait(DRAIN_S):
            for _fd, ring in list(self._rings):
                self._read(ring)

    def close(self) -> None:
        """Stop sampling and read every buffer. Idempotent."""
        self._stop.set()
        if self._drainer is not None:
            self._drainer.join()
            self._drainer = None
        for fd, ring in self._rings:
            for ev in reversed(self._events.pop(fd, [fd])):  # the buffer's own event last
                try:
                    fcntl.ioctl(ev, _IOC_DISABLE, 0)  # and the events inherited from it
                except OSError:
                    pass
                if ev != fd:
                    os.close(ev)
            self._read(ring)
            ring.close()
            os.close(fd)
        for evs in self._events.values():  # a CPU whose buffer was never made (a failed open)
            for ev in evs:
                os.close(ev)
        for fd in self._counters:
            try:
                self.counted_ns += struct.unpack("<Q", os.read(fd, 8))[0]  # with its descendants', live or gone
            except (OSError, struct.error):
                pass
            os.close(fd)
        self._counters = []
        self._events = {}
        self._rings = []
        # each sample is one period of a thread's CPU time (the per-CPU sampling events' own counts are no measure:
        # measured, they summed to seconds for a call of tens of milliseconds); the counting events give the whole
        # CPU time (`tally`)
        self.cpu_ns = len(self._records) * self.period_ns

    def _read(self, ring: mmap.mmap) -> None:
        head = struct.unpack_from("<Q", ring, 1024)[0]  # data_head (perf_event_mmap_page)
        tail = struct.unpack_from("<Q", ring, 1032)[0]
        if head <= tail:
            return
        size = DATA_PAGES * _PAGE
        start, n = tail % size, min(head - tail, size)
        data = ring[_PAGE + start:_PAGE + min(size, start + n)]
        if start + n > size:
            data += ring[_PAGE:_PAGE + start + n - size]
        pos = 0
        while pos + 8 <= n:
            rtype, _misc, rsize = struct.unpack_from("<IHH", data, pos)
            if rsize < 8 or pos + rsize > n:
                break
            if rtype == _RECORD_SAMPLE and rsize >= 32:
                ip, pid, tid, t = struct.unpack_from("<QIIQ", data, pos + 8)
                self._records.append((pid, tid, ip, t))
            elif rtype == _RECORD_LOST and rsize >= 24:
                self.lost += struct.unpack_from("<QQ", data, pos + 8)[1]
            elif rtype in (_RECORD_THROTTLE, _RECORD_UNTHROTTLE) and rsize >= 16:
                when = struct.unpack_from("<Q", data, pos + 8)[0]
                if rtype == _RECORD_THROTTLE:
                    self._throttled_at.setdefault(id(ring), when)
                elif id(ring) in self._throttled_at:
                    self.throttled_ns += max(0, when - self._throttled_at.pop(id(ring)))
            pos += rsize
        struct.pack_into("<Q", ring, 1032, tail + pos)  # data_tail: the kernel may write there again

    def tally(self, own_files: set[tuple[int, int]], sandbox_cpu_ns: int | None = None,
              calling_tid: int | None = None) -> Tally:
        """Class every sample by the mapping its address falls in (`own_files`: (st_dev, st_ino) of the libraries
        the evaluator built). `sandbox_cpu_ns`: the whole sandbox's CPU time over the call, by its own accounting;
        `calling_tid`: the thread that runs the call (its samples in PyTorch's libraries are its operators').
        Call while the sampled processes still exist (frozen)."""
        maps: dict[int, list[tuple[int, int, str, str]]] = {}
        # not seen: samples the kernel dropped or held back, and the CPU time of any process of the sandbox outside
        # the sampled threads' descendants (the sandbox's own accounting less what was counted); time in the kernel
        # is not (no code of the candidate's runs there)
        outside = max(0, sandbox_cpu_ns - self.counted_ns) if sandbox_cpu_ns is not None else 0
        t = Tally(period_ns=self.period_ns, samples=len(self._records), lost=self.lost, sampled_ms=self.cpu_ns / 1e6,
                  unsampled_ms=(self.lost * self.period_ns + self.throttled_ns + outside) / 1e6,
                  kernel_ms=max(0, self.counted_ns - self.cpu_ns - self.lost * self.period_ns
                                - self.throttled_ns) / 1e6)
        classed: list[tuple[int, int, str]] = []  # (tid, time, class)
        if calling_tid is not None:
            t.calling_library = 0
        # a process made during the call (a fork of one sampled: the same mappings) is held to every sampled
        # process's mappings from before the call
        anyone = {(lo, hi, n) for m in self._before.values() for lo, hi, _c, n in m}
        for pid, tid, ip, when in self._records:
            if pid not in maps:  # its own code only where it was mapped the same way before and after the call:
                before = ({(lo, hi, n) for lo, hi, _c, n in self._before[pid]} if pid in self._before  # code mapped
                          else anyone)  # over another
                maps[pid] = [(lo, hi, c if c != "own" or (lo, hi, n) in before else "other", n)  # library's
                             for lo, hi, c, n in _maps(pid, own_files)]  # addresses meanwhile is not
            cls, name = "other", "?"
            if not maps[pid]:  # ended (or a zombie: no mappings left): what ran there cannot be told
                cls, name = "gone", GONE
                t.gone += 1
            for lo, hi, c, n in maps[pid]:
                if lo <= ip < hi:
                    cls, name = c, n
                    break
            t.where[name] = t.where.get(name, 0) + 1
            t.own += cls == "own"
            if cls == "foreign":
                t.foreign += 1
                t.foreign_names.add(name)
            elif cls == "other" and calling_tid is not None and _torch_code(name):
                if tid != calling_tid:
                    t.side_library += 1
                else:
                    t.calling_library = (t.calling_library or 0) + 1
            classed.append((tid, when, cls))
        own_times = [w for _tid, w, c in classed if c == "own"]
        all_times = [w for _tid, w, _c in classed]
        # the C runtime counts with its own code where the same thread's nearest sample outside the runtime, before
        # or after, is in its own code (expf in its loop); numpy's and the interpreter's memcpy and malloc are not
        by_thread: dict[int, list[tuple[int, str]]] = {}
        own_at: dict[int, set[int]] = {}  # per thread: times of its runtime samples that count as its own code
        for tid, w, c in classed:
            by_thread.setdefault(tid, []).append((w, c))
        for tid, seq in by_thread.items():
            seq.sort()
            outside = [i for i, (_w, c) in enumerate(seq) if c != "runtime"]
            for i, (w, c) in enumerate(seq):
                if c != "runtime":
                    continue
                j = bisect.bisect_left(outside, i)
                near = [seq[outside[k]][1] for k in (j - 1, j) if 0 <= k < len(outside)]
                if "own" in near:
                    t.runtime += 1
                    own_times.append(w)
                    own_at.setdefault(tid, set()).add(w)
        p = self.period_ns
        own_set = {w // p for w in own_times}
        busy = {w // p for w in all_times}  # bins where some thread ran
        # A thread off the CPU (asleep, blocked, or descheduled on a loaded machine) between two of its samples
        # leaves bins no thread ran in. Where it came back in its own code, the wait was its own code's (a loop
        # descheduled halfway, a kernel that waits inside itself): those bins count with its own code, as the
        # profile's wall-time ranges count them. Where it came back elsewhere, they count for nobody.
        resumed_own: set[int] = set()
        idle: set[int] = set()
        for tid, seq in by_thread.items():
            for (w1, _c1), (w2, c2) in zip(seq, seq[1:]):
                if w2 - w1 <= 2 * p:
                    continue
                gap = set(range(w1 // p + 1, w2 // p)) - busy
                if c2 == "own" or (c2 == "runtime" and w2 in own_at.get(tid, ())):
                    resumed_own |= gap
                else:
                    idle |= gap
        idle -= resumed_own
        t.bins = len(busy)
        t.own_bins = len(own_set | resumed_own)
        t.waited_ms = len(resumed_own) * p / 1e6
        t.idle_ms = len(idle) * p / 1e6
        return t


def _cpus() -> list[int]:
    """The CPUs a sampled thread may run on: every online one (a thread may move itself to any)."""
    try:
        text = open("/sys/devices/system/cpu/online").read().strip()
        out: list[int] = []
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out += list(range(int(lo), int(hi or lo) + 1))
        if out:
            return out
    except (OSError, ValueError):
        pass
    return list(range(os.cpu_count() or 1))


def _enough_files(n: int) -> None:
    """Raise this process's open-file limit to `n` where it is lower (up to the hard limit): one event per thread
    and CPU."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        top = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if top > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


def _maps(pid: int, own_files: set[tuple[int, int]]) -> list[tuple[int, int, str, str]]:
    """Executable mappings of `pid`: (start, end, class, file's base name)."""
    out = []
    try:
        lines = open(f"/proc/{pid}/maps").read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 5 or "x" not in parts[1]:
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        major, minor = (int(x, 16) for x in parts[3].split(":"))
        inode = int(parts[4])
        path = parts[5].strip() if len(parts) > 5 else ""
        base = os.path.basename(path) or "[anonymous]"
        if inode and (os.makedev(major, minor), inode) in own_files:
            cls = "own"
        elif inode and any(base.startswith(r) for r in RUNTIME_LIBS):
            cls = "runtime"
        elif inode and _foreign(path):
            cls = "foreign"
        else:
            cls = "other"
        out.append((lo, hi, cls, base))
    return out


def _torch_code(name: str) -> bool:
    """PyTorch's libraries' code (ATen's kernels, its BLAS, oneDNN's JIT-compiled kernels in anonymous memory)."""
    return name.startswith(("libtorch", "libc10")) or name == "[anonymous]"


def _foreign(path: str) -> bool:
    """A file of a third-party package other than PyTorch's (site-packages/numpy/..., site-packages/numpy.libs/...)."""
    for marker in _PACKAGES:
        i = path.find(marker)
        if i >= 0:
            top = path[i + len(marker):].split("/", 1)[0]
            return bool(top) and top not in HOST_PACKAGES
    return False


def file_ids(paths: list[str]) -> set[tuple[int, int]]:
    """(st_dev, st_ino) of each existing file."""
    out = set()
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out
