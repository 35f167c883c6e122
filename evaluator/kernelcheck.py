"""Evaluator side: what the candidate's own code did, measured class by class against the reference's work.

Inputs are two summaries (profiles.py): the candidate's forward, split into its own code and library operators by
class (gemm, conv, attention, reduction, pool, elementwise; data movement apart), and the reference's. The outputs
were already found correct, so every class of the reference's work was done by somebody: when the candidate's
library calls do not do a class of it, its own code did. That is the finding `own_code`, whatever that class's
share of the time: a cuBLAS GEMM followed by one fused epilogue kernel (bias + activation) is the kernel a
KernelBench level-2 task asks for, even when the GEMM takes 99.7 % of the call, and an algebraic rewrite whose own
code does the work (a GEMM, a division, a sum and a scale as one small dot product) is its own code however
little time it takes.

The finding is `library_only` when

- none of its own code ran;
- its library operators do every class of the reference's work (the custom code, whatever it is, is not needed:
  a no-op decoy, a copy or identity of a result the library computed, a C++ wrapper returning `at::` ops);
- on the CPU, its binaries call library work past the dispatcher (`at::cpu::clamp_min`, `cblas_sgemm`), look
  code up by name at run time (`dlopen`, `dlsym`: any of those, with no import to show it), or switch the
  profiler's recording off (`at::enableRecordFunction`): the time of its own functions then holds library time no
  profiler event separates.
- on the CPU, the evaluator's sampling finds library work no profiler event shows (another package's code than
  PyTorch's, such as numpy; PyTorch's operators on a thread the candidate started) for at least COVER of the
  reference's time on the work left to its own code (`unevented_library`).

On the CPU the own code's time in the profile is the candidate process's claim (the runner runs the profiler: a
label it can read, a handler it can replace); `against_samples` holds it against the evaluator's own sampling of
the sandbox's threads (cpusampler.py). A claim many times what the samples found in the binaries the evaluator
built is library or interpreter work under its name: the finding is then `library_only`. Where threads started
during the call ran long enough to hold the claimed time, the finding is `not_checked`. Where the profile has no
event for its own code at all but the samples found its binaries at work (`unseen_own_ms`: a launcher called
through `ctypes` on a library `load_inline` built, which no wrapper of the runner's sees), the finding is judged on
the samples' figure alone: the evaluator's own measurement, not the candidate's claim.

A finding is never a gate: the candidate stays `correct`; the reward, the bench and the editor read the finding.

The reference's classes are every class with measurable work (not only the dominant one). A library class stands
in for a fused class of the reference when the reference has no such work of its own: GEMMs and reductions for
attention (both: GEMMs beside a custom softmax leave the attention's softmax to the candidate), GEMMs for a
convolution (an unfold + matmul convolution is the library's), GEMMs for a reduction (a row sum as a matrix-vector
product with ones is the library's).
"""

from __future__ import annotations

from typing import Any

from .binaries import RECORDING_CONTROLS, RUNTIME_LOOKUPS
from .verdict import KERNEL_NOT_CHECKED, LIBRARY_ONLY, OWN_CODE

COVER = 0.5  # ... or when its library spends at least half as long on a class of work as the reference (a reformulation)
SAMPLED_SLACK = 3.0  # the profile's own time (wall) may be this many times the sampled own time, plus this (the
SAMPLED_MARGIN_MS = 0.5  # sampled own time already counts a thread's time off the CPU that came back in its own
# code: a loop descheduled on a loaded machine; on the CI machine under the whole suite's load, valid kernels' claims
# were at most 0.96x of the samples' bound, a library call under its own name's 3.4-14x)
SAMPLES_AGREE, SAMPLES_CONTRADICT, SAMPLES_UNMEASURED = "agree", "contradict", "unmeasured"
# own code no profiler event covers (a call through ctypes) is timed by the samples alone from this many sampling
UNSEEN_MIN_BINS = 5  # periods of wall time with a thread in its own binaries; and a call sampled this many times
UNSEEN_WELL_SAMPLED = 100  # with none in its own binaries did not have its own code do the work
HIDDEN_SLACK = 2.0  # PyTorch's work on threads other than the calling one: each of the other CPUs may work this
# many times as long as the profiled library operators (a parallel operator's workers are on the CPU at most as long
# as the operator runs; twice that for clocks read apart)
DWARFS = 10.0  # ... or when its library spends ten times all of its own code's time on a class of the work
MEASURABLE_MS = 1e-3  # a class of the reference's work counts from 1 µs ...
MEASURABLE_SHARE = 1e-4  # ... and 0.01 % of its compute time
STANDS_IN = {"attention": ("gemm", "reduction"), "conv": ("gemm",), "reduction": ("gemm",)}
_PHRASE = {"gemm": "GEMM", "conv": "convolution", "attention": "attention", "reduction": "reduction",
           "pool": "pooling", "elementwise": "elementwise"}


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%" if x >= 0.001 else f"{x * 100:.2f}%"


