"""Benchmark of the evaluator (not a test): how fast is candidate -> verdict?

Prints, in one run:
  1. cold candidate -> verdict (fast form: kernel-only .cu + PCH'd torch wrapper) and its compile stage,
     against a plain KernelBench-style load_inline (torch headers in the .cu) of the same kernel;
  2. cached candidate -> verdict (same source again: ninja up to date);
  3. best-of-8 wall (8 distinct cold candidates through evaluate_many) against one cold candidate;
  4. the spread of 5 repeated timings of one kernel ((max - min) / median of the 5 medians).
Goals (issue 3): <= 5 s median cold on level-1 kernels, <= 0.5 s cached, best-of-8 <= 1.3x one, spread <= 3%.

On a machine without a GPU it runs the same measurements with C++ (cpp_sources) candidates on the CPU.
Usage: python benchmarks/bench_evaluator.py [--device auto|cpu|cuda] [--n 8] [--cache DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator import EvalSettings, Evaluator

REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn({rows}, {cols})]

def get_init_inputs():
    return []
"""

FAST_CUDA = (ROOT / "evaluator" / "examples" / "fast_form_example.py").read_text()

KB_CUDA = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
// NONCE
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) { float v = x[i]; y[i] = v > 0.f ? v : 0.f; }
}
torch::Tensor relu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    int64_t blocks = (n + 255) / 256; if (blocks > 65535 * 8) blocks = 65535 * 8;
    relu_kernel<<<(unsigned)blocks, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_source = "torch::Tensor relu_forward(torch::Tensor x);"

relu_ext = load_inline(name="relu_kb", cpp_sources=cpp_source, cuda_sources=cuda_source,
                       functions=["relu_forward"], extra_cuda_cflags=["-O3"], verbose=False)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_forward(x)
'''

CPU_CPP = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
// NONCE
torch::Tensor relu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>(); float* py = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) py[i] = px[i] > 0.f ? px[i] : 0.f;
    return y;
}
"""

relu_ext = load_inline(name="relu_cpu", cpp_sources=cpp_source, functions=["relu_forward"],
                       no_implicit_headers=True, use_pch=USE_PCH, verbose=False)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_forward(x)
'''


def nonce(src: str) -> str:
    tag = uuid.uuid4().hex[:12]
    if "// NONCE" in src:
        return src.replace("// NONCE", f"// nonce {tag}")
    return src.replace('#include <cuda_runtime.h>\n', f'#include <cuda_runtime.h>\n// nonce {tag}\n', 1)


def plain_load_inline_seconds(src: str, cuda: bool) -> float:
    """A fresh process doing exactly what a plain KernelBench harness does: import the candidate (load_inline)."""
    with tempfile.TemporaryDirectory(prefix="bench-plain-") as d:
        path = Path(d) / "cand.py"
        path.write_text(src)
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(Path(d) / "ext"))
        code = textwrap.dedent(f"""
            import time, runpy
            import torch, torch.utils.cpp_extension
            t0 = time.perf_counter()
            runpy.run_path({str(path)!r})
            print(time.perf_counter() - t0)
        """)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)  # noqa: PLW1510
        if p.returncode != 0:
            print(p.stderr[-2000:], file=sys.stderr)
            return float("nan")
        return float(p.stdout.strip().splitlines()[-1])


