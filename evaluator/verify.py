"""Worker side, stage "verify": is the candidate's output the reference's output?

What each trial does (trial t, seed = settings.seed + t):

1. Fresh inputs from `get_inputs()` under `torch.manual_seed(seed)`, moved to the device. Odd trials multiply
   every floating input by a positional ramp (0.5 … 2.0 along the flattened index) so that a kernel that
   computes only part of its output, or part of a reduction, changes the answer (bounded losses averaged over
   a batch otherwise barely move).
2. The reference and the candidate each get their own clones; a third clone stays pristine. Even trials give
   the candidate new tensor objects; odd trials refill the *same* tensors it got in the previous trial with the
   new values (same objects, same data pointers, new contents). Fresh allocations alone need not land on the
   same addresses, so the refill is what makes a candidate that caches results by tensor identity or pointer
   return stale values and fail, every time.
3. The reference runs first, then the freed memory is poisoned: blocks the size of each reference output
   (and one large block) are allocated, filled with NaN and freed, so the allocator hands the candidate memory
   full of NaN. An output element the candidate never writes stays NaN and fails the NaN check.
4. The candidate runs; the device is synchronised (all streams).
5. Checks: output structure, shape, dtype; NaN/Inf only where the reference has them; |c - r| <= atol_eff +
   rtol * |r| with atol_eff = atol * max|r| when the reference's outputs are small (max|r| < 1), so all-zero
   outputs cannot pass on tiny outputs (below 1e-7 the check is weak and a warning says so); the candidate's
   inputs unchanged when the reference leaves its own unchanged.
6. Precision (trial 0, fp32 outputs): the reference is also run in float64; if the candidate's error against
   it is more than 16x the fp32 reference's own error (and above 2e-6 relative), the verdict carries a
   "precision" warning: a silent fp16/bf16/TF32 downgrade passes a loose tolerance but is flagged.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

# dtype -> (atol, rtol) floors; fp32/fp64 use the settings as given.
DTYPE_TOLERANCE = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}
TINY_SCALE = 1e-7
PRECISION_RATIO = 16.0
PRECISION_FLOOR = 2e-6


class Mismatch(Exception):
    def __init__(self, message: str, **figures: Any) -> None:
        super().__init__(message)
        self.message = message
        self.figures = figures


def tree_map(fn: Callable[[Any], Any], x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(tree_map(fn, v) for v in x)
    if isinstance(x, dict):
        return {k: tree_map(fn, v) for k, v in x.items()}
    return x


def clone_tree(x: Any) -> Any:
    return tree_map(lambda t: t.detach().clone(), x)


def flatten_outputs(out: Any, prefix: str = "output") -> list[tuple[str, Any]]:
    if isinstance(out, (list, tuple)):
        items: list[tuple[str, Any]] = []
        for i, v in enumerate(out):
            items += flatten_outputs(v, f"{prefix}[{i}]")
        return items
    return [(prefix, out)]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ramp(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point() or t.numel() < 2:
        return t
    r = torch.linspace(0.5, 2.0, t.numel(), device=t.device, dtype=torch.float32).reshape(t.shape)
    return (t * r.to(t.dtype)).contiguous()


def make_inputs(get_inputs: Callable[[], Any], seed: int, device: torch.device, use_ramp: bool) -> list:
    """Fresh seeded inputs on `device`.

    `get_inputs()` runs with `device` as the default device, so `torch.rand(...)` draws directly on the GPU:
    KernelBench's inputs reach gigabytes, and drawing them on the CPU and copying took most of a verdict's time
    on the GPU. Tensors it creates on an explicit device are moved afterwards.
    """
    torch.manual_seed(seed)  # seeds the CPU and every CUDA generator
    with torch.device(device):
        inputs = list(get_inputs())
    inputs = [tree_map(lambda t: t.to(device), x) for x in inputs]
    if use_ramp:
        inputs = [tree_map(ramp, x) for x in inputs]
    return inputs


@contextlib.contextmanager
def nan_filled_allocations() -> Iterator[None]:
    """While the candidate runs, every `torch.empty*` (also `at::empty` / `torch::empty` in its extension) comes
    back filled with NaN (integers: their largest value), so an element it never writes cannot pass by holding
    leftover memory. This is torch's own `fill_uninitialized_memory`, active in deterministic mode; `warn_only`
    keeps ops without a deterministic implementation running (they warn). The allocator poisoning below stays as
    a second line for memory that does not come from torch's empty (e.g. raw cudaMalloc in a kernel)."""
    prev = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(prev, warn_only=prev_warn)
            torch.utils.deterministic.fill_uninitialized_memory = prev_fill


