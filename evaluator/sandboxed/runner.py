"""Worker side, sandboxed: the candidate's own process ("runner").

It imports the candidate (its extensions come ready-built from the build cache: nothing is compiled here), builds
`ModelNew`, and answers calls: the referee has written the inputs into shared memory; the runner runs `forward` on
views of them and copies the outputs into the output slots. Every call is handled the same way, whether the
evaluator checks its output or not, and whether it is timed or not: there is no phase to detect.

Nothing this process says is trusted beyond being a claim to check: outputs are compared by the referee, times
are cross-checked by the evaluator's own clock, and the process is single-use.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import torch

from ..shared import arena as arena_mod
from ..shared import protocol
from ..shared.loader import candidate_frames, exec_module
from ..shared.tree import leaves
from . import build, tamper

_perf = time.perf_counter
_Event = torch.cuda.Event
_sync = torch.cuda.synchronize
BIG_BYTES = 1 << 30  # tasks beyond this size give the output's cached device memory back after each call


class Failure(Exception):
    """The candidate failed (its exception, classified by the evaluator from `kind` and `text`)."""

    def __init__(self, kind: str, text: str, detail: str = "") -> None:
        super().__init__(text)
        self.kind, self.text, self.detail = kind, text, detail


class Runner:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.arena: arena_mod.Arena | None = None
        self.layout: dict = {}
        self.module: Any = None
        self.model: Any = None
        self.out: Any = None
        self.views: dict[int, list[torch.Tensor]] = {}
        self.sync_overhead_ms = 0.0
        self.ext_names: list[str] = []
        self.kernel_names: set[str] = set()  # the __global__ functions of the candidate's own sources
        self.profiling = False
        self.ext_errors = 0  # exceptions raised by the candidate's extension functions (a fallback hid them?)
        self.ext_error = ""
        self.baseline = tamper.snapshot()

    # -- set-up ------------------------------------------------------------------------------------------------
    def attach(self, args: dict, fds: list[int]) -> dict:
        if not fds:
            raise ValueError("attach: no arena descriptor")
        self.arena = arena_mod.Arena(self.device, int(args["nbytes"]), fd=fds[0])
        self.layout = args["layout"]
        if self.device.type == "cuda":
            over = []
            for _ in range(10):
                a, b, c = (_Event(enable_timing=True) for _ in range(3))
                a.record()
                b.record()
                _sync(self.device)
                c.record()
                _sync(self.device)
                over.append(a.elapsed_time(c) - a.elapsed_time(b))
            over.sort()
            self.sync_overhead_ms = over[len(over) // 2]
        return {"ok": True}

    def load(self, args: dict) -> dict:
        salt, cache = args["salt"], args["cache_dir"]

        def from_cache(a: dict) -> dict:
            key = build.build_key(a, salt)
            lib = build.library_path(f"{cache}/{key}", a["name"])
            if not lib.exists():
                return {"ok": False, "log": f"extension {a['name']!r} was not built in the compile stage (its "
                                            "load_inline arguments differ from the ones recorded there)"}
            self.ext_names.append(a["name"])
            from ..shared.profiling import kernel_names

            self.kernel_names |= kernel_names(a["cuda_sources"])
            return {"ok": True, "path": str(lib), "key": key}

        build.install_loader(from_cache)
        _wrap_loaded_extensions(self)
        t0 = _perf()
        try:
            self.module = exec_module(args["candidate_src"], "candidate.py")
        except build.BuildFailed as e:
            raise Failure("build", e.trimmed) from None
        except BaseException as e:  # noqa: BLE001
            raise Failure("exception", f"{type(e).__name__}: {e}"[:2000], candidate_frames(traceback.format_exc())) \
                from None
        if not hasattr(self.module, "ModelNew"):
            raise Failure("exception", "the module defines no ModelNew")
        return {"ok": True, "seconds": _perf() - t0}

    def init(self, args: dict) -> dict:
        init_args = protocol.decode(args["init_args"])
        torch.manual_seed(int(args["seed"]))
        try:
            self.model = self.module.ModelNew(*init_args)
        except BaseException as e:  # noqa: BLE001
            raise Failure("exception", f"{type(e).__name__}: {e}"[:2000], candidate_frames(traceback.format_exc())) \
                from None
        return {"ok": True}

    def to_device(self, args: dict) -> dict:
        try:
            if isinstance(self.model, torch.nn.Module):
                self.model = self.model.to(self.device)
            if self.device.type == "cuda":
                _sync(self.device)
        except BaseException as e:  # noqa: BLE001
            raise Failure("exception", f"{type(e).__name__}: {e}"[:2000], candidate_frames(traceback.format_exc())) \
                from None
        return {"ok": True}

    # -- calls -------------------------------------------------------------------------------------------------
    def _args(self, slot: int, fresh: bool, encoded: list) -> list:
        assert self.arena is not None
        leaves = self.layout["slots"][slot]
        views = self.views.get(slot)
        if fresh or views is None or any(tuple(v.shape) != tuple(lf["shape"]) for v, lf in zip(views, leaves)):
            views = [self.arena.view(lf["offset"], lf["shape"], getattr(torch, lf["dtype"]), lf.get("stride"))
                     for lf in leaves]
            self.views[slot] = views
        return protocol.decode(encoded, lambda i: views[i])

    def prepare(self, args: dict) -> dict:
        """Between calls, outside any clock: leave NaN in the memory the allocator hands out next, so an output
        element the candidate never writes cannot pass by holding a previous call's value."""
        self.out = None
        sizes = [int(n) for n in self.layout.get("out_bytes", [])]
        _poison(self.device, sizes)
        return {"ok": True}

    def call(self, args: dict) -> dict:
        ins = self._args(int(args["slot"]), bool(args["fresh"]), args["args"])
        model = self.model
        try:
            with torch.no_grad():
                if self.device.type == "cuda":
                    start, end, end_d = (_Event(enable_timing=True) for _ in range(3))
                    start.record()
                    out = model(*ins)
                    end.record()
                    _sync(self.device)
                    end_d.record()
                    _sync(self.device)
                    ms = start.elapsed_time(end)
                    dev_ms = start.elapsed_time(end_d) - self.sync_overhead_ms
                else:
                    t0 = _perf()
                    out = model(*ins)
                    ms = dev_ms = (_perf() - t0) * 1e3
        except BaseException as e:  # noqa: BLE001
            raise Failure("exception", f"{type(e).__name__}: {e}"[:2000], candidate_frames(traceback.format_exc())) \
                from None
        self.out = out
        return {"ok": True, "ms": ms, "device_ms": dev_ms}

    def collect(self, args: dict) -> dict:
        """Copy the last call's outputs into the output slots; scalars travel in the answer."""
        assert self.arena is not None
        out, self.out = self.out, None
        want = {lf["path"]: lf for lf in self.layout["outputs"]}
        got = dict(leaves(out))
        problems: list[str] = []
        missing = [p for p in want if p not in got]
        extra = [p for p in got if p not in want]
        if missing or extra:
            return {"ok": True, "structure": _describe(out), "problems": [
                f"output structure differs: missing {missing[:4] or 'nothing'}, unexpected {extra[:4] or 'nothing'}"]}
        scalars: dict[str, Any] = {}
        with torch.no_grad():
            for path, lf in want.items():
                v = got[path]
                if lf["kind"] == "tensor":
                    if not isinstance(v, torch.Tensor):
                        problems.append(f"output{path}: expected a tensor, got {type(v).__name__}")
                        continue
                    dt = str(v.dtype).replace("torch.", "")
                    if list(v.shape) != list(lf["shape"]):
                        problems.append(f"output{path}: shape {list(v.shape)}, expected {lf['shape']}")
                        continue
                    if dt != lf["dtype"]:
                        problems.append(f"output{path}: dtype {dt}, expected {lf['dtype']}")
                        continue
                    if v.device != self.device:
                        problems.append(f"output{path}: on {v.device}, expected {self.device}")
                        continue
                    dst = self.arena.view(lf["offset"], lf["shape"], getattr(torch, lf["dtype"]))
                    dst.copy_(v)
                else:
                    try:
                        scalars[path] = protocol.encode(v.item() if isinstance(v, torch.Tensor) and v.numel() == 1
                                                        else v)
                    except TypeError as e:
                        problems.append(f"output{path}: {e}")
        if self.device.type == "cuda":
            _sync(self.device)
            out = got = v = None  # noqa: F841  (the output's memory is not referenced from here any more)
            if self.layout.get("in_bytes", 0) + sum(self.layout.get("out_bytes", [])) > BIG_BYTES:
                torch.cuda.empty_cache()  # a big output's memory goes back to the device while the referee checks
        return {"ok": True, "scalars": scalars, "problems": problems}

    def state(self, args: dict) -> dict:
        bad, warn = tamper.diff(self.baseline, tamper.snapshot())
        return {"ok": True, "tampered": bad, "warnings": warn, "ext_errors": self.ext_errors,
                "ext_error": self.ext_error}

    def profile(self, args: dict) -> dict:
        """One call under torch.profiler (its output is collected and checked like any other)."""
        from torch.profiler import ProfilerActivity, profile

        ins = self._args(int(args["slot"]), bool(args["fresh"]), args["args"])
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        record = torch.autograd.profiler.record_function
        try:
            prof = profile(activities=acts, record_shapes=False)
            prof.__enter__()
        except Exception as e:  # noqa: BLE001  (the profiler cannot start here: the call still runs, unprofiled)
            self.call({"slot": args["slot"], "fresh": False, "args": args["args"]})
            return {"ok": True, "events": None, "error": f"the profiler did not start: {type(e).__name__}: {e}"}
        self.profiling = True
        try:
            for _ in range(3):  # the profiler's own cost of marking a region, measured to be taken off
                with record("klsp_calibrate::empty"):
                    pass
            with torch.no_grad():
                t0 = _perf()
                out = self.model(*ins)
                if self.device.type == "cuda":
                    _sync(self.device)
                wall_ms = (_perf() - t0) * 1e3
        except BaseException as e:  # noqa: BLE001
            raise Failure("exception", f"{type(e).__name__}: {e}"[:2000], candidate_frames(traceback.format_exc())) \
                from None
        finally:
            self.profiling = False
            try:
                prof.__exit__(None, None, None)
            except Exception:  # noqa: BLE001, S110
                pass
        self.out = out
        from ..shared.profiling import call_events

        try:
            events = call_events(prof, self.device.type == "cuda", self.kernel_names)
        except Exception as e:  # noqa: BLE001
            return {"ok": True, "events": None, "error": f"the profile could not be read: {type(e).__name__}: {e}"}
        return {"ok": True, "events": events, "wall_ms": wall_ms}


