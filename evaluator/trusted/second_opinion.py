"""Trusted (the referee): the reference run in float64 (the exact answer), and the two judgements made against it.

- The second opinion on a failing trial (`second_opinion`): a floating output outside the tolerance passes when,
  element by element, it is within what fp32 itself can do on these inputs (compare.against_exact).
- The precision check (`precision`): the candidate's error against the exact answer next to the fp32 reference's
  own, so a silent fp16/bf16/TF32 downgrade is flagged (and fails a float32 task at PRECISION_FAIL).

The float64 run (`exact`) happens where its copies fit: on the device, else on the host; one that cannot run (no
float64 model, no memory) means no second opinion, never a failed referee.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from ..shared.tree import leaves, tree_map
from .compare import Figures, Mismatch, against_exact
from .layout import TaskShape

# The second opinion on a failing trial: an element passes when its error against the float64 answer is within
# this multiple of what the fp32 reference's own error reaches there (compare.against_exact). Two valid fp32
# orderings of the same computation differ by a few times that floor (bmm -> softmax -> bmm against torch's SDPA:
# 4.3x on inputs of normal values times 8, on an H200); a wrong kernel is off by orders of magnitude.
FLOOR_MULTIPLE = 8.0
# The float64 run of the reference (the second opinion, the precision check) runs where its float64 copies of the
# inputs, outputs and parameters fit in the memory free now with this much to spare: on the device, else on the host
# (and on the host after the device ran out of memory), where they may take 1/HOST_SHARE of what is available (the
# forward's own float64 intermediates are not known beforehand; an allocation that fails means no second opinion,
# never a failed referee).
SECOND_OPINION_MARGIN = 1 << 30
HOST_SHARE = 4
# A precision finding fails the trial (not only warns) at this multiple of the fp32 reference's own error (relative
# to the output's scale, the error taken as at least half an fp32 ulp there): valid fp32 kernels in another order
# are within 16x (pairwise against sequential sums of a million terms: a few hundred x); computing in fp16 or TF32
# (10-bit mantissas: 8192x fp32's rounding) or bf16 (65536x) is beyond it. Not for tasks that are themselves in
# fp16/bf16 or whose tolerance is set loose (>= PRECISION_LOOSE_TOL: the caller accepts reduced precision).
PRECISION_FAIL = 1000.0
PRECISION_LOOSE_TOL = 1e-3


def exact(model: Any, draw: Callable[[], list], device: torch.device, io_bytes: int) -> dict[str, Any] | None:
    """The reference's outputs computed in float64 on the inputs `draw` gives (None: it cannot run so, or not in
    the memory free). On the device where its float64 copies fit in what is free there (less SECOND_OPINION_MARGIN),
    else, or when the device runs out of memory, on the host; the tensors it returns may be on either."""
    params = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]) \
        if isinstance(model, torch.nn.Module) else 0
    need = 2 * (io_bytes + params)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if need + SECOND_OPINION_MARGIN <= free:
            try:
                return run64(model, draw, device)
            except torch.cuda.OutOfMemoryError:
                pass  # the intermediates did not fit: on the host
            except Exception:  # noqa: BLE001  (the model cannot run in float64: no second opinion)
                return None
            finally:
                torch.cuda.empty_cache()  # the float64 intermediates' memory back to the device
    if need * HOST_SHARE + SECOND_OPINION_MARGIN > host_available():
        return None
    try:
        return run64(model, draw, torch.device("cpu"))
    except Exception:  # noqa: BLE001  (it cannot run in float64 or on the host: no second opinion)
        return None


def run64(model: Any, draw: Callable[[], list], dev: torch.device) -> dict[str, Any]:
    m64 = model
    if isinstance(model, torch.nn.Module):
        m64 = copy.deepcopy(model).to(dev).double()
    args = [tree_map(lambda t: t.to(dev, torch.float64) if t.is_floating_point() else t.to(dev), x)
            for x in draw()]
    with torch.no_grad():
        out = dict(leaves(m64(*args)))
    del m64, args
    return {p: v for p, v in out.items() if isinstance(v, torch.Tensor) and v.dtype == torch.float64}


def second_opinion(name: str, m: Mismatch, r: Any, c: torch.Tensor, e: Any, ood: bool, atol: float,
                   rtol: float) -> tuple[Figures, str]:
    """A floating output outside the tolerance: is it beyond what fp32 itself can do on these inputs? The
    exact answer (float64) decides, element by element (compare.against_exact): within the tolerance of either
    answer, or within FLOOR_MULTIPLE times what the fp32 reference's own error reaches there, counted only where
    both the fp32 reference and the exact answer are finite (where fp32 overflows and float64 does not, the
    tolerance against the exact answer alone). Else the mismatch stands."""
    if not isinstance(r, torch.Tensor) or not (r.is_floating_point() or r.is_complex()) \
            or tuple(c.shape) != tuple(r.shape) or c.dtype != r.dtype:
        raise m
    if not isinstance(e, torch.Tensor):
        if m.soft is not None:  # out of distribution, elements only an exact answer could judge: as before
            return m.soft, (f"{name}: finite at elements where the fp32 reference is not, on an out-of-distribution "
                            "trial: not judged there (no float64 answer)")
        raise m
    try:
        fig, note = against_exact(name, r, c, e, atol, rtol, FLOOR_MULTIPLE, ood=ood)
    except Mismatch as x:
        raise Mismatch(f"{m.message}; {x.message}", x.where or m.where, x.max_abs_err) from None
    return fig, f"{note}; outside the tolerance against the fp32 reference ({m.message[:160]})"


def precision(ref_out: Any, outs: dict[str, torch.Tensor], exact_answer: Callable[[], dict[str, Any] | None], *,
              model: Any, shape: TaskShape, atol: float, rtol: float) -> list[str]:
    """The candidate's error against a float64 reference (`exact_answer`), next to the fp32 reference's own: a
    silent fp16/bf16/TF32 downgrade passes a loose tolerance but is flagged, and fails at PRECISION_FAIL times the
    fp32 reference's error unless the task is in fp16/bf16 or its tolerance is loose. Only for small problems
    (it needs float64 copies of the model, inputs and outputs)."""
    if shape.io_bytes > (256 << 20):
        return []
    want = [lf for lf in shape.outputs if lf.kind == "tensor" and lf.dtype == "float32"]
    if not want:
        return []
    r64 = exact_answer()
    if not r64:
        return []
    half = ("float16", "bfloat16")
    low = max(atol, rtol) >= PRECISION_LOOSE_TOL \
        or any(t.dtype in half for t in shape.inputs) \
        or any(lf.dtype in half for lf in shape.outputs) \
        or (isinstance(model, torch.nn.Module)
            and any(t.dtype in (torch.float16, torch.bfloat16)
                    for t in [*model.parameters(), *model.buffers()]))
    refs = dict(leaves(ref_out))
    warn = []
    for lf in want:
        r, e = refs.get(lf.path), r64.get(lf.path)
        if not isinstance(r, torch.Tensor) or not isinstance(e, torch.Tensor):
            continue
        e = e.to(r.device)
        c = outs[lf.path].double()
        fin = torch.isfinite(e) & torch.isfinite(r.double()) & torch.isfinite(c)
        if not bool(fin.any()):
            continue
        scale = max(float(e[fin].abs().max()), 1e-30)
        e_ref = float((r.double() - e)[fin].abs().max()) / scale
        e_cand = float((c - e)[fin].abs().max()) / scale
        if e_cand > max(16 * e_ref, 2e-6):
            msg = (f"precision: output{lf.path} error vs a float64 reference is {e_cand:.1e} (relative to its "
                   f"scale), {e_cand / max(e_ref, 1e-12):.0f}x the fp32 reference's {e_ref:.1e}: the kernel may "
                   "compute in reduced precision (fp16/bf16/TF32)")
            if not low and e_cand > PRECISION_FAIL * max(e_ref, 2.0 ** -24):
                raise Mismatch(f"{msg}; {PRECISION_FAIL:g}x the fp32 reference's error or more fails a float32 task",
                               f"output{lf.path}", e_cand * scale)
            warn.append(msg)
    return warn


def host_available() -> int:
    """Host memory this process may still take: MemAvailable, less under a cgroup (v2) memory limit."""
    avail = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
        if rel is not None:
            base = f"/sys/fs/cgroup{rel.rstrip('/')}"
            with open(f"{base}/memory.max") as f:
                limit = f.read().strip()
            if limit != "max":
                with open(f"{base}/memory.current") as f:
                    avail = min(avail, int(limit) - int(f.read().strip()))
    except (OSError, ValueError, IndexError):
        pass
    return max(avail, 0)
