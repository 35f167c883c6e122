"""Where the timing stage's wall time goes (a diagnostic, not a test): one kernel evaluated a few times, every
request the device stage makes during its timing counted and timed from the evaluator's side.

    python benchmarks/timing_breakdown.py [--device auto|cpu|cuda] [--runs 3] [--verify-only]

Prints, per run, the time stage's seconds, its rounds and the calls per request, the speedup and its interval; then
each operation's count, total and mean over the runs (inclusive: `_candidate_request` contains its `_fill`). The
table is what to shorten first when a timing takes seconds for a kernel of a millisecond. `--verify-only`: the same
candidate again and again without timing (the editor's verdict on save, whose build is cached), each step of its
device stage counted.
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_evaluator as B  # noqa: E402

from evaluator import EvalSettings, Evaluator  # noqa: E402
from evaluator.processes import handle  # noqa: E402
from evaluator.stages.device import stage as S  # noqa: E402

ACC: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
SESSION_OPS = ("_referee", "_runner", "_freeze", "_thaw", "_clocked", "_fill", "_check", "_prepare", "_device_quiet",
               "_reference_request", "_harness", "_candidate_request", "_timed_loop", "_neighbours_since", "_probe",
               "_idle_checks", "_end_checks", "_time", "_load", "_admit", "_verify", "_profile", "_state", "run")
WORKER_OPS = ("freeze", "thaw", "processes", "stop_now", "cpu_ns")


def _counted(cls: type, name: str, label: str) -> None:
    f = getattr(cls, name)

    @functools.wraps(f)
    def g(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        t = time.perf_counter()
        try:
            return f(self, *a, **k)
        finally:
            key = label + (":" + a[0].name if name in ("_referee", "_runner") and a else "")
            ACC[key][0] += 1
            ACC[key][1] += time.perf_counter() - t

    setattr(cls, name, g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--verify-only", action="store_true", help="one cached candidate, not timed")
    a = ap.parse_args()
    for n in SESSION_OPS:
        if hasattr(S.DeviceStage, n):
            _counted(S.DeviceStage, n, n)
    for n in WORKER_OPS:
        if hasattr(handle.Worker, n):
            _counted(handle.Worker, n, "worker." + n)
    settings = EvalSettings(device=a.device, time_compiled=False, compile_workers=0, warm_workers=2)
    with Evaluator(settings) as ev:
        gpu = ev.device.startswith("cuda")
        ref = B.REF.format(rows=4096, cols=8192) if gpu else B.REF.format(rows=512, cols=1024)
        fast = B.FAST_CUDA if gpu else B.CPU_CPP
        ev.evaluate(ref, B.nonce(fast), time=False)  # compiled and the reference prepared, off the table
        ACC.clear()
        if a.verify_only:
            src = B.nonce(fast)
            ev.evaluate(ref, src, time=False)
            ACC.clear()
            for i in range(a.runs):
                t0 = time.perf_counter()
                v = ev.evaluate(ref, src, time=False)
                print(f"run {i}: {v.status} verdict {time.perf_counter() - t0:.2f} s: "
                      + ", ".join(f"{s.name} {s.seconds:.3f}" for s in v.stages), flush=True)
        for i in range(0 if a.verify_only else a.runs):
            t0 = time.perf_counter()
            v = ev.evaluate(ref, B.nonce(fast))
            st = v.stage("time")
            t = v.timing
            if t is None or t.candidate is None:
                print(f"run {i}: {v.status} {v.message[:200]}", flush=True)
                continue
            print(f"run {i}: {v.status} verdict {time.perf_counter() - t0:.2f} s, time stage "
                  f"{st.seconds if st else float('nan'):.2f} s, {t.candidate.calls} rounds of {t.batch_calls} calls, "
                  f"candidate {t.candidate.median_ms:.4g} ms ±{t.candidate.ci_pct} %, reference "
                  f"{t.eager.median_ms if t.eager else 0:.4g} ms, speedup {t.speedup_eager or 0:.3f} "
                  f"±{t.speedup_ci_pct} %{' (uncertain)' if t.uncertain else ''}", flush=True)
    print(f"\n{'operation (inclusive)':44s} {'count':>6s} {'total ms':>10s} {'mean ms':>9s}")
    for k, (c, s) in sorted(ACC.items(), key=lambda x: -x[1][1]):
        print(f"{k:44s} {int(c):6d} {s * 1e3:10.1f} {s / c * 1e3:9.2f}")


if __name__ == "__main__":
    main()
