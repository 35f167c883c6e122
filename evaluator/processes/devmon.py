"""Whose work is on the GPU: the device as NVML sees it, process by process.

The outside clock (`stages/device/`) sees only that a request was slow or that the device did not go idle; this module
says why, in words a verdict can carry: the candidate's processes kept the device busy (its own doing), or another
process on the machine did (ours to report, never the candidate's fault), or nobody can tell. It reads NVML
(`libnvidia-ml.so.1`, through ctypes: no torch, no new dependency) from the evaluator's trusted process.

NVML names processes by pid as the driver records them, i.e. in the host's PID namespace. Inside a container
without it those pids are not ours to read, so `attribute` checks the view first: when none of our own processes
that hold a context on the device appear among NVML's, per-process attribution is off (`known` False, with why).
Candidate pids must be as this process sees them (a sandboxed worker's outer pid, not its pid inside bwrap).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

_SUCCESS, _NOT_FOUND, _INSUFFICIENT_SIZE = 0, 6, 7
_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE in usedGpuMemory: reported as -1 (unknown)


class MonitorError(RuntimeError):
    """An NVML query failed (not supported on this device, e.g. per-process samples under MIG or vGPU; GPU lost)."""


def _struct(name: str, *fields: tuple[str, Any]) -> Any:
    return type(name, (ctypes.Structure,), {"_fields_": list(fields)})


_U, _ULL = ctypes.c_uint, ctypes.c_ulonglong
_ProcV1 = _struct("nvmlProcessInfo_v1_t", ("pid", _U), ("usedGpuMemory", _ULL))  # the unsuffixed functions
_ProcV2 = _struct("nvmlProcessInfo_t", ("pid", _U), ("usedGpuMemory", _ULL), ("gpuInstanceId", _U),
                  ("computeInstanceId", _U))  # == nvmlProcessInfo_v2_t: the _v2 and _v3 functions
_UtilSample = _struct("nvmlProcessUtilizationSample_t", ("pid", _U), ("timeStamp", _ULL), ("smUtil", _U),
                      ("memUtil", _U), ("encUtil", _U), ("decUtil", _U))
_Utilization = _struct("nvmlUtilization_t", ("gpu", _U), ("memory", _U))
_Memory = _struct("nvmlMemory_t", ("total", _ULL), ("free", _ULL), ("used", _ULL))


class DeviceMonitor:
    """One device's processes and load. This base is also the unavailable monitor: it knows nothing, says why in
    `reason`, and every query answers empty (`{}`) or None."""

    available: bool = False

    def __init__(self, reason: str = "no device monitor") -> None:
        self.reason = reason

    def processes(self) -> dict[int, int]:
        """pid -> device memory in bytes (-1: NVML cannot tell) of every process with a compute or graphics
        context on the device. Raises MonitorError when NVML fails."""
        return {}

    def busy(self, since_s: float) -> dict[int, float]:
        """pid -> the highest SM utilisation (%) in NVML's per-process samples taken after `since_s` (wall clock,
        seconds since the epoch); a pid with only 0 % samples is listed at 0. NVML keeps a short history (seconds),
        so ask soon after. Raises MonitorError when NVML fails or has no per-process samples on this device."""
        return {}

    def device_busy(self) -> float | None:
        """The device-wide utilisation.gpu (%): the share of the last sample period a kernel ran; None if unknown."""
        return None

    def free_bytes(self) -> tuple[int, int] | None:
        """(free, total) device memory in bytes; None if unknown."""
        return None


_lock = threading.Lock()
_state: tuple[int, Any, str] | None = None  # (pid that initialised, the library or None, why not)


def _err(lib: Any, r: int) -> str:
    s = lib.nvmlErrorString(r)
    return f"NVML error {r} ({s.decode(errors='replace') if s else '?'})"


def _nvml() -> tuple[Any, str]:
    """The initialised library, or None and why; nvmlInit_v2 once per process (again in a forked child). NVML is
    never shut down: the monitor lives as long as the process."""
    global _state
    with _lock:
        if _state is None or _state[0] != os.getpid():
            lib, why = None, "NVML not found (libnvidia-ml.so.1)"
            with contextlib.suppress(OSError):
                lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib is not None:
                lib.nvmlErrorString.restype = ctypes.c_char_p
                init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
                r = init()
                lib, why = (lib, "") if r == _SUCCESS else (None, f"nvmlInit failed: {_err(lib, r)}")
            _state = (os.getpid(), lib, why)
        return _state[1], _state[2]


class NvmlMonitor(DeviceMonitor):
    """The real monitor over one NVML device handle (made by `open_monitor`)."""

    available = True

    def __init__(self, lib: Any, handle: ctypes.c_void_p, name: str) -> None:
        super().__init__("")
        self._lib, self._h, self.name = lib, handle, name

    def _fill(self, call: Callable[[Any, Any], int], struct: type, what: str) -> list[Any]:
        """NVML's two-step array query: ask with room for `cap` entries; NVML_ERROR_INSUFFICIENT_SIZE sets the
        count needed, so grow (with slack for processes that start meanwhile) and ask again."""
        cap = 0
        for _ in range(5):
            arr = (struct * cap)() if cap else None
            n = ctypes.c_uint(cap)
            r = call(arr, ctypes.byref(n))
            if r == _SUCCESS:
                return list(arr[: n.value]) if arr is not None else []
            if r == _NOT_FOUND:  # nvmlDeviceGetProcessUtilization: no samples since the timestamp
                return []
            if r != _INSUFFICIENT_SIZE:
                raise MonitorError(f"{what}: {_err(self._lib, r)}")
            cap = n.value + 8
        raise MonitorError(f"{what}: the list kept growing")

    def processes(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for kind in ("Compute", "Graphics"):
            for suffix, struct in (("_v3", _ProcV2), ("_v2", _ProcV2), ("", _ProcV1)):
                fn = getattr(self._lib, f"nvmlDeviceGet{kind}RunningProcesses{suffix}", None)
                if fn is not None:
                    break
            else:
                continue
            for p in self._fill(lambda arr, n: fn(self._h, n, arr), struct, f"{kind.lower()} processes"):
                mem = -1 if p.usedGpuMemory == _NOT_AVAILABLE else int(p.usedGpuMemory)
                out[int(p.pid)] = max(out.get(int(p.pid), -1), mem)
        return out

    def busy(self, since_s: float) -> dict[int, float]:
        last = ctypes.c_ulonglong(max(0, int(since_s * 1e6)))  # NVML: CPU microseconds since the epoch
        fn = self._lib.nvmlDeviceGetProcessUtilization
        out: dict[int, float] = {}
        for s in self._fill(lambda arr, n: fn(self._h, arr, n, last), _UtilSample, "per-process utilisation"):
            if s.pid and s.timeStamp > last.value:
                out[int(s.pid)] = max(out.get(int(s.pid), 0.0), float(s.smUtil))
        return out

    def device_busy(self) -> float | None:
        u = _Utilization()
        ok = self._lib.nvmlDeviceGetUtilizationRates(self._h, ctypes.byref(u)) == _SUCCESS
        return float(u.gpu) if ok else None

    def free_bytes(self) -> tuple[int, int] | None:
        m = _Memory()
        return (int(m.free), int(m.total)) if self._lib.nvmlDeviceGetMemoryInfo(self._h, ctypes.byref(m)) == 0 else None


def _uuid_forms(uuid: str) -> list[str]:
    """NVML wants "GPU-<uuid>" (or "MIG-<uuid>" for a MIG instance); torch's `props.uuid` prints bare."""
    u = uuid.strip()
    return [u] if u.upper().startswith(("GPU-", "MIG-")) else [f"GPU-{u}", f"MIG-{u}"]


