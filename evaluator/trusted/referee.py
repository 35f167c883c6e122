"""Worker side, trusted: the referee. It never imports candidate code.

It loads the reference, draws every input (from seeds the evaluator picks per run), writes the candidate's inputs
into the shared arena, computes the reference's outputs, compares the candidate's outputs (read from the arena)
with them, checks that the candidate left its inputs alone, and times the reference (eager and `torch.compile`)
with the same regime as the candidate: fresh input values for every call, the L2 cache flushed before each.
"""

from __future__ import annotations

import secrets
import time
import traceback
from typing import Any

import torch

from ..shared import arena as arena_mod
from ..shared import protocol
from ..shared.loader import candidate_frames, exec_module
from . import inputs
from .compare import Figures, Mismatch, compare_scalar, compare_tensor, same_values
from .flush import Flusher

BIG_BYTES = 1 << 30  # tasks beyond this size give cached device memory back between phases
MAX_DOUBLE_SLOT_BYTES = 1 << 30  # inputs up to this size get two slots (the candidate sees two addresses)


class ReferenceError_(Exception):
    """The reference itself failed: our side (infra_error), never the candidate's fault."""


class Referee:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.mod: Any = None
        self.model: Any = None
        self.compiled: Any = None
        self.arena: arena_mod.Arena | None = None
        self.layout: dict = {}
        self.ref_mutates = False
        self.kept: tuple[int, str, Any] | None = None
        self.atol = self.rtol = 1e-4
        self.flusher = Flusher(device)

    # -- set-up ------------------------------------------------------------------------------------------------
    def load(self, args: dict) -> tuple[dict, list[int]]:
        s = args["settings"]
        self.atol, self.rtol = float(s["atol"]), float(s["rtol"])
        try:
            self.mod = exec_module(args["reference_src"], "reference.py")
            init = list(self.mod.get_init_inputs())
        except Exception as e:  # noqa: BLE001
            raise ReferenceError_(f"the reference failed to load: {type(e).__name__}: {e}\n"
                                  f"{candidate_frames(traceback.format_exc())}") from None
        try:
            init_enc = protocol.encode(init)
        except TypeError as e:
            raise ReferenceError_(f"get_init_inputs(): {e}") from None
        seed = int(args["init_seed"])
        try:
            torch.manual_seed(seed)
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
        self.ref_mutates = any(not same_values(a, b) for (_, a), (_, b) in zip(inputs.leaves(gen), inputs.leaves(again))
                               if isinstance(a, torch.Tensor))
        del again
        in_leaves = [t for _, t in inputs.leaves(gen) if isinstance(t, torch.Tensor)]
        try:
            template = protocol.encode(gen, _indexer())
        except TypeError as e:
            raise ReferenceError_(f"get_inputs(): {e}") from None
        out_leaves = []
        for path, v in inputs.leaves(out):
            if isinstance(v, torch.Tensor):
                out_leaves.append({"path": path, "kind": "tensor", "shape": list(v.shape),
                                   "dtype": str(v.dtype).replace("torch.", "")})
            else:
                try:
                    protocol.encode(v)
                except TypeError as e:
                    raise ReferenceError_(f"the reference returns {type(v).__name__} at output{path}: {e}") from None
                out_leaves.append({"path": path, "kind": "scalar"})
        in_bytes = sum(_span_bytes(t) for t in in_leaves)
        out_bytes = sum(_numel(lf["shape"]) * _esize(lf["dtype"]) for lf in out_leaves if lf["kind"] == "tensor")
        n_slots = 2 if in_bytes <= MAX_DOUBLE_SLOT_BYTES else 1
        off = 0
        slots = []
        for _ in range(n_slots):
            leaves = []
            for t in in_leaves:
                off = arena_mod.align(off)
                lf = {"offset": off, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
                if not t.is_contiguous():
                    lf["stride"] = list(t.stride())
                leaves.append(lf)
                off += _span_bytes(t)
            slots.append(leaves)
        for lf in out_leaves:
            if lf["kind"] == "tensor":
                off = arena_mod.align(off)
                lf["offset"] = off
                off += _numel(lf["shape"]) * _esize(lf["dtype"])
        del gen, out
        if self.arena is not None:
            self.arena.close()
        self.arena = arena_mod.Arena(self.device, max(off, 1))
        self.layout = {"slots": slots, "inputs": template, "outputs": out_leaves, "in_bytes": in_bytes,
                       "out_bytes": [_numel(lf["shape"]) * _esize(lf["dtype"]) for lf in out_leaves
                                     if lf["kind"] == "tensor"]}
        free = total = 0
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
        return ({"ok": True, "layout": self.layout, "nbytes": self.arena.nbytes, "init_args": init_enc,
                 "in_bytes": in_bytes, "out_bytes": out_bytes, "ref_mutates": self.ref_mutates,
                 "free_bytes": free, "total_bytes": total}, [self.arena.fd])

    def arena_fd(self, args: dict) -> tuple[dict, list[int]]:
        assert self.arena is not None
        return {"ok": True, "nbytes": self.arena.nbytes}, [self.arena.fd]

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _trim(self) -> None:
        """For a big task, give the device the memory of drawn inputs and reference outputs no longer needed, so
        the candidate's process and this one never hold more than the problem's working set between them."""
        lay = self.layout or {}
        if self.device.type == "cuda" and lay.get("in_bytes", 0) + sum(lay.get("out_bytes", [])) > BIG_BYTES:
            torch.cuda.empty_cache()

    def _make(self, seed: int, variant: str) -> list:
        try:
            return inputs.make(self.mod.get_inputs, seed, variant, self.device)
        except Exception as e:  # noqa: BLE001
            raise ReferenceError_(f"get_inputs() failed: {type(e).__name__}: {e}") from None

    def _tensors(self, gen: list) -> list[torch.Tensor]:
        ts = [t for _, t in inputs.leaves(gen) if isinstance(t, torch.Tensor)]
        want = self.layout["slots"][0]
        if len(ts) != len(want) or any(list(t.shape) != lf["shape"] or str(t.dtype).replace("torch.", "") != lf["dtype"]
                                       for t, lf in zip(ts, want)):
            raise ReferenceError_("get_inputs() returns different shapes or dtypes for different seeds")
        return ts

    def _views(self, slot: int) -> list[torch.Tensor]:
        assert self.arena is not None
        return [self.arena.view(lf["offset"], lf["shape"], getattr(torch, lf["dtype"]), lf.get("stride"))
                for lf in self.layout["slots"][slot]]

    # -- one call's inputs ---------------------------------------------------------------------------------------
    def fill(self, args: dict) -> dict:
        """Write fresh inputs for (seed, variant) into `slot`. With `keep`, also compute the reference's output now
        (verification trials; for out-of-distribution variants, a reference that fails or gives nothing finite
        means the trial is skipped before the candidate sees it)."""
        slot, seed, variant = int(args["slot"]), int(args["seed"]), str(args["variant"])
        gen = self._make(seed, variant)
        ts = self._tensors(gen)
        with torch.no_grad():
            for v, t in zip(self._views(slot), ts):
                v.copy_(t)
        enc = protocol.encode(gen, _indexer())
        self.kept = None
        if args.get("keep"):
            try:
                with torch.no_grad():
                    out = self.model(*gen)
                self._sync()
            except Exception as e:  # noqa: BLE001
                if variant in inputs.OUT_OF_DISTRIBUTION:
                    return {"ok": True, "skip": f"the reference raised {type(e).__name__} on these inputs"}
                raise ReferenceError_(f"the reference failed on its own inputs: {type(e).__name__}: {e}") from None
            if variant in inputs.OUT_OF_DISTRIBUTION and not _some_finite(out):
                return {"ok": True, "skip": "the reference's output is not finite on these inputs"}
            self.kept = (seed, variant, out)
        del gen, ts
        self._trim()
        if args.get("flush"):
            self.flusher()
        self._sync()
        return {"ok": True, "args": enc}

    # -- the comparison ---------------------------------------------------------------------------------------------
    def check(self, args: dict) -> dict:
        slot, seed, variant = int(args["slot"]), int(args["seed"]), str(args["variant"])
        problems = args.get("problems") or []
        if problems:
            return {"match": False, "message": "; ".join(problems)[:600], "where": "output"}
        pristine = self._make(seed, variant)
        if not self.ref_mutates:
            for i, (v, t) in enumerate(zip(self._views(slot), self._tensors(pristine))):
                if not same_values(v, t):
                    return {"match": False, "message": f"the candidate modified its input {i} in place (the "
                                                      "reference does not)", "where": f"input[{i}]"}
        if self.kept is not None and self.kept[:2] == (seed, variant):
            ref_out = self.kept[2]
        else:
            with torch.no_grad():
                ref_out = self.model(*pristine)
        self.kept = None
        ood = variant in inputs.OUT_OF_DISTRIBUTION
        scalars = args.get("scalars") or {}
        total = Figures()
        warnings: list[str] = []
        assert self.arena is not None
        ref_leaves = dict(inputs.leaves(ref_out))
        try:
            for lf in self.layout["outputs"]:
                path = lf["path"]
                r = ref_leaves.get(path)
                name = f"output{path}"
                if lf["kind"] == "tensor":
                    c = self.arena.view(lf["offset"], lf["shape"], getattr(torch, lf["dtype"]))
                    try:
                        fig = compare_tensor(name, r, c, self.atol, self.rtol, ood=ood)
                    except Mismatch as m:
                        if m.int_positions is None or not self._ties(seed, variant, path, c, m.int_positions):
                            raise
                        warnings.append(f"{name}: {m.int_positions.numel()} integer elements differ from the "
                                        "reference only where the reference breaks a tie")
                        continue
                else:
                    if path not in scalars:
                        raise Mismatch(f"{name}: missing", name)
                    fig = compare_scalar(name, r, protocol.decode(scalars[path]), self.atol, self.rtol)
                if fig.max_abs >= total.max_abs:
                    total.max_abs, total.where = fig.max_abs, fig.where
                total.max_rel = max(total.max_rel, fig.max_rel)
            if args.get("precision"):
                warnings += self._precision(ref_out, seed, variant)
        except Mismatch as m:
            return {"match": False, "message": m.message, "where": m.where,
                    "max_abs_err": m.max_abs_err if m.max_abs_err is None or m.max_abs_err == m.max_abs_err
                    else None}
        finally:
            del ref_out, pristine
            self._trim()
        return {"match": True, "max_abs_err": total.max_abs, "max_rel_err": total.max_rel, "where": total.where,
                "warnings": warnings}

    def _precision(self, ref_out: Any, seed: int, variant: str) -> list[str]:
        """The candidate's error against a float64 reference, next to the fp32 reference's own: a silent
        fp16/bf16/TF32 downgrade passes a loose tolerance but is flagged. Only for small problems (it needs
        float64 copies of the model, inputs and outputs)."""
        if int(self.layout.get("in_bytes", 0)) + sum(self.layout.get("out_bytes", [])) > (256 << 20):
            return []
        outs = [lf for lf in self.layout["outputs"] if lf["kind"] == "tensor" and lf["dtype"] == "float32"]
        if not outs:
            return []
        import copy

        try:
            m64 = copy.deepcopy(self.model).double()
            args = [inputs.tree_map(lambda t: t.double() if t.is_floating_point() else t, x)
                    for x in self._make(seed, variant)]
            with torch.no_grad():
                r64 = dict(inputs.leaves(m64(*args)))
        except Exception:  # noqa: BLE001  (the model cannot run in float64: nothing to compare against)
            return []
        refs = dict(inputs.leaves(ref_out))
        warn = []
        assert self.arena is not None
        for lf in outs:
            r, e = refs.get(lf["path"]), r64.get(lf["path"])
            if not isinstance(r, torch.Tensor) or not isinstance(e, torch.Tensor):
                continue
            c = self.arena.view(lf["offset"], lf["shape"], torch.float32).double()
            fin = torch.isfinite(e) & torch.isfinite(r.double()) & torch.isfinite(c)
            if not bool(fin.any()):
                continue
            scale = max(float(e[fin].abs().max()), 1e-30)
            e_ref = float((r.double() - e)[fin].abs().max()) / scale
            e_cand = float((c - e)[fin].abs().max()) / scale
            if e_cand > max(16 * e_ref, 2e-6):
                warn.append(f"precision: output{lf['path']} error vs a float64 reference is {e_cand:.1e} (relative "
                            f"to its scale), {e_cand / max(e_ref, 1e-12):.0f}x the fp32 reference's {e_ref:.1e}: the "
                            "kernel may compute in reduced precision (fp16/bf16/TF32)")
        return warn

    def _ties(self, seed: int, variant: str, path: str, cand: torch.Tensor, positions: torch.Tensor) -> bool:
        """Are the differing integer outputs answers the reference itself gives when ties are broken otherwise?
        Runs the reference on inputs perturbed by a few ulps (which breaks exact ties at random) and accepts a
        differing element when one of those runs produces the candidate's value there."""
        if self._index_ties(seed, variant, path, cand, positions):
            return True
        n = positions.numel()
        want = cand.reshape(-1)[positions]
        seen = torch.zeros(n, dtype=torch.bool, device=want.device)
        t_end = time.perf_counter() + 10.0
        for k in range(64):
            if time.perf_counter() > t_end:
                return False
            base = self._make(seed, variant)
            if not any(isinstance(t, torch.Tensor) and t.is_floating_point() for _, t in inputs.leaves(base)):
                return False
            torch.manual_seed(1234 + k)

            def perturb(t: torch.Tensor) -> torch.Tensor:
                if not t.is_floating_point() or t.numel() == 0:
                    return t
                eps = torch.finfo(t.dtype).eps * 4
                typical = float(t.abs().mean()) or 1.0
                return t + (t.abs() + typical) * eps * torch.randn_like(t)

            pert = [inputs.tree_map(perturb, x) for x in base]
            with torch.no_grad():
                out = self.model(*pert)
            vals = dict(inputs.leaves(out)).get(path)
            if not isinstance(vals, torch.Tensor) or vals.shape != cand.shape:
                return False
            seen |= vals.reshape(-1)[positions] == want
            if bool(seen.all()):
                return True
        return False

    def _index_ties(self, seed: int, variant: str, path: str, cand: torch.Tensor, positions: torch.Tensor) -> bool:
        """Index outputs (argmax, argmin, topk, sort): the candidate's indices are as right as the reference's
        when, along some dimension of some input, they pick elements equal to the ones the reference picks."""
        base = self._make(seed, variant)
        with torch.no_grad():
            ref = dict(inputs.leaves(self.model(*self._make(seed, variant)))).get(path)
        if not isinstance(ref, torch.Tensor) or ref.shape != cand.shape or ref.is_floating_point():
            return False
        ref_l, cand_l = ref.long(), cand.long()
        for _, x in inputs.leaves(base):
            if not isinstance(x, torch.Tensor) or x.dim() == 0:
                continue
            for d in range(x.dim()):
                shape = list(x.shape)
                if list(ref.shape) == shape[:d] + shape[d + 1:]:
                    r, c = ref_l.unsqueeze(d), cand_l.unsqueeze(d)  # argmax(dim=d)
                elif ref.dim() == x.dim() and all(a == b for i, (a, b) in enumerate(zip(ref.shape, shape)) if i != d):
                    r, c = ref_l, cand_l  # keepdim / topk / sort along d
                else:
                    continue
                n = shape[d]
                if int(c.min()) < 0 or int(c.max()) >= n or int(r.min()) < 0 or int(r.max()) >= n:
                    continue
                try:
                    vr, vc = x.gather(d, r), x.gather(d, c)
                except RuntimeError:
                    continue
                if same_values(vr, vc):
                    return True
        return False

    # -- timing the reference ---------------------------------------------------------------------------------------
    def time(self, args: dict) -> dict:
        which = args.get("which", "eager")
        fn = self.compiled if which == "compiled" else self.model
        if fn is None:
            raise ReferenceError_("torch.compile of the reference is not ready")
        ms: list[float] = []
        dev: list[float] = []
        with torch.no_grad():
            for seed in args["seeds"]:
                gen = self._make(int(seed), "task")
                self.flusher()
                if self.device.type == "cuda":
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    self._sync()
                    start.record()
                    fn(*gen)
                    end.record()
                    self._sync()
                    ms.append(start.elapsed_time(end))
                else:
                    t0 = time.perf_counter()
                    fn(*gen)
                    ms.append((time.perf_counter() - t0) * 1e3)
                dev.append(ms[-1])
                del gen
        return {"ok": True, "ms": ms}

    def compile(self, args: dict) -> dict:
        t0 = time.perf_counter()
        try:
            self.compiled = torch.compile(self.model)
            gen = self._make(secrets.randbits(31), "task")
            with torch.no_grad():
                self.compiled(*gen)
                self.compiled(*gen)
            self._sync()
        except Exception as e:  # noqa: BLE001  (no C++ compiler / triton: reported, never the candidate's fault)
            self.compiled = None
            return {"ok": True, "error": f"{type(e).__name__}: {str(e)[:200]}"}
        return {"ok": True, "seconds": time.perf_counter() - t0}

    def copy_cost(self, args: dict) -> dict:
        """How long copying the outputs takes on this device (the runner's collect step does such a copy)."""
        n = max(1, int(args.get("nbytes", 0)))
        a = torch.empty(n, dtype=torch.uint8, device=self.device)
        b = torch.empty_like(a)
        samples = []
        for _ in range(5):
            self._sync()
            t0 = time.perf_counter()
            b.copy_(a)
            self._sync()
            samples.append((time.perf_counter() - t0) * 1e3)
        del a, b
        samples.sort()
        return {"ok": True, "ms": samples[0]}

    def flush(self, args: dict) -> dict:
        self.flusher()
        self._sync()
        return {"ok": True}

    def release(self, args: dict) -> dict:
        self.kept = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return {"ok": True}

    def memory(self, args: dict) -> dict:
        if self.device.type != "cuda":
            return {"ok": True, "free": 0, "total": 0}
        free, total = torch.cuda.mem_get_info(self.device)
        return {"ok": True, "free": free, "total": total, "mine": torch.cuda.memory_reserved(self.device)}

    def roofline(self, args: dict) -> dict:
        """Bytes and FLOPs of one reference call (what it really reads and writes, FLOPs of matmuls/convs), and
        the lower bound on time they imply at the device's peak bandwidth and throughput."""
        from torch.utils.flop_counter import FlopCounterMode

        limits = args.get("limits") or {}
        gen = self._make(secrets.randbits(31), "task")
        tensors = [t for _, t in inputs.leaves(gen) if isinstance(t, torch.Tensor)]
        traffic = _Traffic(tensors)
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter, traffic.mode():
            out = self.model(*gen)
        self._sync()
        written = sum(t.numel() * t.element_size() for _, t in inputs.leaves(out) if isinstance(t, torch.Tensor))
        nbytes = traffic.bytes_read() + written
        flops = float(counter.get_total_flops())
        bw = float(limits.get("roofline_bandwidth_gbs") or limits.get("bandwidth_gbs") or 0)
        tf = float(limits.get("roofline_tflops") or limits.get("peak_tflops") or 0)
        t_mem = nbytes / (bw * 1e9) * 1e3 if bw else 0.0
        t_comp = flops / (tf * 1e12) * 1e3 if tf else 0.0
        return {"ok": True, "bytes": nbytes, "bytes_read": traffic.bytes_read(), "bytes_written": written,
                "flops": flops, "roofline_ms": max(t_mem, t_comp) or None,
                "bound": "compute" if t_comp > t_mem else "memory", "bandwidth_gbs": bw, "tflops": tf,
                "source": limits.get("roofline_source", "")}

    def summary(self, args: dict) -> dict:
        """What the reference's forward runs, by class (for the candidate's "is it a kernel?" check)."""
        from torch.profiler import ProfilerActivity, profile

        from ..shared.profiling import summarise

        gen = self._make(secrets.randbits(31), "task")
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        with torch.no_grad(), profile(activities=acts) as prof:
            self.model(*gen)
            self._sync()
        return {"ok": True, "summary": summarise(prof, self.device.type == "cuda")}


class _Traffic:
    """Bytes the reference really reads from its inputs (per input storage: the most any one operator reads of
    it; view operators read nothing) while it runs under a TorchDispatchMode."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        self.size = {}
        for t in tensors:
            st = t.untyped_storage()
            self.size[st.data_ptr()] = st.nbytes()
        self.read: dict[int, int] = {}

    def mode(self) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                out = func(*args, **(kwargs or {}))
                if not getattr(func, "is_view", False):
                    for _, a in inputs.leaves([list(args), dict(kwargs or {})]):
                        if isinstance(a, torch.Tensor):
                            try:
                                p = a.untyped_storage().data_ptr()
                            except (RuntimeError, NotImplementedError):
                                continue
                            if p in outer.size:
                                outer.read[p] = max(outer.read.get(p, 0), a.numel() * a.element_size())
                return out

        return Mode()

    def bytes_read(self) -> int:
        return sum(min(v, self.size[p]) for p, v in self.read.items())


class _indexer:
    """Numbers the tensor leaves of a structure as protocol.encode meets them."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, t: Any) -> int:
        self.n += 1
        return self.n - 1


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _esize(dtype: str) -> int:
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def _span_bytes(t: torch.Tensor) -> int:
    if t.is_contiguous() or t.numel() == 0:
        return t.numel() * t.element_size()
    span = 1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride()))
    return span * t.element_size()


def _some_finite(out: Any) -> bool:
    for _, v in inputs.leaves(out):
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()):
            if bool(torch.isfinite(v).any()):
                return True
        elif isinstance(v, torch.Tensor):
            return True
        elif isinstance(v, (int, float)) and v == v and abs(v) != float("inf"):
            return True
    return False