def _names(ops: list[dict], cls: str, limit: int = 4) -> list[str]:
    """Base names of the operators of class `cls` ("aten::relu_" and "aten::relu.out" are "relu")."""
    out: list[str] = []
    for o in ops:
        if o.get("class") == cls:
            n = str(o.get("name", "")).split("::", 1)[-1].split(".", 1)[0].rstrip("_")
            if n and n not in out:
                out.append(n)
    return out[:limit]


def judge(cand: dict[str, Any], ref: dict[str, Any] | None) -> tuple[str, str, dict[str, Any]]:
    """(finding: OWN_CODE or LIBRARY_ONLY, message, figures)."""
    custom = float(cand.get("custom_ms", 0.0))
    lib = {k: float(v) for k, v in (cand.get("library_ms") or {}).items() if v > 0}
    data = float(cand.get("data_ms", 0.0))
    lib_total = sum(lib.values())
    total = custom + lib_total + data
    share_all = custom / total if total > 0 else 0.0
    share_compute = custom / (custom + lib_total) if custom + lib_total > 0 else 0.0
    ref_lib = {k: float(v) for k, v in ((ref or {}).get("library_ms") or {}).items() if v > 0}
    ref_total = sum(ref_lib.values())
    ref_classes = sorted(k for k, v in ref_lib.items() if v >= max(MEASURABLE_MS, MEASURABLE_SHARE * ref_total))

    cand_names = {c: set(_names(list(cand.get("library_ops") or cand.get("ops") or []), c, 1000))
                  for c in ref_classes}
    ref_ops = list((ref or {}).get("library_ops") or (ref or {}).get("ops") or [])

    def done_by_library(c: str) -> bool:
        """The library does class c of the reference's work: every operator the reference runs for it is among
        the candidate's library calls, or the library spends at least COVER of the reference's time on it (another
        formulation of the same work; stand-ins for a fused class included), or DWARFS times all of its own code's
        time (one fused library call for the reference's two: at::add with alpha for a * 2 + b)."""
        want = set(_names(ref_ops, c, 1000))
        if want and want <= cand_names.get(c, set()):
            return True
        t = lib.get(c, 0.0)
        stand_in = [d for d in STANDS_IN.get(c, ()) if d not in ref_classes]
        if stand_in and all(lib.get(d, 0.0) > 0 for d in stand_in):  # all of them: bmm + softmax is attention,
            t += sum(lib.get(d, 0.0) for d in stand_in)  # bmm beside a custom softmax is not
        return t >= COVER * ref_lib[c] or (t > 0 and t >= DWARFS * custom)

    left = [c for c in ref_classes if not done_by_library(c)]
    left_ms = sum(ref_lib[c] for c in left)
    kept = [c for c in ref_classes if c not in left]
    top = ", ".join(f"{o['name']} {o['ms']:.3g} ms" for o in (cand.get("ops") or [])[:3])
    shares = (f"its own code {_pct(share_all)} of the call's time ({custom:.3g} ms); library operators "
              f"{lib_total:.3g} ms" + (f" ({top})" if top else "") + (f", data movement {data:.3g} ms" if data else ""))
    figures = {"custom_ms": custom, "library_ms": lib, "data_ms": data, "custom_share": share_all,
               "custom_share_of_compute": share_compute, "reference_classes": ref_classes,
               "covered": bool(ref_classes) and not left, "reference_ms": ref_total, "replaced": left,
               "replaced_ms": left_ms}
    direct = list(cand.get("direct_calls") or [])
    if direct and not cand.get("on_device"):
        figures["custom_ms"] = 0.0
        lookups = [d for d in direct if d in RUNTIME_LOOKUPS]
        switches = [d for d in direct if d in RECORDING_CONTROLS]
        calls = [d for d in direct if d not in RUNTIME_LOOKUPS and d not in RECORDING_CONTROLS]
        how = []
        if calls:
            how.append(f"call library work past the dispatcher ({', '.join(calls[:4])}{', ...' if len(calls) > 4 else ''})")
        if lookups:
            how.append(f"look code up by name at run time ({', '.join(lookups)}), which reaches library work with no "
                       f"import to show it")
        if switches:
            how.append(f"switch the profiler's recording ({', '.join(switches)}), under which the operators they call "
                       f"record no event")
        return LIBRARY_ONLY, (f"its binaries {' and '.join(how)}; no profiler event separates that work from its own "
                              f"functions' time: none of that time is counted as its own: {shares}"), figures
    if custom <= 0.0:
        return LIBRARY_ONLY, f"none of its own code ran: {shares}", figures
    if not ref_classes:  # no reference work to compare with: its own code must at least do something
        if share_all < 0.005:
            return LIBRARY_ONLY, f"its own code does almost nothing of the call: {shares}", figures
        return OWN_CODE, f"its own code ran (the reference has no measurable work to compare with): {shares}", figures
    if not left:
        return LIBRARY_ONLY, (f"library operators do every class of the reference's work "
                              f"({', '.join(_PHRASE.get(c, c) for c in ref_classes)}); its own code is not needed "
                              f"for the result: {shares}"), figures
    what = []
    for c in left:
        names = _names(ref_ops, c)
        what.append(" + ".join(names) if names else _PHRASE.get(c, c))
    cand_ops = list(cand.get("library_ops") or cand.get("ops") or [])
    after = []
    for c in kept:
        names = _names(cand_ops, c, 2)
        after.append(f"library {_PHRASE.get(c, c)}" + (f" ({', '.join(names)})" if names else ""))
    message = (f"its own code does the reference's {' and '.join(_PHRASE.get(c, c) for c in left)} work "
               f"({'; '.join(what)}, {left_ms:.3g} ms in the reference)" + (f" beside {', '.join(after)}" if after
                                                                           else "") + f": {shares}")
    return OWN_CODE, message, figures


