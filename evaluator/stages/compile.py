"""Parent side of the compile stage: a fresh sandboxed recorder imports the candidate; each `load_inline` it asks
for is looked up in the build cache or built by a fresh sandboxed builder; the evaluator alone writes the cache.

Cache layout: `<cache_dir>/<key>/<name>.so` plus `meta.json` (for a CUDA extension checked with nvcc on a machine
without a GPU: `nvcc.json` and no library). The key is a hash of the `load_inline` arguments and of what else
changes the binary (build.build_key), so identical extension code in different candidates is built once.
`<cache_dir>/.host-objects/<host key>.o`: host units' objects, so extensions that differ only in their kernels
(a refinement, best-of-n samples) compile torch's side once (buildkey.host_key); a builder about to compile a host
unit that another build of this evaluator is compiling now waits for that one's object (`BuildCache.host_turn`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import messages as M
from ..opclass import kernel_names
from ..processes.handle import Worker, WorkerError, WorkerFailed
from ..processes.pool import Pool
from ..shared.buildkey import HOST_KEY, HOST_OBJECTS

OnStage = Callable[[str, str], None]
HOST_WAIT_S = 120.0  # how long a builder waits for a host unit another build is compiling (one compile: 5-9 s)


@dataclass(frozen=True)
class ServedCall:
    """One `load_inline` of the candidate as the evaluator served it, built or found in the build cache: the
    evaluator's own record, not the recorder's."""

    name: str
    cuda: bool
    key: str
    cached: bool
    seconds: float
    ok: bool
    note: str = ""
    nvcc: bool | None = None  # for a CUDA extension checked with nvcc only (no GPU): whether nvcc compiled it
    kernels: list[str] = field(default_factory=list)  # the __global__ names of its sources
    path: str = ""  # the library, when one was built


@dataclass(frozen=True)
class CompileRecord:
    """What the compile stage found: the recorder's status and words about the import, and the calls the evaluator
    served it. `wall_s` and `salt` are the evaluator's (how long the stage took, what else keys a binary)."""

    status: str  # ok | compile_error | compile_timeout | exec_error
    calls: list[ServedCall] = field(default_factory=list)
    log: str = ""
    full_log: str = ""
    error: str = ""
    traceback: str = ""
    seconds: float = 0.0
    recorded: bool = False  # replayed from the evaluator's recordings: no recorder ran
    wall_s: float = 0.0
    salt: str = ""

    @property
    def cuda(self) -> bool:
        return any(c.cuda for c in self.calls)


class BuildCache:
    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._host_builds: dict[str, tuple[object, threading.Event]] = {}  # host key -> the build compiling it

    def folder(self, key: str) -> Path:
        return self.root / key

    def lookup(self, key: str, name: str) -> dict | None:
        d = self.folder(key)
        lib = d / f"{name}.so"
        if (d / "meta.json").exists() and lib.exists():
            try:
                kernels = list(json.loads((d / "meta.json").read_text()).get("kernels") or [])
            except (OSError, ValueError):
                kernels = []
            return {"ok": True, "path": str(lib), "key": key, "cached": True, "kernels": kernels}
        if (d / "nvcc.json").exists():
            try:
                r = json.loads((d / "nvcc.json").read_text())
            except (OSError, ValueError):
                return None
            return dict(r, key=key, cached=True, stub=True)
        return None

    @contextmanager
    def locked(self, key: str):  # one build per key, across threads and evaluator processes
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            with open(self.root / f".{key}.lock", "a") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)

    def store(self, key: str, name: str, library: str | None, meta: dict, nvcc: dict | None = None) -> None:
        """Move a builder's output into the cache (atomically: a half-written folder is never seen)."""
        tmp = self.root / f".{key}.tmp-{os.getpid()}-{threading.get_ident()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        if library is not None:
            shutil.copyfile(library, tmp / f"{name}.so")
            os.chmod(tmp / f"{name}.so", 0o644)
        if nvcc is not None:
            (tmp / "nvcc.json").write_text(json.dumps(nvcc))
        (tmp / "meta.json").write_text(json.dumps(meta))
        os.chmod(tmp, 0o755)
        dest = self.folder(key)
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)

    def host_folder(self) -> Path:
        d = self.root / HOST_OBJECTS
        if not d.is_dir():
            d.mkdir(exist_ok=True)
            os.chmod(d, 0o755)
        return d

    def store_host(self, key: str, obj: str, build_dir: str) -> None:
        """Keep a builder's host object for the next extension with the same host code (`HostObjects` in
        sandboxed/build.py): only a plain file of its own build folder, under a key of the form the builder computes
        (shared.buildkey.host_key), written atomically."""
        real = os.path.realpath(obj)
        if not HOST_KEY.fullmatch(key) or not real.startswith(os.path.realpath(build_dir) + os.sep) or \
                not os.path.isfile(real) or os.path.islink(obj):
            return
        dest = self.host_folder() / f"{key}.o"
        tmp = dest.with_name(f".{key}.tmp-{os.getpid()}-{threading.get_ident()}")
        try:
            shutil.copyfile(real, tmp)
            os.chmod(tmp, 0o644)
            os.rename(tmp, dest)
        except OSError:
            tmp.unlink(missing_ok=True)

    def host_turn(self, key: str, build: object, cancel: threading.Event | None = None,
                  wait_s: float = HOST_WAIT_S) -> bool:
        """A builder about to compile host unit `key` asks first (best-of-n samples of one wrapper start their builds
        together): True when its object is kept, now or once the build of this evaluator compiling it ends (the
        builder takes it, and compiles only its kernels); False when `build` is to compile it itself, and is then
        the build the others wait for, until its `host_done`. A build it waited for that kept no object (it failed,
        or its host unit read another file) hands the turn on; past `wait_s` the builder compiles its own."""
        if not HOST_KEY.fullmatch(key):
            return False
        obj = self.host_folder() / f"{key}.o"
        deadline = time.monotonic() + wait_s
        while True:
            with self._guard:
                if obj.is_file():
                    return True
                held = self._host_builds.get(key)
                if held is None or held[0] is build:
                    self._host_builds[key] = (build, threading.Event())
                    return False
            left = deadline - time.monotonic()
            if left <= 0 or (cancel is not None and cancel.is_set()):
                return False
            held[1].wait(min(0.25, left))

    def host_done(self, build: object) -> None:
        """`build` ended (kept its object or not): the builds waiting for its host units look again."""
        with self._guard:
            mine = [k for k, (b, _) in self._host_builds.items() if b is build]
            done = [self._host_builds.pop(k)[1] for k in mine]
        for ev in done:
            ev.set()