def _describe(x: Any) -> str:
    from ..shared.tree import structure

    return str(structure(x))[:300]


def _poison(device: torch.device, sizes: list[int]) -> None:
    per_size = 2 if device.type == "cuda" else 8
    blocks = []
    budget = 4 << 30
    used = 0
    for n in sizes:
        for _ in range(per_size):
            if used + n > budget:
                break
            blocks.append(torch.empty(max(1, (n + 3) // 4), dtype=torch.float32, device=device))
            used += n
    big = torch.empty(32 << 20 if device.type == "cuda" else 1 << 18, dtype=torch.float32, device=device)
    for b in blocks + [big]:
        b.fill_(float("nan"))
    if device.type == "cuda":
        _sync(device)
    del blocks, big


def _wrap_loaded_extensions(runner: Runner) -> None:
    """Extensions come back wrapped, so a profile can tell time inside the candidate's own code from the rest."""
    import torch.utils.cpp_extension as ce

    inner = ce.load_inline
    record = torch.autograd.profiler.record_function

    class Extension:
        def __init__(self, mod: Any, name: str) -> None:
            self._mod, self._name = mod, name

        def __getattr__(self, attr: str) -> Any:
            v = getattr(self._mod, attr)
            if not callable(v) or attr.startswith("__"):
                return v
            label = f"klsp_ext::{self._name}.{attr}"

            def call(*a: Any, **k: Any) -> Any:
                try:
                    if not runner.profiling:
                        return v(*a, **k)
                    with record(label):
                        return v(*a, **k)
                except Exception as e:
                    runner.ext_errors += 1
                    runner.ext_error = runner.ext_error or f"{type(e).__name__}: {e}"
                    raise

            return call

    def load_inline(*a: Any, **k: Any) -> Any:
        mod = inner(*a, **k)
        if isinstance(mod, str) or mod is None:  # is_python_module=False: ops registered with torch
            return mod
        return Extension(mod, getattr(mod, "__name__", "ext"))

    ce.load_inline = load_inline


def warm_up(device: torch.device) -> None:
    """Pay torch's first-use costs (thread pools, dispatch, the profiler) before the runner reports ready."""
    import sys

    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(1 << 16, device=device)
    y = torch.relu(x) * 2 + x.sum()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        with profile(activities=acts):
            with torch.autograd.profiler.record_function("klsp_ext::warm_up"):
                torch.relu(y)
    except Exception as e:  # noqa: BLE001  (a warm-up: never a reason to fail)
        print(f"profiler warm-up failed: {type(e).__name__}: {e}", file=sys.stderr)
    if device.type == "cuda":
        _sync(device)
    _poison(device, [1 << 16])