def open_monitor(uuid: str = "", index: int | None = None) -> DeviceMonitor:
    """The device by UUID (preferred: `str(torch.cuda.get_device_properties(i).uuid)`), else by NVML's index
    (PCI bus order, which is CUDA's only under CUDA_DEVICE_ORDER=PCI_BUS_ID without CUDA_VISIBLE_DEVICES; 0 when
    neither is given). Never raises: where NVML is missing or fails, an unavailable monitor says why."""
    try:
        lib, why = _nvml()
        if lib is None:
            return DeviceMonitor(why)
        h = ctypes.c_void_p()
        if uuid:
            for u in _uuid_forms(uuid):
                if lib.nvmlDeviceGetHandleByUUID(u.encode(), ctypes.byref(h)) == _SUCCESS:
                    return NvmlMonitor(lib, h, u)
            return DeviceMonitor(f"no device with UUID {uuid}")
        i = 0 if index is None else index
        r = (getattr(lib, "nvmlDeviceGetHandleByIndex_v2", None) or lib.nvmlDeviceGetHandleByIndex)(
            ctypes.c_uint(i), ctypes.byref(h))
        return NvmlMonitor(lib, h, f"device {i}") if r == _SUCCESS else DeviceMonitor(f"no device {i}: {_err(lib, r)}")
    except Exception as e:  # a broken library must not take the evaluator down
        return DeviceMonitor(f"NVML failed: {type(e).__name__}: {e}")


