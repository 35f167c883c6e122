"""Trusted worker: the referee. It never imports candidate code.

It loads the reference, draws every input (from seeds the evaluator picks per run), writes the candidate's inputs
into the shared arena, computes the reference's outputs, compares the candidate's outputs (read from the arena)
with them, checks that the candidate left its inputs alone, runs the reference's timed requests (the same loop as
the candidate's, `shared/calls.py`, timed by the evaluator's clock), and tells the evaluator when the device is
idle (a probe of its own: work the candidate left running on the GPU delays it).

The arena holds `slots` input sets and as many output slots, so one timed request can run that many calls, each
on fresh inputs at an address of its own; tasks whose one set of inputs and outputs is over layout.BIG_SET get one.

`Referee` holds the loaded reference and answers the worker's ops (serve.py binds its methods by name); each
other concern has a module of its own, called with what it needs:

- `inputs.py`: every input, a pure function of (seed, variant);
- `layout.py`: where a task's inputs and outputs lie in an arena, and their views;
- `compare.py`: an output against the reference's, element by element;
- `second_opinion.py`: the reference in float64 (the exact answer), the second opinion on a failing floating output
  and the precision check against it;
- `ties.py`: integer outputs that differ only where the reference breaks a tie;
- `idle.py`: the device-idle probe;
- `roofline.py`, `ref_profile.py`: the reference's roofline, its top operators and its kernels' events;
- `flush.py`: the cache flush before timed calls.
"""

from __future__ import annotations

import math
import os
import secrets
import time
import traceback
from typing import Any

import torch

from .. import messages as M
from ..shared import arena as arena_mod
from ..shared import protocol
from ..shared.calls import Calls, poison_allocator
from ..shared.loader import candidate_frames, exec_module
from ..shared.tree import leaves
from . import inputs, second_opinion, ties
from .compare import Figures, Mismatch, compare_scalar, compare_tensor, same_values
from .flush import Flusher
from .idle import IdleProbe
from .layout import (
    Space,
    TaskShape,
    indexer,
    input_views,
    output_views,
    place,
    poison,
    set_bytes,
    slots_max,
    task_shape,
)
from .roofline import roofline

BIG_BYTES = 1 << 30  # tasks beyond this size give cached device memory back between phases


class ReferenceError_(Exception):
    """The reference itself failed: our side (infra_error), never the candidate's fault. Its message is for people
    as it is (the worker reports it without this class's name or the referee's stack)."""

    for_users = True