class HostTurns:
    """One build's questions about the host units it lacks (`BuildCache.host_turn`): all its waits for other
    builds' objects together stay within one HOST_WAIT_S (the builder's own timeout is extended by each wait)."""

    def __init__(self, cache: BuildCache, cancel: threading.Event | None, wait_s: float = HOST_WAIT_S) -> None:
        self.cache, self.cancel, self.left = cache, cancel, wait_s

    def ask(self, key: str) -> bool:
        t = time.monotonic()
        try:
            return self.cache.host_turn(key, self, self.cancel, wait_s=max(0.0, self.left))
        finally:
            self.left -= time.monotonic() - t


class Recordings:
    """What the recorder saw for a candidate source it already imported (its `load_inline` calls), so the same
    source again (verify on save, a retried or repeated candidate) needs no recorder process at all.

    Kept by the evaluator (trusted memory, never written by a sandboxed process) and used only while every library
    it names is still in the build cache. Safe against a candidate whose `load_inline` arguments change from one
    import to the next: the runner looks its libraries up by the arguments it computes itself, and one that was
    never built is that candidate's error."""

    def __init__(self, size: int = 256) -> None:
        self._items: OrderedDict[str, CompileRecord] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    @staticmethod
    def key(candidate_src: str, salt: str, nvcc_only: bool) -> str:
        return hashlib.sha256(f"{salt}\0{int(nvcc_only)}\0{candidate_src}".encode()).hexdigest()

    def get(self, key: str, cache: BuildCache) -> CompileRecord | None:
        with self._lock:
            res = self._items.get(key)
            if res is not None:
                self._items.move_to_end(key)
        if res is None or not all(cache.lookup(c.key, c.name) for c in res.calls):
            return None
        calls = [replace(c, cached=True, seconds=0.0) for c in res.calls]
        return replace(res, calls=calls, seconds=0.0, recorded=True)

    def put(self, key: str, res: CompileRecord) -> None:
        if res.status != "ok" or not all(c.ok and c.key for c in res.calls):
            return  # failures are not remembered: a timeout or a flaky import gets its retry
        with self._lock:
            self._items[key] = res
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


