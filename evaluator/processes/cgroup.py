"""The sandbox's third layer: a cgroup per worker (v2 or v1, where this process may create them), with a memory
limit and a process limit, its CPU time and its freezer read by the evaluator. Nothing here imports torch."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _own_cgroup_paths() -> dict[str, str]:
    paths: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hid, ctrls, path = line.split(":", 2)
            for c in (ctrls.split(",") if ctrls else [""]):
                paths[c] = path
    except OSError:
        pass
    return paths


def probe() -> tuple[str, str]:
    """Where this process may make cgroups with memory and pids limits ("v2:FOLDER", "v1"), or "" and why not."""
    own = _own_cgroup_paths()
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():  # v2 unified
        base = root / own.get("", "/").lstrip("/")
        probe = base / f"klsp-probe-{os.getpid()}"
        try:
            probe.mkdir()
            ok = (probe / "cgroup.procs").exists()
            probe.rmdir()
            ctrls = (base / "cgroup.subtree_control").read_text().split()
            if ok and "memory" in ctrls and "pids" in ctrls:
                return f"v2:{base}", ""
            return "", f"cgroup v2 without memory/pids delegated to {base}"
        except OSError as e:
            return "", f"cgroup v2 not writable ({e.strerror})"
    try:
        for ctrl in ("memory", "pids"):
            base = root / ctrl / own.get(ctrl, "/").lstrip("/")
            probe = base / f"klsp-probe-{os.getpid()}"
            probe.mkdir()
            probe.rmdir()
        return "v1", ""
    except OSError as e:
        return "", f"cgroups not writable ({e.strerror})"


class Cgroup:
    """A cgroup for one worker (memory + pids limits); `add(pid)` moves a process in, `close()` kills and removes."""

    def __init__(self, name: str, memory_bytes: int, max_pids: int, where: str) -> None:
        self.dirs: list[Path] = []
        self.cpuacct: Path | None = None  # v1: the cpuacct folder
        self.v2: Path | None = None  # v2: the cgroup's folder (cpu.stat and the freezer are always there)
        if not where:
            return
        own = _own_cgroup_paths()
        try:
            if where.startswith("v2:"):
                d = Path(where[3:]) / name
                d.mkdir(exist_ok=True)
                self.dirs.append(d)
                self.v2 = d
                if memory_bytes:
                    (d / "memory.max").write_text(str(memory_bytes))
                    (d / "memory.swap.max").exists() and (d / "memory.swap.max").write_text("0")
                if max_pids:
                    (d / "pids.max").write_text(str(max_pids))
            else:
                root = Path("/sys/fs/cgroup")
                dm = root / "memory" / own.get("memory", "/").lstrip("/") / name
                dp = root / "pids" / own.get("pids", "/").lstrip("/") / name
                dm.mkdir(exist_ok=True)
                self.dirs.append(dm)
                dp.mkdir(exist_ok=True)
                self.dirs.append(dp)
                if memory_bytes:
                    (dm / "memory.limit_in_bytes").write_text(str(memory_bytes))
                if max_pids:
                    (dp / "pids.max").write_text(str(max_pids))
                try:  # CPU accounting of every member, those that exited included (optional)
                    da = root / "cpuacct" / own.get("cpuacct", "/").lstrip("/") / name
                    da.mkdir(exist_ok=True)
                    self.dirs.append(da)
                    if (da / "cpuacct.usage").exists():
                        self.cpuacct = da
                except OSError:
                    pass
        except OSError:
            self.close()

    def set_memory(self, nbytes: int) -> bool:
        """Change the memory limit (the evaluator knows a task's size only once the reference is loaded)."""
        ok = False
        for d in self.dirs:
            for f in ("memory.max", "memory.limit_in_bytes"):
                if (d / f).exists():
                    try:
                        (d / f).write_text(str(int(nbytes)))
                        ok = True
                    except OSError:
                        pass
        return ok

    def add(self, pid: int) -> bool:
        ok = bool(self.dirs)
        for d in self.dirs:
            try:
                (d / "cgroup.procs").write_text(str(pid))
            except OSError:
                ok = False
        return ok

    @property
    def can_freeze(self) -> bool:
        """The v2 freezer (v1's is never used: a task it froze ignores SIGKILL until thawed)."""
        return self.v2 is not None and (self.v2 / "cgroup.freeze").exists()

    def freeze(self, on: bool, wait_s: float) -> bool:
        """Freeze (or thaw) every member; True once the kernel reports it done within `wait_s`."""
        if self.v2 is None:
            return False
        try:
            (self.v2 / "cgroup.freeze").write_text("1" if on else "0")
            end = time.monotonic() + wait_s
            while time.monotonic() < end:
                events = dict(line.split(" ", 1) for line in (self.v2 / "cgroup.events").read_text().splitlines()
                              if " " in line)
                if events.get("frozen", "").strip() == ("1" if on else "0"):
                    return True
                time.sleep(0.0002)
        except (OSError, ValueError):
            pass
        return False

    def cpu_ns(self) -> int | None:
        """CPU time of every process that was ever a member (ns), or None where this cgroup does not account it."""
        try:
            if self.v2 is not None:
                for line in (self.v2 / "cpu.stat").read_text().splitlines():
                    k, _, v = line.partition(" ")
                    if k == "usage_usec":
                        return int(v) * 1000
            if self.cpuacct is not None:
                return int((self.cpuacct / "cpuacct.usage").read_text())
        except (OSError, ValueError):
            pass
        return None

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        return sorted(out)

    def oom_killed(self) -> bool:
        for d in self.dirs:
            for f, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
                try:
                    for line in (d / f).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == key and int(v) > 0:
                            return True
                except (OSError, ValueError):
                    continue
        return False

    def close(self) -> None:
        for _ in range(20):
            pids = self.pids()
            if not pids:
                break
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if self.can_freeze:
                self.freeze(False, 0.1)
            time.sleep(0.02)
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass
        self.dirs = []