def poison(device: torch.device, sizes: list[int]) -> None:
    """Leave NaN in the blocks the allocator will hand out next (see the module docstring).

    Several blocks per output size soak up every free chunk of that size (on the CPU, glibc may hold a few that
    still contain input values), so whichever the candidate gets holds NaN.
    """
    per_size = 2 if device.type == "cuda" else 8
    budget = 4 << 30
    blocks = []
    for n in sizes:
        for _ in range(per_size):
            if n * len(blocks) > budget:
                break
            blocks.append(torch.empty(max(1, (n + 3) // 4), dtype=torch.float32, device=device))
    big = torch.empty(32 << 20 if device.type == "cuda" else 1 << 18, dtype=torch.float32, device=device)
    for b in blocks + [big]:
        b.fill_(float("nan"))
    sync(device)
    del blocks, big


def tolerance(dtype: torch.dtype, atol: float, rtol: float) -> tuple[float, float]:
    if dtype in DTYPE_TOLERANCE:
        a, r = DTYPE_TOLERANCE[dtype]
        return max(a, atol), max(r, rtol)
    return atol, rtol


def _where(name: str, shape: tuple, flat_index: int) -> str:
    if not shape:
        return name
    idx = []
    for dim in reversed(shape):
        idx.append(flat_index % dim)
        flat_index //= dim
    return f"{name}[{', '.join(str(i) for i in reversed(idx))}]"


def compare_one(name: str, r: Any, c: Any, atol: float, rtol: float, warnings: list[str]) -> dict:
    """Raise Mismatch on disagreement; return {max_abs, max_rel, where} on success."""
    if not isinstance(r, torch.Tensor):
        if isinstance(c, torch.Tensor):
            c = c.item() if c.numel() == 1 else c
        if isinstance(r, (int, float)) and isinstance(c, (int, float)):
            if not math.isclose(float(r), float(c), rel_tol=rtol, abs_tol=atol):
                raise Mismatch(f"{name}: expected {r}, got {c}", where=name)
            return {"max_abs": abs(float(r) - float(c)), "max_rel": 0.0, "where": name}
        if r != c:
            raise Mismatch(f"{name}: expected {r!r}, got {type(c).__name__} {c!r:.80}", where=name)
        return {"max_abs": 0.0, "max_rel": 0.0, "where": name}
    if not isinstance(c, torch.Tensor):
        raise Mismatch(f"{name}: expected a tensor, got {type(c).__name__}", where=name)
    if tuple(c.shape) != tuple(r.shape):
        raise Mismatch(f"{name}: shape {tuple(c.shape)}, expected {tuple(r.shape)}", where=name)
    if c.dtype != r.dtype:
        raise Mismatch(f"{name}: dtype {c.dtype}, expected {r.dtype}", where=name)
    if c.device != r.device:
        raise Mismatch(f"{name}: on {c.device}, expected {r.device}", where=name)
    if not r.is_floating_point() and not r.is_complex():
        bad = (c != r).flatten()
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise Mismatch(f"{name}: {int(bad.sum())} of {r.numel()} elements differ (first at "
                           f"{_where(name, tuple(r.shape), i)}: {c.flatten()[i].item()} vs {r.flatten()[i].item()})",
                           where=_where(name, tuple(r.shape), i))
        return {"max_abs": 0.0, "max_rel": 0.0, "where": name}
    atol, rtol = tolerance(r.dtype, atol, rtol)
    work = torch.float64 if r.dtype == torch.float64 else torch.float32  # fp32 keeps big outputs in memory
    r64, c64 = r.detach().to(work).flatten(), c.detach().to(work).flatten()
    shape = tuple(r.shape)
    rn, cn = torch.isnan(r64), torch.isnan(c64)
    if not torch.equal(rn, cn):
        i = int((rn != cn).nonzero()[0])
        what = "NaN" if bool(cn[i]) else "a number"
        n_unwritten = int((cn & ~rn).sum())
        hint = f" ({n_unwritten} NaN elements: unwritten output or NaN produced)" if n_unwritten else ""
        raise Mismatch(f"{name}: {what} at {_where(name, shape, i)} where the reference has "
                       f"{r64[i].item()}{hint}", where=_where(name, shape, i), max_abs_err=float("nan"))
    ri, ci = torch.isinf(r64), torch.isinf(c64)
    if not torch.equal(ri, ci) or not torch.equal(r64[ri], c64[ci]):
        i = int(((ri != ci) | (ri & (r64 != c64))).nonzero()[0])
        raise Mismatch(f"{name}: {c64[i].item()} at {_where(name, shape, i)} where the reference has "
                       f"{r64[i].item()}", where=_where(name, shape, i), max_abs_err=float("inf"))
    fin = ~(rn | ri)
    if not bool(fin.any()):
        return {"max_abs": 0.0, "max_rel": 0.0, "where": name}
    rf, cf = r64[fin], c64[fin]
    err = (cf - rf).abs()
    scale = float(rf.abs().max())
    atol_eff = atol
    if scale < TINY_SCALE:
        warnings.append(f"{name}: reference outputs are nearly zero (max |ref| = {scale:.2e}); the check is weak")
    elif scale < 1.0:
        atol_eff = atol * scale  # relative to the output's own scale: zeros cannot pass on tiny outputs
    allowed = atol_eff + rtol * rf.abs()
    over = err > allowed
    rel = err / rf.abs().clamp_min(max(atol_eff, 1e-30))
    worst = int(torch.argmax(err - allowed))
    full_idx = int(fin.nonzero()[worst])
    figures = {"max_abs": float(err.max()), "max_rel": float(rel.max()), "where": _where(name, shape, full_idx),
               "scale": scale, "norm_err": float(err.max()) / max(scale, 1e-30)}
    if bool(over.any()):
        n = int(over.sum())
        raise Mismatch(
            f"{name}: {n} of {r.numel()} elements outside atol={atol_eff:.1e} rtol={rtol:.1e}; max abs error "
            f"{figures['max_abs']:.3e}, worst at {figures['where']}: got {cf[worst].item():.6g}, expected "
            f"{rf[worst].item():.6g}" + (" (the output looks all zero)" if float(cf.abs().max()) == 0.0 else ""),
            max_abs_err=figures["max_abs"], max_rel_err=figures["max_rel"], where=figures["where"])
    return figures


def _refill(previous: list | None, inputs: list) -> list:
    """The candidate's inputs for this trial: the previous trial's tensor objects refilled in place with the new
    values when their structure, shapes and dtypes allow it, else fresh clones."""
    if previous is None or len(previous) != len(inputs):
        return clone_tree(inputs)
    pairs = [(flatten_outputs(p), flatten_outputs(n)) for p, n in zip(previous, inputs)]
    for ps, ns in pairs:
        if len(ps) != len(ns):
            return clone_tree(inputs)
        for (_, a), (_, b) in zip(ps, ns):
            if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
                return clone_tree(inputs)
            if isinstance(a, torch.Tensor) and (a.shape != b.shape or a.dtype != b.dtype or a.device != b.device
                                                or not a.is_contiguous() or a.stride() != b.stride()):
                return clone_tree(inputs)
            if not isinstance(a, torch.Tensor) and not _same_value(a, b):
                return clone_tree(inputs)
    with torch.no_grad():
        for ps, ns in pairs:
            for (_, a), (_, b) in zip(ps, ns):
                if isinstance(a, torch.Tensor):
                    a.copy_(b)
    return previous


def _same_value(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _changed(a: Any, b: Any) -> int | None:
    """Index of the first input that differs, or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        xs, ys = flatten_outputs(x), flatten_outputs(y)
        for (_, u), (_, v) in zip(xs, ys):
            if isinstance(u, torch.Tensor) and not torch.equal(u.nan_to_num(), v.nan_to_num()):
                return i
    return None


def _float64_reference(ref_model: torch.nn.Module, inputs: list) -> Any:
    m = copy.deepcopy(ref_model).double()
    args = [tree_map(lambda t: t.double() if t.is_floating_point() else t, clone_tree(x)) for x in inputs]
    with torch.no_grad():
        return m(*args)


def verify(ref_model: torch.nn.Module, cand_model: torch.nn.Module, get_inputs: Callable[[], Any],
           device: torch.device, trials: int, seed: int, atol: float, rtol: float,
           emit: Callable[[str, str], None] | None = None) -> dict:
    """Run the trials. Returns a dict with the Correctness fields plus "warnings" and "ok"."""
    warnings: list[str] = []
    res: dict[str, Any] = {"trials": trials, "passed": 0, "atol": atol, "rtol": rtol, "max_abs_err": 0.0,
                           "max_rel_err": 0.0, "where": "", "message": "", "failed_trial": None}
    previous_cand_in: list | None = None
    for t in range(trials):
        use_ramp = t % 2 == 1
        if t % 2 == 0:
            previous_cand_in = None  # even trials: new objects
        inputs = make_inputs(get_inputs, seed + t, device, use_ramp)
        ref_in, cand_in, pristine = clone_tree(inputs), _refill(previous_cand_in, inputs), clone_tree(inputs)
        del inputs
        with torch.no_grad():
            ref_out = ref_model(*ref_in)
        sync(device)
        ref_items = flatten_outputs(ref_out)
        if use_ramp and any(isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())
                            for _, v in ref_items):
            # the ramp pushed the reference out of its domain; fall back to plain inputs for this trial
            inputs = make_inputs(get_inputs, seed + t, device, False)
            ref_in, cand_in, pristine = clone_tree(inputs), _refill(previous_cand_in, inputs), clone_tree(inputs)
            with torch.no_grad():
                ref_out = ref_model(*ref_in)
            sync(device)
            ref_items = flatten_outputs(ref_out)
        refilled = cand_in is previous_cand_in
        ref_modifies = _changed(ref_in, pristine) is not None
        poison(device, [v.numel() * v.element_size() for _, v in ref_items if isinstance(v, torch.Tensor)])
        with torch.no_grad(), nan_filled_allocations():
            cand_out = cand_model(*cand_in)
        sync(device)
        cand_items = flatten_outputs(cand_out)
        try:
            if len(cand_items) != len(ref_items):
                raise Mismatch(f"output: {len(cand_items)} outputs, expected {len(ref_items)}", where="output")
            for (name, r), (_, c) in zip(ref_items, cand_items):
                fig = compare_one(name, r, c, atol, rtol, warnings)
                if fig["max_abs"] >= res["max_abs_err"]:
                    res["max_abs_err"], res["where"] = fig["max_abs"], fig["where"]
                res["max_rel_err"] = max(res["max_rel_err"], fig["max_rel"])
            if not ref_modifies:
                i = _changed(cand_in, pristine)
                if i is not None:
                    raise Mismatch(f"the candidate modified its input {i} in place (the reference does not)",
                                   where=f"input[{i}]")
        except Mismatch as m:
            how = ""
            if use_ramp:
                how = " (ramped inputs, refilled into the previous trial's tensors)" if refilled else " (ramped inputs)"
            res.update(failed_trial=t, message=f"trial {t}{how}: {m.message}")
            for k in ("max_abs_err", "max_rel_err", "where"):
                if k in m.figures:
                    res[k] = m.figures[k]
            res["warnings"] = _dedupe(warnings)
            res["ok"] = False
            return res
        if t == 0:
            _precision_check(ref_model, ref_items, cand_items, pristine, warnings)
        res["passed"] += 1
        if emit:
            emit("verify", f"trial {t + 1}/{trials} passed")
        previous_cand_in = cand_in
        del ref_out, cand_out, ref_items, cand_items, ref_in, pristine
    res["message"] = (f"{trials}/{trials} trials passed; max abs error {res['max_abs_err']:.2e}"
                      f" at {res['where']}")
    res["warnings"] = _dedupe(warnings)
    res["ok"] = True
    return res


def _precision_check(ref_model: torch.nn.Module, ref_items: list, cand_items: list, inputs: list,
                     warnings: list[str]) -> None:
    if not any(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for _, v in ref_items):
        return
    try:
        out64 = flatten_outputs(_float64_reference(ref_model, inputs))
    except Exception:  # the model cannot run in float64: no budget to compare against  # noqa: BLE001
        return
    for (name, r), (_, c), (_, r64) in zip(ref_items, cand_items, out64):
        if not (isinstance(r, torch.Tensor) and r.dtype == torch.float32 and isinstance(r64, torch.Tensor)):
            continue
        fin = torch.isfinite(r64) & torch.isfinite(r.double()) & torch.isfinite(c.double())
        if not bool(fin.any()):
            continue
        scale = max(float(r64[fin].abs().max()), 1e-30)
        e_ref = float((r.double() - r64)[fin].abs().max()) / scale
        e_cand = float((c.double() - r64)[fin].abs().max()) / scale
        if e_cand > max(PRECISION_RATIO * e_ref, PRECISION_FLOOR):
            warnings.append(
                f"precision: {name} error vs a float64 reference is {e_cand:.1e} (relative to its scale), "
                f"{e_cand / max(e_ref, 1e-12):.0f}x the fp32 reference's {e_ref:.1e}: the kernel may compute in "
                f"reduced precision (fp16/bf16/TF32)")


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
