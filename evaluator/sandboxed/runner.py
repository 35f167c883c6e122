"""Sandboxed: the candidate's own process ("runner").

It imports the candidate (its extensions come ready-built from the build cache: nothing is compiled here), builds
`ModelNew`, and answers requests: the referee has written inputs into the shared arena; a `run` request lists
calls, each on its own input set with its own output slot, and the runner does them in turn (shared/calls.py).

This process is the candidate's: its code can rewrite everything here, this file included, so nothing it says is
believed. It times nothing: the evaluator's clock spans each request from outside. It does not report outputs: it
copies them into the arena, where the referee reads them itself, for calls picked once the request is over. Its
tamper report (`state`) and its profile are claims the evaluator weighs as such, and the process is single-use.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from .. import messages as M
from ..shared import arena as arena_mod
from ..shared import protocol
from ..shared.buildkey import build_key, library_path
from ..shared.calls import Calls, poison_allocator
from ..shared.loader import candidate_frames, exec_module
from . import build, tamper

BIG_BYTES = 1 << 30  # tasks beyond this size give the output's cached device memory back after each request


class Failure(Exception):
    """The candidate failed (its exception, classified by the evaluator from `kind` and `text`)."""

    def __init__(self, kind: str, text: str, detail: str = "") -> None:
        super().__init__(text)
        self.kind, self.text, self.detail = kind, text, detail


def _raised(e: BaseException) -> Failure:
    return Failure("exception", f"{type(e).__name__}: {e}"[:2000], candidate_frames(traceback.format_exc()))


class Runner:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.arena: arena_mod.Arena | None = None
        self.calls: Calls | None = None
        self.layout: M.ArenaLayout | None = None
        self.module: Any = None
        self.model: Any = None
        self.extensions: list[dict[str, Any]] = []
        self.label = "klsp_ext::"
        self.profiling = False
        self.ext_errors = 0  # exceptions raised by the candidate's extension functions (a fallback hid them?)
        self.ext_error = ""
        self.baseline = tamper.snapshot()

    def ops(self) -> dict[str, Any]:
        """The handlers, bound now, before any candidate code runs (a method the candidate later replaces on the
        class does not answer requests; the evaluator believes none of the answers anyway)."""
        return {"attach": self.attach, "load": self.load, "init": self.init, "to_device": self.to_device,
                "prepare": self.prepare, "stage": self.stage, "go": self.go, "run": self.run, "state": self.state, "profile": self.profile,
                "diag": self.diag}

    # -- set-up ------------------------------------------------------------------------------------------------
    def attach(self, req: M.Attach, fds: list[int]) -> M.EmptyClaim:
        if not fds:
            raise ValueError("attach: no arena descriptor")
        self.arena = arena_mod.Arena(self.device, int(req.nbytes), fd=fds[0])
        self.layout = req.layout
        self.calls = Calls(self.arena, self.layout, self.device)
        return M.EmptyClaim()

    def load(self, req: M.LoadCandidate) -> M.Loaded:
        self.label = f"klsp_ext_{req.nonce}::"

        def from_cache(a: dict) -> dict:
            key = build_key(a, req.salt)
            lib = library_path(f"{req.cache_dir}/{key}", a["name"])
            if not lib.exists():
                return {"ok": False, "log": f"extension {a['name']!r} was not built in the compile stage (its "
                                            "load_inline arguments differ from the ones recorded there)"}
            self.extensions.append({"name": a["name"], "key": key})
            return {"ok": True, "path": str(lib), "key": key}

        build.install_loader(from_cache)
        _wrap_loaded_extensions(self)
        t0 = time.perf_counter()
        try:
            self.module = exec_module(req.candidate_src, "candidate.py")
        except build.BuildFailed as e:
            raise Failure("build", e.trimmed) from None
        except BaseException as e:  # noqa: BLE001
            raise _raised(e) from None
        if not hasattr(self.module, "ModelNew"):
            raise Failure("exception", "the module defines no ModelNew")
        return M.Loaded(seconds=time.perf_counter() - t0, extensions=list(self.extensions))

    def init(self, req: M.InitModel) -> M.EmptyClaim:
        init_args = protocol.decode(req.init_args)
        torch.manual_seed(int(req.seed))
        try:
            self.model = self.module.ModelNew(*init_args)
        except BaseException as e:  # noqa: BLE001
            raise _raised(e) from None
        return M.EmptyClaim()

    def to_device(self, req: M.Empty) -> M.EmptyClaim:
        try:
            if isinstance(self.model, torch.nn.Module):
                self.model = self.model.to(self.device)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except BaseException as e:  # noqa: BLE001
            raise _raised(e) from None
        return M.EmptyClaim()

    # -- calls -------------------------------------------------------------------------------------------------
    def prepare(self, req: M.Empty) -> M.EmptyClaim:
        """Before a request, outside the clock: NaN in the memory the allocator hands out next, so an output
        element the candidate never writes cannot pass by holding a previous call's value."""
        poison_allocator(self.device, list(self.layout.out_bytes) if self.layout is not None else [])
        return M.EmptyClaim()

    def stage(self, req: M.Run) -> M.EmptyClaim:
        assert self.calls is not None
        self.calls.stage(req.items)
        return M.EmptyClaim()

    def run(self, req: M.Run) -> M.RunClaim:
        """Stage and go in one request (a task whose arguments change from one seed to the next)."""
        self.stage(req)
        return self.go(M.Empty())

    def go(self, req: M.Empty) -> M.RunClaim:
        assert self.calls is not None
        try:
            scalars, problems = self.calls.go(self.model)
        except BaseException as e:  # noqa: BLE001
            raise _raised(e) from None
        if self.device.type == "cuda" and self.layout is not None \
                and self.layout.in_bytes + sum(self.layout.out_bytes) > BIG_BYTES:
            torch.cuda.empty_cache()  # a big output's memory goes back to the device while the referee checks
        if not any(scalars) and not any(problems):  # the common case: as short a reply as the referee's
            return M.RunClaim(calls=len(scalars))
        return M.RunClaim(calls=len(scalars), scalars=scalars, problems=problems)

    def state(self, req: M.Empty) -> M.StateClaim:
        bad, warn = tamper.diff(self.baseline, tamper.snapshot())
        return M.StateClaim(tampered=bad, warnings=warn, ext_errors=self.ext_errors, ext_error=self.ext_error)

    def profile(self, req: M.ProfileCall) -> M.ProfileClaim:
        """Each call under torch.profiler on its own fresh input set; each output goes to its slot and is checked
        like any other."""
        from ..shared.profile_capture import capture, profiler

        assert self.calls is not None
        record = torch.autograd.profiler.record_function
        calls: list[dict] = []
        scalars: list[dict] = []
        problems: list[list[str]] = []
        error = ""
        for it in req.items:
            ins = self.calls.args(it.slot, it.fresh, it.args)
            prof = None
            if not error:
                try:
                    prof = profiler(self.device.type == "cuda")
                    prof.__enter__()
                except Exception as e:  # noqa: BLE001  (the profiler cannot start here: the calls still run)
                    prof, error = None, f"the profiler did not start: {type(e).__name__}: {e}"
            self.profiling = prof is not None
            try:
                if prof is not None:
                    for _ in range(3):  # the profiler's own cost of marking a region, measured to be taken off
                        with record(self.label + "calibrate"):
                            pass
                with torch.no_grad():
                    out = self.model(*ins)
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
            except BaseException as e:  # noqa: BLE001
                raise _raised(e) from None
            finally:
                self.profiling = False
                if prof is not None:
                    try:
                        prof.__exit__(None, None, None)
                    except Exception:  # noqa: BLE001, S110
                        pass
            if prof is not None:
                try:
                    calls.append(capture(prof, self.device.type == "cuda"))
                except Exception as e:  # noqa: BLE001
                    error = f"the profile could not be read: {type(e).__name__}: {e}"
            s_, p_ = self.calls.collect(out, it.out)
            del out
            scalars.append(s_)
            problems.append(p_)
        return M.ProfileClaim(events=None if error or not calls else {"calls": calls}, error=error, scalars=scalars,
                              problems=problems)

    def diag(self, req: M.Empty) -> M.DiagClaim:
        import tempfile

        return M.DiagClaim(pid=os.getpid(), env=sorted(os.environ), cwd=os.getcwd(), tmp=tempfile.gettempdir(),
                           uid=os.getuid())


