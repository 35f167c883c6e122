"""Referee side: is the candidate's output the reference's output? (Runs in a process that never imports the
candidate; the candidate's outputs arrive as bytes in shared memory, its scalars as plain JSON values.)

Every structure is compared: tensors, tuples, lists, dicts, Python scalars, None. For tensors:

- shape and dtype must match;
- floating point: NaN and ±Inf only where the reference has them (NaN never passes otherwise), and
  |c - r| <= atol_eff + rtol * |r| elementwise, where atol_eff = atol * max|r| when the reference's outputs are
  small (max|r| < 1), so a tolerance never lets small outputs pass as zeros, and atol * RMS(r) when they are
  large (an element near zero in a sum of large terms carries the rounding of those terms: a valid reduction in
  another order differs there by more than atol); out-of-distribution trials compare only where the reference
  is finite;
- an all-zero output never passes a reference that is not all zero, whatever the tolerance;
- complex: the same test on the complex difference (real and imaginary parts, no loss);
- integers and booleans: exact, except where the difference is a tie the reference itself breaks arbitrarily
  (the caller decides that, see `referee.py`, from reference runs on slightly perturbed inputs).

Work happens in chunks of at most CHUNK elements in float32 (float64 for float64 outputs), so checking a 6 GB
output needs tens of MB extra, never a full-size float64 copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

CHUNK = 1 << 24
DTYPE_TOLERANCE = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


class Mismatch(Exception):
    def __init__(self, message: str, where: str = "", max_abs_err: float | None = None,
                 int_positions: torch.Tensor | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.max_abs_err = max_abs_err
        self.int_positions = int_positions  # flat indices of differing integer elements (for the tie check)


@dataclass
class Figures:
    max_abs: float = 0.0
    max_rel: float = 0.0
    where: str = ""
    warnings: list[str] = field(default_factory=list)


def tolerance(dtype: torch.dtype, atol: float, rtol: float) -> tuple[float, float]:
    if dtype in DTYPE_TOLERANCE:
        a, r = DTYPE_TOLERANCE[dtype]
        return max(a, atol), max(r, rtol)
    if dtype in (torch.complex32,):
        return max(1e-2, atol), max(1e-2, rtol)
    return atol, rtol


def where(name: str, shape: tuple, flat_index: int) -> str:
    if not shape:
        return name
    idx = []
    for dim in reversed(shape):
        idx.append(flat_index % dim)
        flat_index //= dim
    return f"{name}[{', '.join(str(i) for i in reversed(idx))}]"


def _chunks(n: int) -> range:
    return range(0, n, CHUNK)


def _work_dtype(t: torch.Tensor) -> torch.dtype:
    if t.dtype in (torch.float64, torch.complex128):
        return torch.complex128 if t.is_complex() else torch.float64
    return torch.complex64 if t.is_complex() else torch.float32


def _stats(r: torch.Tensor) -> tuple[float, float, bool]:
    """(max |r| over finite elements, RMS over finite elements, all zero?) in chunks."""
    flat = r.reshape(-1)
    mx, ss, cnt, nonzero = 0.0, 0.0, 0, False
    for s in _chunks(flat.numel()):
        c = flat[s:s + CHUNK].to(_work_dtype(r)).abs()
        fin = torch.isfinite(c)
        if bool(fin.any()):
            cf = c[fin]
            mx = max(mx, float(cf.max()))
            ss += float((cf.double() ** 2).sum())
            cnt += int(fin.sum())
        nonzero = nonzero or bool((flat[s:s + CHUNK] != 0).any())
    return mx, math.sqrt(ss / cnt) if cnt else 0.0, not nonzero


def compare_tensor(name: str, r: torch.Tensor, c: torch.Tensor, atol: float, rtol: float,
                   ood: bool = False) -> Figures:
    if tuple(c.shape) != tuple(r.shape):
        raise Mismatch(f"{name}: shape {tuple(c.shape)}, expected {tuple(r.shape)}", name)
    if c.dtype != r.dtype:
        raise Mismatch(f"{name}: dtype {c.dtype}, expected {r.dtype}", name)
    shape = tuple(r.shape)
    fig = Figures(where=name)
    if not (r.is_floating_point() or r.is_complex()):
        bad = (c.reshape(-1) != r.reshape(-1))
        n = int(bad.sum())
        if n:
            pos = bad.nonzero().flatten()
            i = int(pos[0])
            raise Mismatch(f"{name}: {n} of {r.numel()} elements differ (first at {where(name, shape, i)}: "
                           f"{c.reshape(-1)[i].item()} vs {r.reshape(-1)[i].item()})", where(name, shape, i),
                           int_positions=pos)
        return fig
    atol, rtol = tolerance(r.dtype, atol, rtol)
    scale, rms, ref_zero = _stats(r)
    if ood or scale >= 1.0:
        atol_eff = atol * max(1.0, rms)
    else:
        atol_eff = atol * scale
    rflat, cflat = r.reshape(-1), c.reshape(-1)
    worst_excess, worst_i, worst_c, worst_r, n_over, cand_nonzero = -math.inf, -1, 0.0, 0.0, 0, False
    n_compared = 0
    for s in _chunks(rflat.numel()):
        rc = rflat[s:s + CHUNK].to(_work_dtype(r))
        cc = cflat[s:s + CHUNK].to(_work_dtype(r))
        cand_nonzero = cand_nonzero or bool((cc != 0).any())
        rn, cn = torch.isnan(rc), torch.isnan(cc)
        ri, ci = torch.isinf(rc), torch.isinf(cc)
        if ood:
            keep = torch.isfinite(rc)
        else:
            if not torch.equal(rn, cn):
                i = int((rn != cn).nonzero()[0])
                n_unwritten = int((cn & ~rn).sum())
                hint = f" ({n_unwritten} NaN elements: unwritten output or NaN produced)" if n_unwritten else ""
                what = "NaN" if bool(cn[i]) else "a number"
                raise Mismatch(f"{name}: {what} at {where(name, shape, s + i)} where the reference has "
                               f"{rc[i].item()}{hint}", where(name, shape, s + i), float("nan"))
            if not torch.equal(ri, ci) or not torch.equal(rc[ri], cc[ri]):
                i = int(((ri != ci) | (ri & (rc != cc))).nonzero()[0])
                raise Mismatch(f"{name}: {cc[i].item()} at {where(name, shape, s + i)} where the reference has "
                               f"{rc[i].item()}", where(name, shape, s + i), float("inf"))
            keep = ~(rn | ri)
        if not bool(keep.any()):
            continue
        idx = keep.nonzero().flatten() if not bool(keep.all()) else None
        rk = rc if idx is None else rc[idx]
        ck = cc if idx is None else cc[idx]
        err = (ck - rk).abs()
        if not bool(torch.isfinite(err).all()):  # ood: the candidate is NaN/Inf where the reference is finite
            j = int((~torch.isfinite(err)).nonzero()[0])
            i = j if idx is None else int(idx[j])
            raise Mismatch(f"{name}: {cc[i].item()} at {where(name, shape, s + i)} where the reference has "
                           f"{rc[i].item()}", where(name, shape, s + i), float("inf"))
        allowed = atol_eff + rtol * rk.abs()
        excess = err - allowed
        j = int(torch.argmax(excess))
        n_compared += rk.numel()
        n_over += int((excess > 0).sum())
        fig.max_abs = max(fig.max_abs, float(err.max()))
        fig.max_rel = max(fig.max_rel, float((err / rk.abs().clamp_min(max(atol_eff, 1e-30))).max()))
        if float(excess[j]) > worst_excess:
            worst_excess = float(excess[j])
            worst_i = s + (j if idx is None else int(idx[j]))
            worst_c, worst_r = ck[j].item(), rk[j].item()
    if n_compared:
        fig.where = where(name, shape, worst_i)
    if not ref_zero and not cand_nonzero and r.numel():
        raise Mismatch(f"{name}: the output is all zero; the reference's is not (max |ref| = {scale:.3g})",
                       name, scale)
    if n_over:
        raise Mismatch(
            f"{name}: {n_over} of {n_compared} elements outside atol={atol_eff:.1e} rtol={rtol:.1e}; max abs "
            f"error {fig.max_abs:.3e}, worst at {fig.where}: got {_fmt(worst_c)}, expected {_fmt(worst_r)}",
            fig.where, fig.max_abs)
    return fig


def _fmt(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def compare_scalar(name: str, r: Any, c: Any, atol: float, rtol: float) -> Figures:
    if isinstance(r, bool) or r is None or isinstance(r, str):
        if type(c) is not type(r) or c != r:
            raise Mismatch(f"{name}: expected {r!r}, got {c!r:.80}", name)
        return Figures(where=name)
    if isinstance(r, (int, float, complex)):
        if not isinstance(c, (int, float, complex)) or isinstance(c, bool):
            raise Mismatch(f"{name}: expected a number, got {type(c).__name__}", name)
        if isinstance(r, int) and not isinstance(r, bool) and isinstance(c, int):
            if r != c:
                raise Mismatch(f"{name}: expected {r}, got {c}", name)
            return Figures(where=name)
        rc, cc = complex(r), complex(c)
        if any(math.isnan(v) for v in (rc.real, rc.imag, cc.real, cc.imag)):
            if not (math.isnan(abs(rc)) and math.isnan(abs(cc))):
                raise Mismatch(f"{name}: expected {r}, got {c}", name)
            return Figures(where=name)
        err = abs(cc - rc)
        if not (err <= atol + rtol * abs(rc)) and not (rc == cc):
            raise Mismatch(f"{name}: expected {r}, got {c}", name, err)
        return Figures(max_abs=err if math.isfinite(err) else 0.0, where=name)
    raise Mismatch(f"{name}: cannot compare outputs of type {type(r).__name__}", name)


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal contents (NaN equals NaN), in chunks."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fa, fb = a.reshape(-1), b.reshape(-1)
    if a.element_size() in (1, 2, 4, 8) and not a.is_complex():
        view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        if a.dtype == torch.bool:
            view = torch.uint8
        for s in _chunks(fa.numel()):
            if not torch.equal(fa[s:s + CHUNK].view(view), fb[s:s + CHUNK].view(view)):
                return False
        return True
    return bool(torch.equal(fa, fb))


def error_against(exact: torch.Tensor, t: torch.Tensor) -> tuple[float, str]:
    """Max |t - exact| over the elements where `exact` (a float64 answer) is finite, in chunks; and "" or why `t`
    cannot be compared there (NaN or Inf where the exact answer is finite)."""
    e, f = exact.reshape(-1), t.reshape(-1)
    worst = 0.0
    for s in _chunks(e.numel()):
        ec = e[s:s + CHUNK].double()
        fc = f[s:s + CHUNK].double()
        fin = torch.isfinite(ec)
        if not bool(fin.any()):
            continue
        d = (fc - ec)[fin].abs()
        if not bool(torch.isfinite(d).all()):
            return float("inf"), "not finite where the exact answer is"
        worst = max(worst, float(d.max()))
    return worst, ""