def unseen_own_ms(cand: dict[str, Any], tally: Any, calls: int) -> float:
    """CPU: its own code's time per call by the evaluator's sampling alone (0.0 when there is nothing to add), where
    the profile shows none of it: a call into its binaries the runner does not wrap (through `ctypes`, or a thread
    of its own) leaves no profiler event, yet the samples place the time in the binaries the evaluator built (and
    the C runtime they call), never in a library's or the interpreter's."""
    if float(cand.get("custom_ms", 0.0)) > 0.0 or tally is None:
        return 0.0
    if tally.own_bins < UNSEEN_MIN_BINS:  # a sample or two: too little to time
        return 0.0
    return tally.own_ms / max(1, calls)


def unseen_unmeasured(cand: dict[str, Any], tally: Any) -> str:
    """Where its library is called without a profiler event (`load_inline(is_python_module=False)`, through ctypes)
    and the profile has none of its own code: why its own code's time is not known ("" where it is: the samples
    timed it, or a well-sampled call found none of it)."""
    if float(cand.get("custom_ms", 0.0)) > 0.0:
        return ""
    if tally is None:
        return "its threads could not be sampled here"
    if tally.own_bins >= UNSEEN_MIN_BINS or (tally.own_bins == 0 and tally.samples >= UNSEEN_WELL_SAMPLED):
        return ""
    return (f"the calls were too short to time it by sampling ({tally.own} of {tally.samples} samples in its own "
            f"binaries)")