def fmt(x: float) -> str:
    return f"{x:.2f} s"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n", type=int, default=8, help="candidates for best-of-n")
    ap.add_argument("--cold", type=int, default=3, help="cold single-candidate runs")
    ap.add_argument("--cache", default=None, help="build cache (default: a fresh temp folder)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip-plain", action="store_true")
    ap.add_argument("--skip-kb-eval", action="store_true", help="skip the KernelBench-form candidate via the evaluator")
    a = ap.parse_args()
    cache = a.cache or tempfile.mkdtemp(prefix="bench-cache-")
    settings = EvalSettings(device=a.device, cache_dir=cache, timing_calls=100, timing_budget_s=5.0,
                            time_compiled=True, compile_workers=0)
    results: dict = {}
    with Evaluator(settings) as ev:
        t0 = time.perf_counter()
        info = ev.device_info()
        on_gpu = ev.device.startswith("cuda")
        print(f"device: {info}  (start {time.perf_counter() - t0:.1f} s)", flush=True)
        results["device"] = info
        if on_gpu:
            ref = REF.format(rows=4096, cols=8192)
            fast, plain = FAST_CUDA, KB_CUDA
        else:
            ref = REF.format(rows=512, cols=1024)
            fast, plain = CPU_CPP.replace("USE_PCH", "True"), CPU_CPP.replace("USE_PCH", "False")
        # warm-up: the one-off precompiled header build and the workers' start, not counted
        t0 = time.perf_counter()
        v = ev.evaluate(ref, nonce(fast), time=False)
        print(f"warm-up (one-off PCH build, worker start): {fmt(time.perf_counter() - t0)} -> {v.status} "
              f"{v.message[:200]}", flush=True)
        if v.status != "correct":
            print(v.compiler_log or v.detail, flush=True)
        # 1. cold
        cold, cold_compile = [], []
        for _ in range(a.cold):
            t0 = time.perf_counter()
            v = ev.evaluate(ref, nonce(fast), time=False)
            cold.append(time.perf_counter() - t0)
            cold_compile.append(v.stage("compile").seconds if v.stage("compile") else float("nan"))
            print(f"  cold fast-form: {fmt(cold[-1])} (compile stage {fmt(cold_compile[-1])}) {v.status}", flush=True)
        results["cold_median_s"] = statistics.median(cold)
        results["cold_compile_median_s"] = statistics.median(cold_compile)
        # 2. cached
        src = nonce(fast)
        ev.evaluate(ref, src, time=False)
        cached = []
        for _ in range(3):
            t0 = time.perf_counter()
            v = ev.evaluate(ref, src, time=False)
            cached.append(time.perf_counter() - t0)
        results["cached_median_s"] = statistics.median(cached)
        results["cached_compile_stage_s"] = v.stage("compile").seconds
        results["cached_verify_stage_s"] = v.stage("verify").seconds
        print(f"  cached: {fmt(results['cached_median_s'])} (compile stage {fmt(v.stage('compile').seconds)}, "
              f"verify {fmt(v.stage('verify').seconds)})", flush=True)
        # plain KernelBench-style load_inline (cold, fresh process) and the same through the evaluator
        if not a.skip_plain:
            results["plain_kernelbench_load_inline_s"] = plain_load_inline_seconds(nonce(plain), on_gpu)
            print(f"  plain KernelBench-style load_inline (cold, fresh process): "
                  f"{fmt(results['plain_kernelbench_load_inline_s'])}", flush=True)
        if not a.skip_plain and not a.skip_kb_eval:
            t0 = time.perf_counter()
            v = ev.evaluate(ref, nonce(plain), time=False)
            results["kernelbench_form_via_evaluator_s"] = time.perf_counter() - t0
            print(f"  KernelBench-style candidate through the evaluator (cold): "
                  f"{fmt(results['kernelbench_form_via_evaluator_s'])} {v.status}", flush=True)
        # 3. best-of-n
        one_src = nonce(fast)
        t0 = time.perf_counter()
        ev.evaluate(ref, one_src, time=False)
        one = time.perf_counter() - t0
        srcs = [nonce(fast) for _ in range(a.n)]
        t0 = time.perf_counter()
        vs = ev.evaluate_many(ref, srcs, time=False)
        many = time.perf_counter() - t0
        results.update(one_full_s=one, best_of_n_s=many, best_of_n_ratio=many / one, n=a.n,
                       best_of_n_statuses=[v.status for v in vs])
        print(f"  one cold candidate (to a correctness verdict): {fmt(one)}; best-of-{a.n}: {fmt(many)} "
              f"-> {many / one:.2f}x  statuses={sorted(set(results['best_of_n_statuses']))}", flush=True)
        # 4. spread of repeated timings
        meds = []
        for _ in range(5):
            v = ev.evaluate(ref, one_src)
            if v.timing and v.timing.candidate:
                meds.append(v.timing.candidate.median_ms)
        if meds:
            spread = (max(meds) - min(meds)) / statistics.median(meds)
            results.update(timing_medians_ms=meds, spread=spread)
            t = v.timing
            print(f"  5 timings of one kernel: {[round(m, 4) for m in meds]} ms -> spread {spread * 100:.2f}%", flush=True)
            print(f"  last verdict: {v.message}; eager {t.eager.median_ms:.4g} ms, compiled "
                  f"{t.compiled.median_ms if t.compiled else float('nan'):.4g} ms, roofline {t.roofline_ms} ms "
                  f"({t.pct_of_limit and round(t.pct_of_limit, 1)}% of limit)", flush=True)
    goals = {"cold<=5s": results["cold_median_s"] <= 5.0, "cached<=0.5s": results["cached_median_s"] <= 0.5,
             "best_of_n<=1.3x": results["best_of_n_ratio"] <= 1.3, "spread<=3%": results.get("spread", 1) <= 0.03}
    results["goals"] = goals
    print("goals: " + ", ".join(f"{k} {'MET' if ok else 'missed'}" for k, ok in goals.items()), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