class FakeMonitor(DeviceMonitor):
    """A scripted device for tests without a GPU. `memory` (pid -> bytes) and `samples` ((time_s, pid, sm %))
    are plain attributes a test changes while it runs; `add` makes a pid busy now; `error` makes queries fail."""

    def __init__(self, memory: dict[int, int] | None = None, samples: list[tuple[float, int, float]] | None = None,
                 *, total: int = 80 << 30, device_util: float | None = None, available: bool = True,
                 reason: str = "", error: str = "") -> None:
        super().__init__(reason)
        self.available, self.memory, self.samples = available, dict(memory or {}), list(samples or [])
        self.total, self.device_util, self.error = total, device_util, error

    def add(self, pid: int, sm: float, at: float | None = None, memory: int | None = None) -> None:
        self.samples.append((time.time() if at is None else at, pid, sm))
        if memory is not None:
            self.memory[pid] = memory

    def processes(self) -> dict[int, int]:
        if self.error:
            raise MonitorError(self.error)
        return dict(self.memory)

    def busy(self, since_s: float) -> dict[int, float]:
        if self.error:
            raise MonitorError(self.error)
        out: dict[int, float] = {}
        for t, pid, sm in self.samples:
            if t > since_s:
                out[pid] = max(out.get(pid, 0.0), sm)
        return out

    def device_busy(self) -> float | None:
        return self.device_util

    def free_bytes(self) -> tuple[int, int] | None:
        return self.total - sum(m for m in self.memory.values() if m > 0), self.total


def process_name(pid: int) -> str:
    """The process's name from /proc (comm, else argv[0]) where this process can see it, else "pid N"."""
    for f in ("comm", "cmdline"):
        with contextlib.suppress(OSError):
            raw = Path(f"/proc/{pid}/{f}").read_bytes().split(b"\0")[0].strip().decode(errors="replace")
            if raw:
                return raw if f == "comm" else os.path.basename(raw)
    return f"pid {pid}"


def _size(n: int) -> str:
    """In the units of every other memory figure of a verdict (GB of 2**30 bytes, as torch and nvidia-smi count)."""
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


