"""Referee side: is the candidate's output the reference's output? (Runs in a process that never imports the
candidate; the candidate's outputs arrive as bytes in shared memory, its scalars as plain JSON values.)

Every structure is compared: tensors, tuples, lists, dicts, Python scalars, None. For tensors:

- shape and dtype must match;
- floating point: NaN and ±Inf only where the reference has them (NaN never passes otherwise), and elementwise
  |c - r| <= atol * T + rtol * |r|, where T is the output's typical magnitude: the median of |r| over its finite
  nonzero elements. Each element is judged against its own magnitude (rtol) and an absolute part in the units of
  the output (atol * T): an element near zero in a sum of large terms carries the rounding of those terms, about
  eps * sqrt(terms) * T for a reduction or a matmul (a valid reduction in another order differs there by far less
  than 1e-4 * T, and outputs much smaller than 1 never pass as zeros). A median, not a mean square or a maximum:
  a heavy-tailed output (exp of normal values: RMS 1e5 times its median) cannot lend its few huge elements'
  scale to the many small ones, so most of it cannot be wrong. Out-of-distribution trials compare only where the
  reference is finite, and an element the candidate gives a value where the reference overflowed is left to the
  float64 second opinion (a soft mismatch: it passes as before where there is none);
- an all-zero output never passes a reference that is not all zero, whatever the tolerance;
- complex: the same test on the complex difference (real and imaginary parts, no loss);
- integers and booleans: exact, except where the difference is a tie the reference itself breaks arbitrarily
  (the caller decides that, see `ties.py`, from reference runs on slightly perturbed inputs).

The second opinion (`against_exact`, on a floating mismatch) judges the candidate against the reference run in
float64 (the exact answer), element by element: an element passes within the tolerance of the fp32 reference or
of the exact answer, or within `multiple` times what fp32's rounding reached on this output, measured by the fp32
reference's own error against the exact answer: F * max(|e|, T), with F the largest of |r - e| / max(|e|, T)
over the elements where both the fp32 reference and the exact answer are finite (an absolute part for elements
near zero, relative to each element's magnitude above T: an elementwise op's floor is a few ulps of each element,
a reduction's the rounding of its terms). Where the fp32 reference overflows and the exact answer does not, only
the tolerance against the exact answer counts; a floor that is not finite allows nothing.

Work happens in chunks of at most CHUNK elements in float32 (float64 for float64 outputs), so checking a 6 GB
output needs tens of MB extra, never a full-size float64 copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

CHUNK = 1 << 24
EXACT_CHUNK = 1 << 22  # the second opinion works in float64, several temporaries a chunk
TYPICAL_SAMPLE = 1 << 22  # the typical magnitude of a larger output: the median of this many elements drawn at random
DTYPE_TOLERANCE = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


class Mismatch(Exception):
    def __init__(self, message: str, where: str = "", max_abs_err: float | None = None,
                 int_positions: torch.Tensor | None = None, soft: Figures | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.max_abs_err = max_abs_err
        self.int_positions = int_positions  # flat indices of differing integer elements (for the tie check)
        # out of distribution: every element the fp32 reference can judge passed (these figures); the candidate is
        # finite where the reference is not, which only the exact answer can judge (without one: passes)
        self.soft = soft


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


def typical(t: torch.Tensor) -> float:
    """The typical magnitude of an output: the median of |t| over its finite nonzero elements (over a fixed random
    sample of TYPICAL_SAMPLE of them for a larger output); 0.0 when it has none."""
    flat = t.reshape(-1)
    n = flat.numel()
    if n == 0:
        return 0.0
    if n > TYPICAL_SAMPLE:
        g = torch.Generator(device=flat.device)
        g.manual_seed(0x5EED)
        flat = flat[torch.randint(0, n, (TYPICAL_SAMPLE,), generator=g, device=flat.device)]
    a = flat.to(_work_dtype(t)).abs()
    a = a[torch.isfinite(a) & (a != 0)]
    return float(a.median()) if a.numel() else 0.0


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
    atol_set = atol
    atol, rtol = tolerance(r.dtype, atol, rtol)
    magnitude = typical(r)
    if not ood and not r.is_complex() and magnitude:
        fast = _passes(r, c, atol * magnitude, rtol, name)
        if fast is not None:
            return fast
    scale, _, ref_zero = _stats(r)
    atol_eff = atol * (magnitude or scale)  # (a sample of a huge, almost all-zero output may hold no nonzero)
    rflat, cflat = r.reshape(-1), c.reshape(-1)
    worst_excess, worst_i, worst_c, worst_r, n_over, cand_nonzero = -math.inf, -1, 0.0, 0.0, 0, False
    n_compared = n_unjudged = 0
    for s in _chunks(rflat.numel()):
        rc = rflat[s:s + CHUNK].to(_work_dtype(r))
        cc = cflat[s:s + CHUNK].to(_work_dtype(r))
        cand_nonzero = cand_nonzero or bool((cc != 0).any())
        rn, cn = torch.isnan(rc), torch.isnan(cc)
        ri, ci = torch.isinf(rc), torch.isinf(cc)
        if ood:
            keep = torch.isfinite(rc)
            n_unjudged += int((~keep & torch.isfinite(cc)).sum())
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
            f"{name}: {n_over} of {n_compared} elements outside the tolerance {atol_eff:.2g} + {rtol:.2g} x "
            f"|expected| ({_why_absolute(atol, atol_set, r.dtype, magnitude or scale, bool(magnitude))}); max abs "
            f"error {fig.max_abs:.3e}, worst at {fig.where}: got {_fmt(worst_c)}, expected {_fmt(worst_r)}",
            fig.where, fig.max_abs)
    if n_unjudged:
        raise Mismatch(f"{name}: {n_unjudged} elements finite where the reference is not", name, fig.max_abs,
                       soft=fig)
    return fig


def _passes(r: torch.Tensor, c: torch.Tensor, atol_eff: float, rtol: float, name: str) -> Figures | None:
    """The common case in one read of the device: a real floating output that passes. Every chunk's verdict and
    figures are computed on the device and read back once at the end (the element-by-element path below reads the
    device a dozen times a chunk, which on a GPU is most of a check's time). Returns the figures that path would
    return, or None wherever it would not pass (or anything is unusual): then that path decides, and says why."""
    wd = _work_dtype(r)
    rflat, cflat = r.reshape(-1), c.reshape(-1)
    rows = []
    for s in _chunks(rflat.numel()):
        rc = rflat[s:s + CHUNK].to(wd)
        cc = cflat[s:s + CHUNK].to(wd)
        rn, cn = torch.isnan(rc), torch.isnan(cc)
        ri, ci = torch.isinf(rc), torch.isinf(cc)
        odd = (rn != cn) | (ri != ci) | (ri & (rc != cc))  # NaN or Inf where the reference has none (or another)
        keep = ~(rn | ri)
        err = torch.where(keep, (cc - rc).abs(), 0.0)
        unfinite = keep & ~torch.isfinite(err)
        excess = torch.where(keep, err - (atol_eff + rtol * rc.abs()), -math.inf)
        j = torch.argmax(excess)
        rel = err / rc.abs().clamp_min(max(atol_eff, 1e-30))
        rows.append(torch.stack([
            (odd | unfinite).any().to(torch.float64), (excess > 0).any().to(torch.float64),
            keep.any().to(torch.float64), (cc != 0).any().to(torch.float64), (rflat[s:s + CHUNK] != 0).any()
            .to(torch.float64), err.max().to(torch.float64), torch.where(keep, rel, 0.0).max().to(torch.float64),
            excess[j].to(torch.float64), j.to(torch.float64)]))
        del rc, cc, rn, cn, ri, ci, odd, keep, err, unfinite, excess, rel
    if not rows:
        return None
    got = torch.stack(rows).tolist()
    fig = Figures(where=name)
    worst_excess, worst_i, compared, cand_nonzero, ref_nonzero = -math.inf, -1, False, False, False
    for k, (bad, over, kept, cnz, rnz, mx_abs, mx_rel, ex, j) in enumerate(got):
        if bad or over:
            return None
        cand_nonzero, ref_nonzero = cand_nonzero or bool(cnz), ref_nonzero or bool(rnz)
        if not kept:
            continue
        compared = True
        fig.max_abs = max(fig.max_abs, mx_abs)
        fig.max_rel = max(fig.max_rel, mx_rel)
        if ex > worst_excess:
            worst_excess, worst_i = ex, k * CHUNK + int(j)
    if ref_nonzero and not cand_nonzero:
        return None
    if compared:
        fig.where = where(name, tuple(r.shape), worst_i)
    return fig


def _why_absolute(atol: float, atol_set: float, dtype: torch.dtype, magnitude: float, median: bool) -> str:
    """Where the absolute part of the tolerance comes from, in words: atol is relative to the output's size."""
    raised = f", raised from {atol_set:g} for {str(dtype).replace('torch.', '')}" if atol != atol_set else ""
    what = ("the output's typical magnitude: the median of |expected| over its finite nonzero elements" if median
            else "the largest |expected|: the output has no finite nonzero element to take a median of")
    return f"the absolute part is atol {atol:g}{raised} times {magnitude:.3g}, {what}"


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


def _same_nonfinite(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: `a` is not finite and `b` is the same (NaN for NaN, the same infinity; complex: part by part)."""
    if a.is_complex():
        ar, br = torch.view_as_real(a), torch.view_as_real(b)
        same = ((torch.isnan(ar) & torch.isnan(br)) | (ar == br)).all(-1)
        return same & ~_finite(a)
    return (torch.isnan(a) & torch.isnan(b)) | (torch.isinf(a) & (a == b))


def _finite(t: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(t) if not t.is_complex() else torch.isfinite(t.real) & torch.isfinite(t.imag)


def against_exact(name: str, r: torch.Tensor, c: torch.Tensor, e: torch.Tensor, atol: float, rtol: float,
                  multiple: float, ood: bool = False) -> tuple[Figures, str]:
    """The second opinion (see the module's docstring): is `c` as right as fp32 allows, by the exact answer `e`
    (the reference run in float64, on the host or the device)? Returns the figures against the exact answer and a
    note saying what decided; raises Mismatch (its message starts "against the exact float64 answer") otherwise.

    Per element, it passes when it is within the tolerance of the fp32 reference `r`, or is the non-finite value `r`
    has; or within the tolerance of the exact answer; or, where both `r` and the exact answer are finite, within
    `multiple` times the fp32 reference's own error (F * max(|e|, T)); or the exact answer is not finite in the
    output's dtype and `c` has that value; out of distribution, where neither `r` nor the exact answer is finite, it
    is not judged, nor where `c` and `r` both are not."""
    if tuple(e.shape) != tuple(r.shape):
        raise Mismatch(f"{name}: the exact answer has shape {tuple(e.shape)}", name)
    atol, rtol = tolerance(r.dtype, atol, rtol)
    dev = e.device
    wd = torch.complex128 if (r.is_complex() or e.is_complex()) else torch.float64
    rf_, cf_, ef_ = r.reshape(-1), c.reshape(-1), e.reshape(-1)
    n = rf_.numel()
    t_r = typical(r) or _stats(r)[0]
    t_e = typical(e) or _stats(e)[0]
    tiny = 1e-300

    def chunk(s: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        rc = rf_[s:s + EXACT_CHUNK].to(dev)
        cc = cf_[s:s + EXACT_CHUNK].to(dev)
        ec = ef_[s:s + EXACT_CHUNK].to(wd)
        e_out = ec.to(r.dtype)  # the exact answer in the output's dtype: beyond its range, it is not finite
        return rc.to(wd), cc.to(wd), ec, _finite(e_out) & _finite(ec)

    # what fp32's rounding reached on this output: F = max |r - e| / max(|e|, T) where both are finite
    f_rel, f_abs, n_overflow = 0.0, 0.0, 0
    for s in range(0, n, EXACT_CHUNK):
        rc, _, ec, ef = chunk(s)
        rfin = _finite(rc)
        both = rfin & ef
        n_overflow += int((ef & ~rfin).sum())
        if bool(both.any()):
            d = (rc - ec).abs()[both]
            f_abs = max(f_abs, float(d.max()))
            f_rel = max(f_rel, float((d / ec.abs()[both].clamp_min(t_e).clamp_min(tiny)).max()))
    if not math.isfinite(f_rel):
        f_rel = 0.0  # a floor that is not finite allows nothing
    atol_r, atol_e = atol * t_r, atol * t_e

    fig = Figures(where=name)
    n_bad, n_floor, ratio_ok = 0, 0, 0.0
    worst_bad, bad_i, bad = -math.inf, -1, (0.0, 0.0, 0.0, math.nan, False)
    for s in range(0, n, EXACT_CHUNK):
        rc, cc, ec, ef = chunk(s)
        rfin, cfin = _finite(rc), _finite(cc)
        err = (cc - ec).abs()
        err = torch.where(ef & cfin, err, torch.zeros_like(err))
        ok = rfin & cfin & ((cc - rc).abs() <= atol_r + rtol * rc.abs())
        ok |= ~rfin & ~cfin & _same_nonfinite(cc, rc)
        ok |= ef & cfin & (err <= atol_e + rtol * ec.abs())
        ok |= ~ef & ~cfin & _same_nonfinite(cc, ec.to(r.dtype).to(wd))
        if ood:
            ok |= ~rfin & (~ef | ~cfin)
        reach = f_rel * ec.abs().clamp_min(t_e)  # the fp32 reference's floor at each element
        floor_ok = ~ok & ef & rfin & cfin & (err <= multiple * reach)
        if bool(floor_ok.any()):
            n_floor += int(floor_ok.sum())
            ratio_ok = max(ratio_ok, float((err[floor_ok] / reach[floor_ok]).max()))
        ok |= floor_ok
        judged = ef & cfin
        if bool(judged.any()):
            j = int(torch.argmax(err))
            if float(err[j]) >= fig.max_abs:
                fig.max_abs, fig.where = float(err[j]), where(name, tuple(r.shape), s + j)
        if not bool(ok.all()):
            badm = ~ok
            n_bad += int(badm.sum())
            # the worst: not finite where the exact answer is first, then the largest error over what is allowed
            allowed = torch.maximum(atol_e + rtol * ec.abs(), multiple * reach * rfin)
            score = torch.where(ef & cfin, err / allowed.clamp_min(tiny), torch.full_like(err, math.inf))
            score = torch.where(badm, score, torch.full_like(err, -1.0))
            j = int(torch.argmax(score))
            if float(score[j]) > worst_bad:
                worst_bad, bad_i = float(score[j]), s + j
                x = float(err[j] / reach[j]) if bool(rfin[j] & ef[j]) and float(reach[j]) > 0 else math.inf
                bad = (cc[j].item(), ec[j].item(), float(err[j]), x, (bool(ef[j]), bool(cfin[j]), bool(rfin[j])))
    over = (f"; the fp32 reference is not finite at {n_overflow} elements where the exact answer is: the tolerance "
            "alone decides there") if n_overflow else ""
    if n_bad:
        w = where(name, tuple(r.shape), bad_i)
        got, exact, err_b, x, (e_fin, c_fin, r_fin) = bad
        if not e_fin:
            there, err_b = "the exact answer is not finite there in the output's dtype", math.inf
        elif not c_fin:
            there, err_b = "not finite where the exact answer is", math.inf
        elif not r_fin:
            there = "the fp32 reference is not finite there"
        else:
            there = f"{x:.1f}x the fp32 reference's own error there" if math.isfinite(x) else \
                "the fp32 reference is exact there"
        raise Mismatch(f"against the exact float64 answer: {n_bad} of {n} elements outside both the tolerance and "
                       f"{multiple:g}x the fp32 reference's own error (worst at {w}: got {_fmt(got)}, exact "
                       f"{_fmt(exact)}, error {err_b:.2e}; {there}; allowed {multiple:g}x){over}",
                       w, err_b)
    if n_floor:
        return fig, (f"{name}: beyond fp32's reach on these inputs: error {fig.max_abs:.2e} against the exact float64 "
                     f"answer, at most {ratio_ok:.1f}x the fp32 reference's own error ({n_floor} elements beyond the "
                     f"tolerance; the fp32 reference's own error is up to {f_abs:.2e}; allowed: {multiple:g}x){over}")
    return fig, (f"{name}: within the tolerance against the exact float64 answer (max abs error {fig.max_abs:.2e}; "
                 f"the fp32 reference's own {f_abs:.2e}){over}")
