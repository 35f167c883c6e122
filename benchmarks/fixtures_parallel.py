"""Every hand-written fixture kernel against its KernelBench reference, evaluated concurrently (not a test).

Compiles run in parallel on the evaluator's CPU compile workers while the GPU verifies one candidate at a time,
so this also fills the shared build cache for the GPU tests that follow. Prints one row per fixture.

    python benchmarks/fixtures_parallel.py [--threads 8] [--time]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import fixturelib

from evaluator import EvalSettings, Evaluator


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--time", action="store_true", help="also time (eager only)")
    args = ap.parse_args()
    kernels = sorted((ROOT / "tests" / "fixtures" / "kernels").glob("*/*.py"))
    cache = os.environ.get("KLSP_TEST_CACHE") or None
    settings = EvalSettings(device="auto", compile_timeout=600, run_timeout=600, time_compiled=False,
                            compile_workers=min(16, os.cpu_count() or 1), warm_workers=3,
                            **({"cache_dir": cache} if cache else {}))
    t0 = time.perf_counter()
    with Evaluator(settings) as ev:
        print("device:", ev.device_info(), flush=True)

        def one(path: Path):
            ref = fixturelib.fixture_reference(path)
            if ref is None:
                return path, None
            v = ev.evaluate(ref, path.read_text(), time=args.time)
            comp = next((s.seconds for s in v.stages if s.name == "compile"), 0.0)
            print(f"[{time.perf_counter() - t0:6.1f}s] {path.parent.name}/{path.stem}: {v.status}"
                  f" (compile {comp:.1f}s) {'' if v.ok else v.message[:160]}", flush=True)
            return path, v

        with ThreadPoolExecutor(args.threads) as pool:
            rows = list(pool.map(one, kernels))
    print("\n| fixture | status | max abs err | compile s | ms | × eager |\n|---|---|---|---|---|---|")
    ok = 0
    for path, v in rows:
        name = f"{path.parent.name}/{path.stem}"
        if v is None:
            print(f"| {name} | no reference | | | | |")
            continue
        ok += v.status == "correct"
        c = v.correctness
        comp = next((s.seconds for s in v.stages if s.name == "compile"), None)
        t = v.timing
        ms = t.candidate.median_ms if t and t.candidate else None
        print(f"| {name} | {v.status} | {c.max_abs_err if c and c.max_abs_err is not None else ''} | "
              f"{comp:.1f} | {'' if ms is None else f'{ms:.4f}'} | "
              f"{'' if not t or t.speedup_eager is None else f'{t.speedup_eager:.2f}'} |"
              + ("" if v.status == "correct" else f" {v.message[:200]}"))
    print(f"\n{ok}/{len(rows)} correct in {time.perf_counter() - t0:.0f} s wall")
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