@dataclass
class Neighbour:
    """A process on the device that is neither ours nor the candidate's. memory -1: unknown; sm None: not asked."""

    pid: int
    name: str
    memory: int = -1
    sm: float | None = None

    def __str__(self) -> str:
        parts = [] if self.name == f"pid {self.pid}" else [f"pid {self.pid}"]
        parts += [f"{self.sm:.0f} % SM"] if self.sm is not None else []
        parts += [_size(self.memory)] if self.memory > 0 else []
        return f"{self.name} ({', '.join(parts)})" if parts else self.name


@dataclass
class Attribution:
    """Who kept the device busy over an interval. `known` False: NVML unavailable or its pids not ours to trust."""

    known: bool
    reason: str = ""
    candidate: dict[int, float] = field(default_factory=dict)  # the candidate's busy pids -> highest SM %
    others: list[Neighbour] = field(default_factory=list)  # busy pids neither the candidate's nor ours, busiest first

    def describe(self) -> str:
        if not self.known:
            return f"whose work was on the GPU is not known: {self.reason}"
        cand = "; ".join(f"pid {p}, {u:.0f} % SM" for p, u in sorted(self.candidate.items(), key=lambda x: -x[1]))
        if self.others:
            who = "another process" if len(self.others) == 1 else f"{len(self.others)} other processes"
            line = f"{who} used the GPU meanwhile: " + ", ".join(map(str, self.others))
            return line + (f"; the candidate's too ({cand})" if cand else "")
        return f"the candidate's processes kept the GPU busy ({cand})" if cand else "nobody kept the GPU busy meanwhile"


def _untrusted(procs: dict[int, int], our_pids: set[int]) -> str:
    """Why NVML's pids cannot be matched to ours ("" when they can): it lists none of our processes that hold a
    context on the device (a container without the host's PID namespace, where NVML's pids are the host's)."""
    if our_pids and not our_pids & procs.keys():
        ours = ", ".join(map(str, sorted(our_pids)))
        return (f"NVML lists none of our processes on the device (pids {ours}): its pids are another PID "
                "namespace's (a container?), so per-process attribution is not possible")
    return ""


def attribute(monitor: DeviceMonitor, candidate_pids: set[int], our_pids: set[int], since_s: float,
              *, min_sm: float = 1.0) -> Attribution:
    """Who kept the device busy (a sample at `min_sm` % SM or more) since `since_s`. `our_pids`: the evaluator's
    processes that hold a context on this device (the referee); they are never "others" and check NVML's view."""
    if not monitor.available:
        return Attribution(False, monitor.reason)
    try:
        procs, busy = monitor.processes(), monitor.busy(since_s)
    except MonitorError as e:
        return Attribution(False, str(e))
    if why := _untrusted(procs, our_pids):
        return Attribution(False, why)
    busy = dict(sorted(((p, u) for p, u in busy.items() if u >= min_sm), key=lambda x: -x[1]))
    others = [Neighbour(p, process_name(p), procs.get(p, -1), u) for p, u in busy.items()
              if p not in candidate_pids and p not in our_pids]
    return Attribution(True, "", {p: u for p, u in busy.items() if p in candidate_pids}, others)


def memory_of(monitor: DeviceMonitor, pids: set[int]) -> int:
    """Device memory those processes hold now (bytes; 0 where NVML is unavailable, fails or cannot tell)."""
    if not pids or not monitor.available:
        return 0
    try:
        procs = monitor.processes()
    except MonitorError:
        return 0
    return sum(m for p, m in procs.items() if p in pids and m > 0)


def neighbours(monitor: DeviceMonitor, our_pids: set[int]) -> list[Neighbour]:
    """Processes holding memory on the device that are not ours, the largest first (for "memory held by other
    processes"). Empty where NVML is unavailable, fails, or its pids cannot be matched to ours (see `attribute`)."""
    try:
        procs = monitor.processes() if monitor.available else {}
    except MonitorError:
        return []
    if _untrusted(procs, our_pids):
        return []
    held = sorted(procs.items(), key=lambda x: -x[1])
    return [Neighbour(p, process_name(p), m) for p, m in held if p not in our_pids]