class Referee:
    """The referee's ops over the loaded reference (one per reference, reused for its candidates' arenas)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.mod: Any = None
        self.model: Any = None
        self.compiled: Any = None
        self.arenas: dict[int, Space] = {}
        self.next_arena = 0
        self.shape: TaskShape | None = None  # one set of the reference's inputs and outputs, once it is loaded
        self.ref_mutates = False
        self.kept: dict[tuple[int, int, str], Any] = {}  # (arena, seed, variant) -> the reference's output
        self.atol = self.rtol = 1e-4
        self.flusher = Flusher(device)
        self.idle_probe = IdleProbe(device)
        self.identity_out: Any = None

    # -- set-up ------------------------------------------------------------------------------------------------
    def load(self, req: M.LoadReference) -> tuple[M.ReferenceLoaded, list[int]]:
        s = req.settings
        self.atol, self.rtol = float(s["atol"]), float(s["rtol"])
        try:
            self.mod = exec_module(req.reference_src, "reference.py")
            init = list(self.mod.get_init_inputs())
        except Exception as e:  # noqa: BLE001
            raise ReferenceError_(f"the reference failed to load: {type(e).__name__}: {e}\n"
                                  f"{candidate_frames(traceback.format_exc())}") from None
        try:
            init_enc = protocol.encode(init)
        except TypeError as e:
            raise ReferenceError_(f"get_init_inputs(): {e}") from None
        try:
            torch.manual_seed(int(req.init_seed))
            self.model = self.mod.Model(*init)
            if isinstance(self.model, torch.nn.Module):
                self.model = self.model.to(self.device)
            setup_seed = secrets.randbits(31)
            gen = inputs.make(self.mod.get_inputs, setup_seed, "task", self.device)
            with torch.no_grad():
                out = self.model(*gen)
            self._sync()
        except Exception as e:  # noqa: BLE001
            raise ReferenceError_(f"the reference Model failed: {type(e).__name__}: {e}\n"
                                  f"{candidate_frames(traceback.format_exc())}") from None
        # does the reference change its own inputs? (then the candidate may too)
        again = inputs.make(self.mod.get_inputs, setup_seed, "task", self.device)
        self.ref_mutates = any(not same_values(a, b) for (_, a), (_, b) in zip(leaves(gen), leaves(again))
                               if isinstance(a, torch.Tensor))
        del again
        in_leaves = [t for _, t in leaves(gen) if isinstance(t, torch.Tensor)]
        try:
            template = protocol.encode(gen, indexer())
        except TypeError as e:
            raise ReferenceError_(f"get_inputs(): {e}") from None
        out_leaves = []
        for path, v in leaves(out):
            if isinstance(v, torch.Tensor):
                out_leaves.append(M.OutputLeaf(path=path, kind="tensor", shape=list(v.shape),
                                               dtype=str(v.dtype).replace("torch.", "")))
            else:
                try:
                    protocol.encode(v)
                except TypeError as e:
                    raise ReferenceError_(f"the reference returns {type(v).__name__} at output{path}: {e}") from None
                out_leaves.append(M.OutputLeaf(path=path, kind="scalar"))
        self.shape = task_shape(in_leaves, template, out_leaves)
        in_bytes, out_bytes = self.shape.in_bytes, sum(self.shape.out_sizes)
        per_set = set_bytes(self.shape)
        n_max = slots_max(self.shape, per_set, self.device)
        del gen, out
        free = total = 0
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            self.idle_probe.calibrate()
        return M.ReferenceLoaded(init_args=init_enc, in_bytes=in_bytes, out_bytes=out_bytes,
                                 ref_mutates=self.ref_mutates, slots_max=n_max, set_bytes=per_set,
                                 free_bytes=int(free), total_bytes=int(total))

    def open_arena(self, req: M.OpenArena) -> tuple[M.ArenaOpened, list[int]]:
        """An arena of its own for one candidate (its runner maps this one alone, so no candidate can touch
        another's inputs or outputs): `slots` input sets and as many output slots."""
        n_slots = max(1, int(req.slots))
        layout, nbytes = place(self._shape(), n_slots)
        try:
            arena = arena_mod.Arena(self.device, nbytes)
        except arena_mod.DriverError as e:
            if self.device.type != "cuda" or "out of memory" not in str(e):
                raise
            torch.cuda.empty_cache()  # what this process's allocator keeps cached goes back first, then once more
            arena = arena_mod.Arena(self.device, nbytes)
        self.next_arena += 1
        self.arenas[self.next_arena] = Space(arena, layout, Calls(arena, layout, self.device))
        return M.ArenaOpened(arena=self.next_arena, nbytes=arena.nbytes, layout=layout, slots=n_slots), [arena.fd]

    def close_arena(self, req: M.ArenaRef) -> M.Empty:
        space = self.arenas.pop(int(req.arena), None)
        if space is not None:
            self.kept = {k: v for k, v in self.kept.items() if k[0] != req.arena}
            space.calls.views.clear()
            space.arena.close()
        if not self.arenas and self.device.type == "cuda":
            torch.cuda.empty_cache()
        return M.Empty()

    def _space(self, arena: int) -> Space:
        space = self.arenas.get(int(arena))
        if space is None:
            raise ValueError(f"no arena {arena}")
        return space

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _trim(self) -> None:
        """For a big task, give the device the memory of drawn inputs and reference outputs no longer needed, so
        the candidate's process and this one never hold more than the problem's working set between them."""
        if self.device.type == "cuda" and self.shape is not None and self.shape.io_bytes > BIG_BYTES:
            torch.cuda.empty_cache()

    def _make(self, seed: int, variant: str) -> list:
        try:
            return inputs.make(self.mod.get_inputs, seed, variant, self.device)
        except Exception as e:  # noqa: BLE001
            raise ReferenceError_(f"get_inputs() failed: {type(e).__name__}: {e}") from None

    def _tensors(self, gen: list) -> list[torch.Tensor]:
        ts = [t for _, t in leaves(gen) if isinstance(t, torch.Tensor)]
        want = self._shape().inputs
        if len(ts) != len(want) or any(list(t.shape) != w.shape or str(t.dtype).replace("torch.", "") != w.dtype
                                       for t, w in zip(ts, want)):
            raise ReferenceError_("get_inputs() returns different shapes or dtypes for different seeds")
        return ts

    def _out_views(self, space: Space, out: int) -> dict[str, torch.Tensor]:
        return output_views(space, out)

    def _shape(self) -> TaskShape:
        if self.shape is None:
            raise ValueError("no reference is loaded")
        return self.shape

    # -- one request's inputs --------------------------------------------------------------------------------------
    def fill(self, req: M.Fill) -> M.Filled:
        """Fresh inputs for each item into its input set (and, first, poisoned output slots). With `keep` (one
        item), also the reference's output now (verification trials; for out-of-distribution variants, a
        reference that fails or gives nothing finite means the trial is skipped before the candidate sees it)."""
        space = self._space(req.arena)
        for out in req.poison:
            for v in self._out_views(space, int(out)).values():
                poison(v)
        encs: list[list] = []
        for it in req.items:
            gen = self._make(it.seed, it.variant)
            ts = self._tensors(gen)
            with torch.no_grad():
                for v, t in zip(input_views(space, it.slot), ts):
                    v.copy_(t)
            encs.append(protocol.encode(gen, indexer()))
            if req.keep:
                try:
                    with torch.no_grad():
                        out = self.model(*gen)
                    self._sync()
                except Exception as e:  # noqa: BLE001
                    if it.variant in inputs.OUT_OF_DISTRIBUTION:
                        return M.Filled(skip=f"the reference raised {type(e).__name__} on these inputs")
                    raise ReferenceError_(f"the reference failed on its own inputs: {type(e).__name__}: {e}") \
                        from None
                if it.variant in inputs.OUT_OF_DISTRIBUTION and not _some_finite(out):
                    return M.Filled(skip="the reference's output is not finite on these inputs")
                self.kept[(req.arena, it.seed, it.variant)] = out
            del gen, ts
        self._trim()
        if req.flush:
            self.flusher()
        self._sync()
        return M.Filled(args=encs)

    # -- the comparison ---------------------------------------------------------------------------------------------
    def check(self, req: M.Check) -> M.Checked:
        space = self._space(req.arena)
        return M.Checked(results=[self._check(space, req.arena, it, req.precision) for it in req.items])

    def _check(self, space: Space, arena: int, it: M.CheckItem, precision: bool) -> M.CheckResult:
        if it.problems:
            return M.CheckResult(match=False, message="; ".join(it.problems)[:600], where="output")
        seed, variant = it.seed, it.variant
        pristine = self._make(seed, variant)
        if not self.ref_mutates:
            for i, (v, t) in enumerate(zip(input_views(space, it.slot), self._tensors(pristine))):
                if not same_values(v, t):
                    return M.CheckResult(match=False, message=f"the candidate modified its input {i} in place (the "
                                         "reference does not)", where=f"input[{i}]")
        ref_out = self.kept.pop((arena, seed, variant), None)
        if ref_out is None:
            with torch.no_grad():
                ref_out = self.model(*pristine)
        ood = variant in inputs.OUT_OF_DISTRIBUTION
        total = Figures()
        warnings: list[str] = []
        decided = ""
        ref_leaves = dict(leaves(ref_out))
        outs = self._out_views(space, it.out)
        exact: dict[str, Any] | None = None
        try:
            for lf in space.layout.outputs:
                path = lf.path
                r = ref_leaves.get(path)
                name = f"output{path}"
                if lf.kind == "tensor":
                    c = outs[path]
                    try:
                        fig = compare_tensor(name, r, c, self.atol, self.rtol, ood=ood)
                    except Mismatch as m:
                        if m.int_positions is not None:
                            if not ties.ties(self.model, lambda: self._make(seed, variant), path, c, m.int_positions):
                                raise
                            warnings.append(f"{name}: {m.int_positions.numel()} integer elements differ from the "
                                            "reference only where the reference breaks a tie")
                            continue
                        if exact is None:
                            exact = self._exact(seed, variant)
                        fig, note = self._second_opinion(name, m, r, c, (exact or {}).get(path), ood)
                        warnings.append(note)
                        decided = "float64"
                else:
                    if path not in it.scalars:
                        raise Mismatch(f"{name}: missing", name)
                    fig = compare_scalar(name, r, protocol.decode(it.scalars[path]), self.atol, self.rtol)
                if fig.max_abs >= total.max_abs:
                    total.max_abs, total.where = fig.max_abs, fig.where
                total.max_rel = max(total.max_rel, fig.max_rel)
            if precision:
                warnings += second_opinion.precision(
                    ref_out, outs, lambda: self._exact(seed, variant), model=self.model, shape=self._shape(),
                    atol=self.atol, rtol=self.rtol)
        except Mismatch as m:
            return M.CheckResult(match=False, message=m.message, where=m.where, max_abs_err=_figure(m.max_abs_err))
        finally:
            del ref_out, pristine
            exact = None
            self._trim()
        return M.CheckResult(match=True, max_abs_err=_figure(total.max_abs), max_rel_err=_figure(total.max_rel),
                             where=total.where,
                             warnings=warnings, decided_by=decided)

    def _exact(self, seed: int, variant: str) -> dict[str, Any] | None:
        """The reference's outputs in float64 on the inputs of (seed, variant), or None (second_opinion.exact)."""
        return second_opinion.exact(self.model, lambda: self._make(seed, variant), self.device,
                                    self._shape().io_bytes)

    def _second_opinion(self, name: str, m: Mismatch, r: Any, c: torch.Tensor, e: Any,
                        ood: bool) -> tuple[Figures, str]:
        """A floating output outside the tolerance, judged against the exact answer `e` (second_opinion.py)."""
        return second_opinion.second_opinion(name, m, r, c, e, ood, self.atol, self.rtol)

    # -- the reference's timed requests ------------------------------------------------------------------------------
    def stage(self, req: M.RunReference) -> M.Empty:
        """The reference's calls made ready (the same loop as the candidate's timed request, shared/calls.py)."""
        fn = self._identity() if req.which == "identity" else self.compiled if req.which == "compiled" else self.model
        if fn is None:
            raise ReferenceError_("torch.compile of the reference is not ready")
        space = self._space(req.arena)
        space.calls.stage(req.items)
        space.fn = fn
        return M.Empty()

    def prepare(self, req: M.Empty) -> M.Empty:
        """The runner's step before a request, here too: both sides' calls meet the same allocator state."""
        poison_allocator(self.device, list(self.shape.out_sizes) if self.shape is not None else [])
        return M.Empty()

    def go(self, req: M.ArenaRef) -> M.Empty:
        """The staged calls, timed by the evaluator's clock around this request."""
        space = self._space(req.arena)
        fn, space.fn = space.fn, None
        if fn is None:
            raise ReferenceError_("nothing staged")
        space.calls.go(fn)
        return M.Empty()

    def _identity(self) -> Any:
        """A "model" that returns one reference output at once: the same request loop with no work in it measures
        the harness's own cost (argument decoding, views, the output copies)."""
        if self.identity_out is None:
            gen = self._make(secrets.randbits(31), "task")
            with torch.no_grad():
                self.identity_out = self.model(*gen)
            self._sync()
        out = self.identity_out
        return lambda *a: out

    def idle(self, req: M.IdleAsk) -> M.IdleReport:
        """Returns once the device is idle, as a probe of this process sees it (idle.py), or "not idle" after
        `req.bound_s`; the evaluator's clock of a timed request stops after this."""
        return self.idle_probe.wait(req.bound_s)

    def compile(self, req: M.Empty) -> M.Compiled:
        """torch.compile of the reference, run twice (compiled, then warm). Once per referee: the evaluator may ask
        ahead of the first candidate's timing and that candidate again."""
        if self.compiled is not None:
            return M.Compiled(seconds=0.0)
        t0 = time.perf_counter()
        try:
            _share_compile_headers()
            self.compiled = torch.compile(self.model)
            gen = self._make(secrets.randbits(31), "task")
            with torch.no_grad():
                self.compiled(*gen)
                self.compiled(*gen)
            self._sync()
        except Exception as e:  # noqa: BLE001  (no C++ compiler / triton: reported, never the candidate's fault)
            self.compiled = None
            return M.Compiled(error=f"{type(e).__name__}: {str(e)[:200]}")
        return M.Compiled(seconds=time.perf_counter() - t0)


    def flush(self, req: M.Empty) -> M.Empty:
        self.flusher()
        self._sync()
        return M.Empty()

    def release(self, req: M.Empty) -> M.Empty:
        """A candidate's timing is over: what only timing needs goes (the identity "model"'s output, made again by
        the next timing that needs it), so it never sits beside the inputs and outputs of the checks that follow
        (one tensor of the task's more at a big task's peak). The caching allocator keeps the block: both sides'
        timed calls meet the same allocator state (`prepare`), which giving it back to the device would change."""
        self.kept = {k: v for k, v in self.kept.items() if k[0] in self.arenas}
        self.identity_out = None
        return M.Empty()

    def memory(self, req: M.Empty) -> M.MemoryReport:
        if self.device.type != "cuda":
            return M.MemoryReport()
        free, total = torch.cuda.mem_get_info(self.device)
        return M.MemoryReport(free=int(free), total=int(total), mine=int(torch.cuda.memory_reserved(self.device)))

    def roofline(self, req: M.RooflineAsk) -> M.RooflineReport:
        """Bytes and FLOPs of one reference call on fresh inputs, and the bounds on time they imply (roofline.py)."""
        limits = req.limits or {}
        gen = self._make(secrets.randbits(31), "task")
        return roofline(self.model, gen, self.device, limits)

    def summary(self, req: M.Empty) -> M.ReferenceSummary:
        """What the reference's forward runs (its events; the evaluator classifies them)."""
        from .ref_profile import summary_calls

        gen = self._make(secrets.randbits(31), "task")
        return M.ReferenceSummary(events={"calls": summary_calls(self.model, gen, self.device)})

    def profile_reference(self, req: M.ProfileReference, info: dict) -> M.ReferenceProfile:
        """Top operators and the roofline of the reference (for profile-guided prompts)."""
        from . import devinfo
        from .ref_profile import profile_call

        if self.model is None:
            self.load(M.LoadReference(reference_src=req.reference_src, settings=req.settings,
                                      init_seed=secrets.randbits(31)))
        if not info:
            info.update(devinfo.device_info(self.device))
        gen = self._make(secrets.randbits(31), "task")
        p = profile_call(self.model, gen, self.device)
        limits = info["limits"]
        r = self.roofline(M.RooflineAsk(limits=limits))
        p["flops"], p["bytes_moved"] = r.flops or p["flops"], float(r.bytes)
        gpu = dict(info.get("public") or {})
        gpu.update(limits)
        dev = self.device
        label = f"{dev} ({gpu.get('name', '')})" if dev.type == "cuda" else "cpu"
        return M.ReferenceProfile(status="ok", profile={
            "device": label, "total_ms": p["total_ms"], "ops": p["ops"], "flops": p["flops"],
            "bytes_moved": p["bytes_moved"], "roofline_ms": r.roofline_ms, "bound": r.bound, "gpu": gpu})


def _figure(x: float | None) -> float | None:
    """A figure for the report: None where it is not finite (an error against a value that is not finite is no
    number; the message says what was not finite), so the wire, which carries no NaN or Inf, never refuses it."""
    return x if x is not None and math.isfinite(x) else None


def _some_finite(out: Any) -> bool:
    for _, v in leaves(out):
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()):
            if bool(torch.isfinite(v).any()):
                return True
        elif isinstance(v, torch.Tensor):
            return True
        elif isinstance(v, (int, float)) and v == v and abs(v) != float("inf"):
            return True
    return False


def _share_compile_headers() -> None:
    """Inductor's precompiled headers (its C++ code for the CPU) kept beside its other caches: torch puts them in
    the temporary folder's `torchinductor_<user>` whatever TORCHINDUCTOR_CACHE_DIR says, and a referee's temporary
    folder goes when it does, so every referee built them again (9 s of a 15 s cached compile on a two-core CPU).
    The folder the evaluator gave the referees' compile cache (processes/startup.py::referee_env), where torch has
    the setting; otherwise nothing changes."""
    shared = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not shared:
        return
    try:
        from torch._inductor import codecache
    except Exception:  # noqa: BLE001  (no inductor: torch.compile reports it)
        return
    if isinstance(getattr(codecache, "_HEADER_DIR", None), str) and \
            isinstance(getattr(codecache, "_HEADER_LOCK_DIR", None), str):
        codecache._HEADER_DIR = os.path.join(shared, "precompiled_headers")
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