class CompileStage:
    """Runs the recorder for one candidate, serving its build requests."""

    def __init__(self, recorders: Pool, builders: Pool, cache: BuildCache, salt: str, nvcc_only: bool,
                 compile_timeout: float, recordings: Recordings | None = None) -> None:
        self.recorders, self.builders, self.cache = recorders, builders, cache
        self.salt, self.nvcc_only, self.timeout = salt, nvcc_only, compile_timeout
        self.recordings = recordings

    def build(self, args: dict, cancel: threading.Event | None, on_stage: OnStage) -> dict:
        from ..shared.buildkey import build_key

        key = build_key(args, self.salt)
        name = args["name"]
        hit = self.cache.lookup(key, name)
        if hit is not None:
            on_stage("compile", f"{name}: found in the build cache")
            return hit
        with self.cache.locked(key):
            hit = self.cache.lookup(key, name)
            if hit is not None:
                return hit
            kernels = sorted(kernel_names(args["cuda_sources"]))
            on_stage("compile", f"waiting for a builder for {name}")
            w = self.builders.acquire(cancel)
            this = HostTurns(self.cache, cancel)  # this build, as the host units it compiles know it

            def on_message(m: dict, fds: list[int]) -> dict | None:
                if m.get("type") != "host":
                    on_stage("compile", str(m.get("message", "")))
                    return None
                return {"type": "host", "ready": this.ask(str(m.get("key", "")))}

            try:
                t0 = time.perf_counter()
                try:
                    res, _ = w.ask(M.BuilderOps.build,
                                   M.BuildAsk(call=args, build_dir=w.build_dir, timeout=self.timeout,
                                              mode="nvcc" if self.nvcc_only and args["cuda_sources"] else "build",
                                              salt=self.salt, host_objects=str(self.cache.host_folder())),
                                   timeout=self.timeout, cancel=cancel, on_message=on_message)
                except WorkerFailed as e:
                    return {"ok": False, "key": key, "log": e.failed.error or "build failed", "seconds": 0.0}
                secs = time.perf_counter() - t0
                if not res.ok:
                    return {"ok": False, "key": key, "log": res.log or "build failed", "full_log": res.full_log,
                            "seconds": secs}
                meta = {"name": name, "seconds": secs, "built": time.time(), "cuda": bool(args["cuda_sources"]),
                        "path": res.path, "kernels": kernels}
                if res.stub:
                    nv = {"ok": True, "nvcc": res.nvcc, "note": res.note, "stub": True}
                    self.cache.store(key, name, None, meta, nvcc=nv)
                    return dict(nv, key=key, cached=False, seconds=secs, kernels=kernels)
                if not res.library or not os.path.isfile(res.library) or \
                        not os.path.realpath(res.library).startswith(os.path.realpath(w.build_dir) + os.sep):
                    return {"ok": False, "key": key, "log": "the builder named no library in its build folder",
                            "seconds": secs}
                self.cache.store(key, name, res.library, meta)
                if res.host_key:
                    self.cache.store_host(res.host_key, res.host_object, w.build_dir)
                return {"ok": True, "key": key, "path": str(self.cache.folder(key) / f"{name}.so"), "cached": False,
                        "seconds": secs, "note": res.path, "kernels": kernels}
            except WorkerError as e:
                if e.kind == "timeout":
                    return {"ok": False, "key": key, "timeout": True,
                            "log": f"compile timeout after {self.timeout:g} s ({name})"}
                if e.kind == "cancelled":
                    raise
                return {"ok": False, "key": key, "log": f"the compiler {e.message}\n{e.log_tail}"}
            finally:
                self.cache.host_done(this)
                self.builders.release(w, tainted=True)

    def run(self, candidate_src: str, cancel: threading.Event | None, on_stage: OnStage) -> CompileRecord:
        """The candidate imported by a fresh recorder, each extension it asks for built or found."""
        memo = Recordings.key(candidate_src, self.salt, self.nvcc_only) if self.recordings is not None else ""
        if memo:
            known = self.recordings.get(memo, self.cache)
            if known is not None:
                on_stage("compile", "seen before: its extensions are in the build cache")
                return known
        on_stage("compile", "waiting for a compile worker")
        w: Worker = self.recorders.acquire(cancel)
        timed_out = {"v": False}
        served: list[ServedCall] = []  # what was built or found for it: the evaluator's own record

        def on_message(msg: dict, fds: list[int]) -> dict | None:
            if msg.get("type") == "stage":
                on_stage("compile", str(msg.get("message", "")))
                return None
            if msg.get("type") != "build":
                return None
            try:
                from ..shared.buildkey import normalise

                args = normalise(**msg.get("args", {}))
            except (TypeError, ValueError) as e:
                return {"type": "built", "ok": False, "log": f"load_inline: {e}"}
            ans = self.build(args, cancel, on_stage)
            timed_out["v"] = timed_out["v"] or bool(ans.get("timeout"))
            lib = ans.get("path") if ans.get("ok") and not ans.get("stub") else ""
            served.append(ServedCall(name=args["name"], cuda=bool(args["cuda_sources"]), key=ans.get("key", ""),
                                     cached=bool(ans.get("cached")), seconds=float(ans.get("seconds", 0.0)),
                                     ok=bool(ans.get("ok")), note=ans.get("note", ""), nvcc=ans.get("nvcc"),
                                     kernels=list(ans.get("kernels") or []), path=lib or ""))
            return {"type": "built", **{k: v for k, v in ans.items() if k != "full_log"},
                    "full_log": ans.get("full_log", "")[-20000:]}

        try:
            claim, _ = w.ask(M.RecorderOps.record, M.Record(candidate_src=candidate_src), timeout=self.timeout,
                             cancel=cancel, on_message=on_message)
        except WorkerFailed as e:  # the recorder runs candidate code: its failure is not ours to take
            return CompileRecord(status="exec_error", error=e.failed.error or "the import failed", calls=served,
                                 traceback=e.failed.traceback)
        finally:
            self.recorders.release(w, tainted=True)
        res = CompileRecord(status=claim.status, calls=served, log=claim.log, full_log=claim.full_log,
                            error=claim.error, traceback=claim.traceback, seconds=claim.seconds)
        if res.status == "compile_error" and timed_out["v"]:
            res = replace(res, status="compile_timeout")
        if memo:
            self.recordings.put(memo, res)
        return res
