"""Evaluator side: "is it a kernel?", decided from what ran (profiles), not from what the source looks like.

Inputs are the summaries of `profiling.summarise`: the candidate's forward split into its own code (custom) and
library operators by class, and the reference's operators by class. A ModelNew is `not_a_kernel` when

- none of its own code ran, or its own code is under 0.5 % of the call's time (a decoy over torch operators); or
- its library operators cover every class of work the reference does (gemm, conv, reduction, elementwise, ...)
  *and* take more of the compute time than its own code: the library repeats the reference's work (a C++
  wrapper returning `at::` ops, a decoy kernel over torch operators). A cuBLAS GEMM plus a custom epilogue does
  not cover the reference's elementwise tail, and a custom partial reduction finished by a small `torch.sum`
  spends most of its time in its own code: both stay kernels.

On the CPU, time inside the candidate's own functions includes the cost of calling them (argument conversion,
a few µs): for calls of well under a millisecond, a thin wrapper can look like a kernel.
"""

from __future__ import annotations

from typing import Any

DECOY_SHARE = 0.005
COVERED_SHARE = 0.5
REFERENCE_CLASS_MIN = 0.01  # a class of the reference's work counts when it has at least 1 % of its time


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%" if x >= 0.001 else f"{x * 100:.2f}%"


def judge(cand: dict[str, Any], ref: dict[str, Any] | None) -> tuple[bool, str, dict[str, Any]]:
    """(is a kernel, message, figures)."""
    custom = float(cand.get("custom_ms", 0.0))
    lib = {k: float(v) for k, v in (cand.get("library_ms") or {}).items() if v > 0}
    data = float(cand.get("data_ms", 0.0))
    lib_total = sum(lib.values())
    total = custom + lib_total + data
    share_all = custom / total if total > 0 else 0.0
    share_compute = custom / (custom + lib_total) if custom + lib_total > 0 else 0.0
    ref_lib = {k: float(v) for k, v in ((ref or {}).get("library_ms") or {}).items() if v > 0}
    ref_total = sum(ref_lib.values())
    ref_classes = {k for k, v in ref_lib.items() if ref_total and v / ref_total >= REFERENCE_CLASS_MIN}
    covered = bool(ref_classes) and ref_classes <= set(lib)
    top = ", ".join(f"{o['name']} {o['ms']:.3g} ms" for o in (cand.get("ops") or [])[:3])
    figures = {"custom_ms": custom, "library_ms": lib, "data_ms": data, "custom_share": share_all,
               "custom_share_of_compute": share_compute, "reference_classes": sorted(ref_classes),
               "covered": covered, "reference_ms": ref_total}
    shares = (f"its own code {_pct(share_all)} of the call's time ({custom:.3g} ms); library operators "
              f"{lib_total:.3g} ms" + (f" ({top})" if top else "") + (f", data movement {data:.3g} ms" if data else ""))
    if custom <= 0.0:
        return False, f"no custom kernel ran: {shares}", figures
    if share_all < DECOY_SHARE:
        return False, f"the custom kernels do almost nothing: {shares}", figures
    if covered and share_compute < COVERED_SHARE:
        return False, (f"library operators do the reference's work ({', '.join(sorted(ref_classes))}): "
                       f"{shares}"), figures
    return True, shares, figures