def _wrap_loaded_extensions(runner: Runner) -> None:
    """Extensions come back wrapped, so a profile can tell time inside the candidate's own code from the rest (the
    ranges carry a per-run label the evaluator knows)."""
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
            label = f"{runner.label}{self._name}.{attr}"

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


def warm_up(device: torch.device, lap: Callable[[str], None] = lambda _name: None) -> None:
    """Pay torch's first-use costs (thread pools, dispatch, the profiler) before the runner reports ready. `lap`
    is told where each part ended (the first allocation, the first kernels, the profiler, the rest)."""
    import sys

    from ..shared.profile_capture import profiler

    def done(part: str) -> None:  # the device's work of this part finished, then its time taken
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        lap(part)

    x = torch.randn(1 << 16, device=device)
    done("warm_up_alloc")  # on a GPU: the context is made here
    y = torch.relu(x) * 2 + x.sum()
    done("warm_up_kernels")
    try:
        with profiler(device.type == "cuda"):
            with torch.autograd.profiler.record_function("klsp_ext::warm_up"):
                torch.relu(y)
    except Exception as e:  # noqa: BLE001  (a warm-up: never a reason to fail)
        print(f"profiler warm-up failed: {type(e).__name__}: {e}", file=sys.stderr)
    done("warm_up_profiler")
    poison_allocator(device, [1 << 16])