def unevented_library(finding: str, message: str, left_ms: float, tally: Any, calls: int,
                       evented_ms: float = 0.0, cpus: int = 1) -> tuple[str, str]:
    """CPU: an own-code finding held against library work the evaluator's sampling found where no profiler event
    shows it, so that the reference's work it did looks left to the candidate's own code (and a `not_checked` one
    whose own code's time could not be measured: library work that covers the work left to it did it all the same):

    - other packages' code than PyTorch's (numpy, the BLAS it bundles): no PyTorch operator runs there;
    - PyTorch's libraries on threads other than the calling one (a thread the candidate started: the profiler
      records the calling thread's operators), beyond what the profiled operators' own worker threads can have
      done (`evented_ms` a call of library and data-movement operators, on `cpus` CPUs, HIDDEN_SLACK times; that
      figure is the runner's claim, so it is held to SAMPLED_SLACK times the calling thread's sampled time in
      PyTorch's libraries, where its operators run: a profile claiming long operators buys no allowance);
    - processes that ended before the evaluator could read their mappings (a child forked for the call): what ran
      there cannot be told, so it is never its own code and counts as the library's.

    Where that library time is at least COVER of the reference's time on the work left to its own code
    (`left_ms`: as for a library operator, another formulation of the same work), the library did it:
    `library_only`. A few samples (numpy reading a shape) change nothing."""
    if tally is None or not (finding == OWN_CODE or (finding == KERNEL_NOT_CHECKED and left_ms > 0.0)):
        return finding, message
    period_ms = tally.period_ns / 1e6
    if tally.calling_library_ms is not None:  # the claim, no more than the calling thread was seen running them
        evented_ms = min(evented_ms, SAMPLED_SLACK * tally.calling_library_ms / max(1, calls))
    workers_ms = HIDDEN_SLACK * max(0, cpus - 1) * evented_ms * max(1, calls) + UNSEEN_MIN_BINS * period_ms
    side_ms = max(0.0, tally.side_library_ms - workers_ms)
    gone = tally.gone
    gone_ms = gone * period_ms if gone >= UNSEEN_MIN_BINS else 0.0
    hidden_ms = (tally.foreign_ms if tally.foreign >= UNSEEN_MIN_BINS else 0.0) + side_ms + gone_ms
    per_call = hidden_ms / max(1, calls)
    if per_call <= 0.0 or per_call < COVER * left_ms:
        return finding, message
    what = []
    if tally.foreign >= UNSEEN_MIN_BINS:
        top = ", ".join(f"{n} {c}" for n, c in sorted(tally.foreign_where().items(), key=lambda kv: -kv[1])[:3])
        what.append(f"{tally.foreign_ms / max(1, calls):.3g} ms a call in other packages' code than PyTorch's ({top})")
    if side_ms:
        what.append(f"{tally.side_library_ms / max(1, calls):.3g} ms a call in PyTorch's libraries on threads other "
                    f"than the one its profile records ({tally.side_library} samples), where its profiled operators' "
                    f"worker threads account for at most {workers_ms / max(1, calls):.3g}")
    if gone_ms:
        what.append(f"{gone_ms / max(1, calls):.3g} ms a call in processes that ended before the evaluator could see "
                    f"what code they ran ({gone} samples; never counted as its own code)")
    return LIBRARY_ONLY, (f"its threads spent {' and '.join(what)} (the evaluator's sampling): {per_call:.3g} ms a "
                          f"call of library work no profiler event shows, against {left_ms:.3g} ms of the "
                          f"reference's on the work its own code would have done. The profile said: {message}")


def against_samples(finding: str, message: str, cand: dict[str, Any], tally: Any,
                    calls: int) -> tuple[str, str, str]:
    """(finding, message, SAMPLES_*): the profile's own-code time over `calls` profiled calls against the
    evaluator's sampling of the same calls (a cpusampler.Tally)."""
    claim = float(cand.get("custom_ms", 0.0)) * max(1, calls)
    bound = tally.own_ms_upper()
    seen = (f"the evaluator's sampling of its threads: {tally.own_ms:.3g} ms in its own binaries and the C runtime "
            f"they call over {calls} calls ({tally.describe()})")
    if claim <= SAMPLED_SLACK * bound + SAMPLED_MARGIN_MS:
        return finding, f"{message}. Its own code's time agrees with {seen}", SAMPLES_AGREE
    if claim <= SAMPLED_SLACK * (bound + tally.unsampled_ms) + SAMPLED_MARGIN_MS:
        if finding == OWN_CODE:
            return KERNEL_NOT_CHECKED, (f"its own code's time could not be measured: its profile claims {claim:.3g} ms, "
                                        f"{seen}: the rest of its CPU time the sampling did not see (samples the "
                                        f"kernel dropped or throttled, time in the kernel). {message}"), SAMPLES_UNMEASURED
        return finding, f"{message}. {seen}", SAMPLES_UNMEASURED
    why = (f"its profile claims {claim:.3g} ms in its own code over {calls} calls, but {seen}: the work its profile "
           f"puts in its own code ran elsewhere (library or interpreter code under its name)")
    if finding == OWN_CODE:
        return LIBRARY_ONLY, f"{why}. The profile said: {message}", SAMPLES_CONTRADICT
    return finding, f"{message}. {why}", SAMPLES_CONTRADICT
