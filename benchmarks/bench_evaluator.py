"""Benchmark of the evaluator (not a test): the figures of the fast-oracle issue, in one run.

    python benchmarks/bench_evaluator.py [--device auto|cpu|cuda] [--n 8] [--json FILE] [--quick]

Prints each figure as soon as it is measured, and the table again at the end (also when interrupted: Ctrl-C or
SIGTERM print what was measured so far, no traceback):

  1. cold candidate, fast form (kernel-only .cu + PCH'd wrapper): compile stage, median and max of several
  2. cold candidate, KernelBench form (torch headers in cuda_sources): compile stage, and which path was taken
  3. the precompiled header: built in the background at start (seconds), before the first candidate needed it?
  4. cached candidate -> verdict (verification only), the worst of several runs
  4b. the referee's torch.compile of a reference: cold, and again from the shared compile cache by a new evaluator
  5. best-of-n cold (evaluate_many) against one cold candidate
  6. spread of 5 repeated timings of one kernel ((max - min) / median), and each median's confidence interval
  6b. a speedup to quote: five timings of a kernel over 0.1 ms a call, each interval, its rounds, its seconds
  7. memory: device memory per verdict against 3 x (inputs + outputs); two verdicts of a big task at once
  7b. squeeze (only when named): the same two at once on a device another process has filled but for one verdict's
     memory: both `correct`, neither waiting out its bound for the other
  8. roofline: % of the limit for a copy kernel (should land in 80-100 %) and a mean over a dimension (<= 100 %)
  9. the outside clock against in-process events: the oracle's median (the evaluator's clock around requests of
     N calls) beside the same kernel timed in this process with CUDA events around each call (perf_counter on the
     CPU), for kernels of known speed (issue 15: honest figures must not move, within 3 % on a GPU)

`--only a,b` runs some sections (cold, kb, cached, refcompile, bestofn, spread, quote, memory, squeeze, roofline,
clock); `--busy` keeps a second process busy on every core during the spread measurement (the CPU-under-load
repeatability of issue 17).

On a machine without a GPU the same measurements run with C++ candidates on the CPU (smaller problems; the
memory and roofline rows are GPU-only).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
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

MEAN_REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=1)

def get_inputs():
    return [torch.rand(128, 4096, 4095)]

def get_init_inputs():
    return []
"""

FAST_CUDA = (ROOT / "evaluator" / "examples" / "fast_form_example.py").read_text()
COPY_CUDA = FAST_CUDA.replace("y[i] = v > 0.f ? v : 0.f;", "y[i] = v;").replace("relu", "copyk")
COPY_REF = REF.replace("return torch.relu(x)", "return x.clone()")
assert COPY_CUDA != FAST_CUDA and "y[i] = v;" in COPY_CUDA

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

MEAN_CUDA = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <stdint.h>
// one thread per (batch, column): walks dim 1 (rows), coalesced across columns
__global__ void mean_dim1(const float* __restrict__ x, float* __restrict__ y, int64_t B, int64_t R, int64_t C) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t b = blockIdx.y;
    if (c >= C) return;
    const float* p = x + b * R * C + c;
    float acc = 0.f;
    for (int64_t r = 0; r < R; ++r) acc += p[r * C];
    y[b * C + c] = acc / (float)R;
}
extern "C" const char* mean_launch(const float* x, float* y, int64_t B, int64_t R, int64_t C, void* stream) {
    dim3 grid((unsigned)((C + 255) / 256), (unsigned)B);
    mean_dim1<<<grid, 256, 0, (cudaStream_t)stream>>>(x, y, B, R, C);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}
"""
cpp_source = r"""
#include <torch/extension.h>
extern "C" const char* mean_launch(const float* x, float* y, int64_t B, int64_t R, int64_t C, void* stream);
torch::Tensor mean1(torch::Tensor x, int64_t stream) {
    auto xc = x.contiguous();
    auto y = torch::empty({xc.size(0), xc.size(2)}, xc.options());
    const char* err = mean_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1), xc.size(2),
                                  reinterpret_cast<void*>(stream));
    TORCH_CHECK(err == nullptr, err ? err : "");
    return y;
}
"""
ext = load_inline(name="mean_dim1_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["mean1"],
                  no_implicit_headers=True, use_pch=True, verbose=False)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.mean1(x, torch.cuda.current_stream().cuda_stream)
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
                       no_implicit_headers=True, use_pch=True, verbose=False)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_forward(x)
'''

GOALS = {
    "cold_fast_compile_median_s": ("<=", 5.0), "cold_fast_compile_max_s": ("<=", 8.0),
    "cold_kb_compile_s": ("<=", 8.0), "cached_max_s": ("<=", 0.5), "best_of_n_ratio": ("<=", 1.3),
    "spread": ("<=", 0.03), "quote_ci_pct": ("<=", 2.0), "memory_ratio": ("<=", 3.0), "copy_pct_of_limit": ("between", (80.0, 100.0)),
    "mean_pct_of_limit": ("<=", 100.0), "clock_vs_events_relu": ("between", (0.97, 1.03)),
    "clock_vs_events_copy": ("between", (0.97, 1.03)), "clock_twin_speedup": ("between", (0.98, 1.02)),
}


def nonce(src: str, host: bool = True) -> str:
    """A fresh source (no verdict or build from a cache): new kernels and, with `host`, a new host unit too (the
    extension's name, which its bindings carry), so nothing of an earlier build is reused; without it, the same
    wrapper (a refinement or another sample that changes only its kernels)."""
    import re

    tag = uuid.uuid4().hex[:12]
    if host:
        src = re.sub(r'(load_inline\(\s*name\s*=\s*")(\w+)"', rf'\g<1>\g<2>_{tag}"', src, count=1)
    if "// NONCE" in src:
        return src.replace("// NONCE", f"// nonce {tag}")
    if "#include <cuda_runtime.h>\n" in src:
        return src.replace("#include <cuda_runtime.h>\n", f"#include <cuda_runtime.h>\n// nonce {tag}\n", 1)
    return f"{src}\n# nonce {tag}\n"  # Python only: a fresh source all the same (no verdict from a cache)


class Report:
    def __init__(self, path: str | None) -> None:
        self.results: dict = {}
        self.path = path

    def put(self, key: str, value: object, text: str = "") -> None:
        self.results[key] = value
        if text:
            print(f"  {text}", flush=True)
        if self.path:
            Path(self.path).write_text(json.dumps(self.results, indent=2, default=str))

    def table(self) -> None:
        print("\nfigure                                   measured          goal      ", flush=True)
        for key, (op, goal) in GOALS.items():
            v = self.results.get(key)
            if v is None:
                shown, ok = "not measured", ""
            else:
                shown = f"{v * 100:.1f} %" if key == "spread" else f"{v:.3g}"
                ok = ("MET" if (goal[0] <= v <= goal[1] if op == "between" else v <= goal)
                      else "missed")
            goal_s = f"{goal[0]:g}-{goal[1]:g}" if op == "between" else f"<= {goal * 100:g} %" if key == "spread" \
                else f"<= {goal:g}"
            print(f"{key:40s} {shown:>16s}  {goal_s:10s} {ok}", flush=True)


def in_process_median(ref_src: str, cand_src: str, calls: int = 60) -> float:
    """The candidate timed in this process the way the runner once did: fresh inputs every call, the caches
    flushed before it, CUDA events around it (perf_counter on the CPU). Our own example kernels only. On a GPU the
    input sets are made on the device beforehand: made on the host between calls, they left the device idle for
    long enough to slow its clocks, and the events measured a cold device (twice the outside clock's figure)."""
    import types

    import torch

    ref = types.ModuleType("bench_ref")
    exec(compile(ref_src, "reference.py", "exec"), ref.__dict__)  # noqa: S102
    cand = types.ModuleType("bench_cand")
    exec(compile(cand_src, "candidate.py", "exec"), cand.__dict__)  # noqa: S102
    gpu = torch.cuda.is_available()
    dev = torch.device("cuda" if gpu else "cpu")
    if not gpu:
        torch.set_num_threads(EvalSettings().threads())  # the workers' thread count
    model = cand.ModelNew(*ref.get_init_inputs()).to(dev)
    flush = torch.empty((torch.cuda.get_device_properties(0).L2_cache_size if gpu else 8 << 20) * 2 // 4,
                        device=dev)
    ms = []
    shapes = [(t.shape, t.dtype) for t in ref.get_inputs()]
    fresh = [[torch.randn(sh, device=dev).to(dt) for sh, dt in shapes] for _ in range(calls + 5)] if gpu else []
    with torch.no_grad():
        for i in range(calls + 5):
            x = fresh[i] if gpu else [t.to(dev) for t in ref.get_inputs()]
            flush.zero_()
            if gpu:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                a.record()
                model(*x)
                b.record()
                torch.cuda.synchronize()
                t = a.elapsed_time(b)
            else:
                t0 = time.perf_counter()
                model(*x)
                t = (time.perf_counter() - t0) * 1e3
            if i >= 5:
                ms.append(t)
    return statistics.median(ms)


def stage_s(v, name: str) -> float:
    st = v.stage(name)
    return st.seconds if st else float("nan")


def memory_sampler(stop: threading.Event, out: list[int]) -> None:
    """Peak device memory in use (all processes), from nvidia-smi, every 50 ms."""
    while not stop.is_set():
        try:
            p = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=5, check=False)
            out.append(int(p.stdout.strip().splitlines()[0]) << 20)
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            pass
        stop.wait(0.05)


def process_memory_sampler(stop: threading.Event, out: list[tuple[float, dict[int, int]]]) -> None:
    """Device memory of each process (NVML through nvidia-smi), every 50 ms, with the time it was read."""
    while not stop.is_set():
        try:
            p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=5, check=False)
            row = {}
            for line in p.stdout.strip().splitlines():
                pid, mib = (x.strip() for x in line.split(","))
                row[int(pid)] = int(mib) << 20
            out.append((time.monotonic(), row))
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        stop.wait(0.05)


def memory_timeline(apps: list[tuple[float, dict[int, int]]], t0: float, unit: int) -> None:
    """Where one verdict's device memory went: every process's share at the peak (in units of one tensor of the
    task), and the sum over time in half-second steps."""
    if not apps:
        return

    def who(pid: int) -> str:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace")[-60:]
        except OSError:
            return "?"

    names: dict[int, str] = {}
    for _, row in apps:
        for pid in row:
            if pid not in names:
                names[pid] = who(pid)
    t_peak, peak = max(apps, key=lambda a: sum(a[1].values()))
    print(f"    memory at the peak ({t_peak - t0:.1f} s in): " + "; ".join(
        f"pid {pid} {b / unit:.2f} tensors ({b / 2**30:.1f} GB) {names.get(pid, '?')}"
        for pid, b in sorted(peak.items(), key=lambda x: -x[1])), flush=True)
    steps: dict[int, float] = {}
    for t, row in apps:
        k = int((t - t0) / 0.5)
        steps[k] = max(steps.get(k, 0.0), sum(row.values()) / unit)
    print("    memory over time (tensors, per 0.5 s): " + " ".join(f"{k * 0.5:.1f}:{x:.2f}"
                                                              for k, x in sorted(steps.items())), flush=True)


def run(a: argparse.Namespace, rep: Report) -> None:
    cache = a.cache or tempfile.mkdtemp(prefix="bench-cache-")
    settings = EvalSettings(device=a.device, cache_dir=cache, time_compiled=False, compile_workers=0, warm_workers=2)
    t_start = time.perf_counter()
    only = set(filter(None, (a.only or "").split(","))) or None

    def want(section: str) -> bool:
        return only is None or section in only

    with Evaluator(settings) as ev:
        info = ev.device_info()
        on_gpu = ev.device.startswith("cuda")
        print(f"device: {info.get('name')}  (evaluator up in {time.perf_counter() - t_start:.1f} s)", flush=True)
        if on_gpu:
            ref = REF.format(rows=4096, cols=8192)
            fast = FAST_CUDA
        else:
            ref = REF.format(rows=512, cols=1024)
            fast = CPU_CPP
        if want("clock"):
            clock_section(ev, rep, on_gpu)
        src = nonce(fast)
        if want("cold"):
            cold_section(a, ev, rep, ref, fast)
        if on_gpu and want("kb"):
            v = ev.evaluate(ref, nonce(KB_CUDA), time=False)
            rep.put("cold_kb_compile_s", stage_s(v, "compile"),
                    f"cold KernelBench form: compile stage {stage_s(v, 'compile'):.2f} s -> {v.status}; "
                    f"{v.stage('compile').message if v.stage('compile') else ''}")
        if want("cached"):
            cached_section(ev, rep, ref, src)
        if want("refcompile"):
            reference_compile_section(a, on_gpu, rep)
        if want("bestofn"):
            best_of_n_section(a, ev, rep, ref, fast)
        if want("spread"):
            spread_section(a, ev, rep, ref, src)
        if on_gpu and want("quote"):
            quote_section(ev, rep, fast)
        if not on_gpu:
            return
        if want("memory"):
            memory_section(ev, rep, fast, settings.cache_dir)
        if only is not None and "squeeze" in only:  # fills the device: only when named
            squeeze_section(rep, fast, settings.cache_dir, a.squeeze_free_gb)
        if want("roofline"):
            roofline_section(ev, rep)


def clock_section(ev: Evaluator, rep: Report, on_gpu: bool) -> None:
    """9. The oracle's outside-clock median beside in-process events, for kernels of known speed."""
    pairs = [("relu", REF.format(rows=4096, cols=8192) if on_gpu else REF.format(rows=512, cols=1024),
              FAST_CUDA if on_gpu else CPU_CPP)]
    if on_gpu:
        pairs.append(("copy", COPY_REF.format(rows=4096, cols=8192), COPY_CUDA))
    # the reference's own code as the candidate: the same work on both sides of the clock, so its speedup is the
    # clock's symmetry (1.00 when both sides' requests cost the same beyond their calls)
    twin = pairs[0][1].replace("class Model(", "class ModelNew(")
    pairs += [("twin", pairs[0][1], twin)] * (3 if on_gpu else 1)
    twins: list[float] = []
    for name, ref, cand in pairs:
        src = nonce(cand)
        t0 = time.perf_counter()
        v = ev.evaluate(ref, src)
        t_stage = stage_s(v, "time")
        if not (v.timing and v.timing.candidate):
            print(f"  clock {name}: {v.status} {v.message[:200]}", flush=True)
            continue
        outside = v.timing.candidate.median_ms
        events = in_process_median(ref, src)
        rep.put(f"clock_vs_events_{name}", outside / events,
                f"{name}: the oracle's outside clock {outside:.4g} ms/call (requests of {v.timing.batch_calls} calls, "
                f"+-{v.timing.candidate.ci_pct} %) vs in-process {'events' if on_gpu else 'perf_counter'} "
                f"{events:.4g} ms -> {outside / events:.3f}; time stage {t_stage:.2f} s; verdict "
                f"{time.perf_counter() - t0:.1f} s; {v.message[:120]}")
        if name == "twin" and v.timing.speedup_eager:
            twins.append(v.timing.speedup_eager)
            rep.put("clock_twin_speedup", statistics.median(twins),
                    f"twin: the reference's own code as the candidate: {v.timing.speedup_eager:.3f}x eager "
                    f"(+-{v.timing.speedup_ci_pct or 0:.1f} %; 1.00 when the clock treats both sides alike); "
                    f"median of {len(twins)}: {statistics.median(twins):.3f}")


def cold_section(a: argparse.Namespace, ev: Evaluator, rep: Report, ref: str, fast: str) -> None:
    # 1. cold, fast form (the first one also waits for the background PCH build, if one is running)
    cold = []
    for i in range(a.cold + 1):
        v = ev.evaluate(ref, nonce(fast), time=False)
        secs = stage_s(v, "compile")
        print(f"  cold fast form #{i}: compile stage {secs:.2f} s, verdict {v.seconds:.2f} s -> {v.status}"
              f" ({v.stage('compile').message if v.stage('compile') else ''})", flush=True)
        if i == 0:
            rep.put("first_cold_compile_s", secs)
            continue
        cold.append(secs)
    rep.put("cold_fast_compile_median_s", statistics.median(cold),
            f"cold fast form: compile stage median {statistics.median(cold):.2f} s, max {max(cold):.2f} s")
    rep.put("cold_fast_compile_max_s", max(cold))
    # the same wrapper, new kernels (a refinement, or samples that differ in their kernels): its host unit was built
    # (a CUDA form only: a C++ candidate's kernels are its host unit)
    wrapper = nonce(fast)
    same = []
    if "cuda_sources=" in fast:
        ev.evaluate(ref, wrapper, time=False)
    for i in range(2 if "cuda_sources=" in fast else 0):
        v = ev.evaluate(ref, nonce(wrapper, host=False), time=False)
        same.append(stage_s(v, "compile"))
        print(f"  new kernels, same wrapper #{i}: compile stage {same[-1]:.2f} s -> {v.status}"
              f" ({v.stage('compile').message if v.stage('compile') else ''})", flush=True)
    if same:
        rep.put("same_wrapper_compile_s", max(same),
                f"new kernels behind a wrapper already built: compile stage "
                f"{', '.join(f'{x:.2f}' for x in same)} s (cold {statistics.median(cold):.2f} s)")
    pch = getattr(ev, "pch_status", {})
    rep.put("pch", pch, f"precompiled header: {pch}")


def cached_section(ev: Evaluator, rep: Report, ref: str, src: str) -> None:
    # 4. cached
    ev.evaluate(ref, src, time=False)
    cached = []
    for i in range(5):
        t0 = time.perf_counter()
        v = ev.evaluate(ref, src, time=False)
        cached.append(time.perf_counter() - t0)
        comp = v.stage("compile")
        print(f"    cached #{i}: {cached[-1]:.2f} s -> {v.status}: "
              + ", ".join(f"{st.name} {st.seconds:.2f}" for st in v.stages)
              + f" ({comp.message[-160:] if comp else ''})", flush=True)
    rep.put("cached_max_s", max(cached),
            f"cached -> verdict: {', '.join(f'{c:.2f}' for c in cached)} s (compile stage "
            f"{stage_s(v, 'compile'):.2f} s, verify {stage_s(v, 'verify'):.2f} s, profile "
            f"{stage_s(v, 'profile'):.2f} s) -> {v.status}")
    runner_start(ev, rep)


REF_LINEAR = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 0.5 + 1.0

def get_inputs():
    return [torch.randn({rows}, {n})]

def get_init_inputs():
    return [{n}]
"""


def reference_compile_section(a: argparse.Namespace, on_gpu: bool, rep: Report) -> None:
    """4b. The referee's torch.compile of a reference (what a candidate's torch.compile speedup is timed
    against): cold, then by a new evaluator's referee with the shared compile cache the first one filled (an
    edit, an eviction, the next session or sweep), each in an evaluator of its own."""
    ref = REF_LINEAR.format(rows=4096 if on_gpu else 256, n=4096 if on_gpu else 512)
    cache = tempfile.mkdtemp(prefix="bench-refcompile-")
    secs, own = [], []
    for _ in range(2):
        with Evaluator(EvalSettings(device=a.device, cache_dir=cache, time_compiled=True,
                                    compile_reference_ahead=True, compile_workers=0, warm_workers=1)) as e:
            e.profile(ref)
            h = next(iter(e._referees._kept.values()))
            t0 = time.perf_counter()
            while not (h.compiled or h.compile_error) and time.perf_counter() - t0 < 300:
                time.sleep(0.05)
            # from the profile's end (the compile starts then, in the background) to the compiled reference
            secs.append(time.perf_counter() - t0 if h.compiled else float("nan"))
            own.append(h.compile_s if h.compiled else float("nan"))
    rep.put("reference_compile_cached_s", own[1],
            f"the referee's torch.compile of a Linear+ReLU reference (its own clock; from the profile's end): cold "
            f"{own[0]:.2f} s ({secs[0]:.2f} s), a new evaluator's referee with the shared compile cache {own[1]:.2f} s "
            f"({secs[1]:.2f} s): {own[0] / own[1]:.1f}x")


def runner_start(ev: Evaluator, rep: Report) -> None:
    """Where a fresh runner's start goes (what a verdict waits for when no spare is ready): one started alone."""
    from evaluator.processes.handle import Worker

    pool = getattr(ev, "_runners", None)
    if pool is None:
        return
    w = Worker(pool.spec)
    t0 = time.perf_counter()
    try:
        r = w.wait_ready()
    finally:
        w.kill()
    secs = time.perf_counter() - t0
    parts = ", ".join(f"{k} {v:.2f}" for k, v in r.startup_phases.items() if k != "total")
    rep.put("runner_start_s", secs, f"a runner's start alone: {secs:.2f} s from spawn to ready (in it: {parts}; "
                                    f"total {r.startup_s:.2f} s; torch's bytecode: {r.bytecode or '?'})")


def best_of_n_section(a: argparse.Namespace, ev: Evaluator, rep: Report, ref: str, fast: str) -> None:
    """5. Best-of-n cold (timed, as the engine runs it) against one cold candidate, and each stage's share: every
    candidate with a wrapper of its own (nothing shared), then n candidates that share one wrapper and differ in their
    kernels (as samples of one model often do). A cold candidate of the task is evaluated first, untimed, so neither
    figure carries what only the first verdict of a process or a task pays (the precompiled header, the reference
    prepared and profiled)."""
    ev.evaluate(ref, nonce(fast), time=False)
    t0 = time.perf_counter()
    ev.evaluate(ref, nonce(fast))
    one = time.perf_counter() - t0
    wrapper = nonce(fast)
    for key, srcs, what in (("best_of_n_ratio", [nonce(fast) for _ in range(a.n)], "each with its own wrapper"),
                            ("best_of_n_shared_ratio", [nonce(wrapper, host=False) for _ in range(a.n)],
                             "one wrapper, new kernels"))[:2 if "cuda_sources=" in fast else 1]:
        t0 = time.perf_counter()
        vs = ev.evaluate_many(ref, srcs)
        many = time.perf_counter() - t0
        shares: dict[str, float] = {}
        for v in vs:
            for st in v.stages:
                shares[st.name] = shares.get(st.name, 0.0) + st.seconds
        waited = [float(m.group(1)) for v in vs for st in v.stages if st.name == "compile"
                  for m in [__import__("re").search(r"waited ([0-9.]+) s for the device", st.message)] if m]
        stopped = sum(1 for v in vs if v.timing and v.timing.stopped)
        rep.put(key, many / one,
                f"best-of-{a.n} cold ({what}), timed: {many:.2f} s against one cold {one:.2f} s -> "
                f"{many / one:.2f}x ({sorted({v.status for v in vs})}); stage seconds summed over the {a.n} (share of "
                f"{a.n} x wall): " + ", ".join(f"{k} {t:.1f} s ({t / (a.n * many) * 100:.0f} %)"
                                               for k, t in shares.items())
                + f"; waited for the device {sum(waited):.1f} s in all; {stopped} stopped timing early")


def spread_section(a: argparse.Namespace, ev: Evaluator, rep: Report, ref: str, src: str) -> None:
    """6. Five evaluations of one kernel: the spread of their medians and of their speedups, and the uncertainty
    each verdict shows (with `--busy`, a second process keeps every core busy meanwhile)."""
    hogs = []
    if a.busy:
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        meds, sps, shown = [], [], []
        for _ in range(5):
            v = ev.evaluate(ref, src)
            if v.timing and v.timing.candidate:
                t = v.timing
                meds.append(t.candidate.median_ms)
                sps.append(t.speedup_eager)
                shown.append(f"{t.speedup_eager:.2f}x" + (f" +-{t.speedup_ci_pct:.0f}% (uncertain)" if t.uncertain
                                                          else f" +-{t.speedup_ci_pct or 0:.1f}%"))
    finally:
        for h in hogs:
            h.kill()
    if meds:
        spread = (max(meds) - min(meds)) / statistics.median(meds)
        sp_spread = (max(sps) - min(sps)) / statistics.median(sps)
        rep.put("spread", spread, f"5 timings of one kernel{' (busy machine)' if a.busy else ''}: "
                                  f"{[round(m, 4) for m in meds]} ms -> spread {spread * 100:.2f} %; speedups "
                                  f"{shown} -> spread {sp_spread * 100:.1f} %")
        rep.put("speedup_spread", sp_spread)


def quote_section(ev: Evaluator, rep: Report, fast: str) -> None:
    """6b. A speedup you can quote: five timings of a kernel of over 0.1 ms a call (ReLU over 8192 x 8192), each
    with its interval, its rounds and its time stage's seconds (the goal: ± 2 % within 3 s of timing)."""
    ref = REF.format(rows=8192, cols=8192)
    src = nonce(fast)
    ev.evaluate(ref, src, time=False)  # compiled and the reference loaded, off the figures
    cis, rows = [], []
    for _ in range(5):
        v = ev.evaluate(ref, src)
        t = v.timing
        if not (t and t.candidate and t.eager and t.speedup_eager):
            rows.append(f"{v.status}: no timing")
            continue
        cis.append(t.speedup_ci_pct if t.speedup_ci_pct is not None else float("inf"))
        rows.append(f"{t.candidate.median_ms:.4g}/{t.eager.median_ms:.4g} ms, {t.speedup_eager:.3f}x "
                    f"+-{t.speedup_ci_pct}% over {t.candidate.calls} rounds of {t.batch_calls}, time stage "
                    f"{stage_s(v, 'time'):.2f} s{' (uncertain: ' + (t.noise or '')[:90] + ')' if t.uncertain else ''}")
    for r in rows:
        print(f"    quote: {r}", flush=True)
    if cis:
        rep.put("quote_ci_pct", max(cis), f"a kernel over 0.1 ms, 5 timings: speedup intervals "
                                          f"{[round(c, 2) for c in cis]} %")


def memory_section(ev: Evaluator, rep: Report, fast: str, cache: str) -> None:
    # 7. memory of one verdict of a 6.4 GB task, and two at once (two evaluator processes)
    big = REF.format(rows=4096, cols=393216)
    io_bytes = 2 * 4096 * 393216 * 4
    samples: list[int] = []
    stop = threading.Event()
    base = None
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=5, check=False)
        base = int(p.stdout.strip().splitlines()[0]) << 20
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        pass
    th = threading.Thread(target=memory_sampler, args=(stop, samples), daemon=True)
    th.start()
    apps: list[tuple[float, dict[int, int]]] = []
    th2 = threading.Thread(target=process_memory_sampler, args=(stop, apps), daemon=True)
    th2.start()
    t_start = time.monotonic()
    v = ev.evaluate(big, nonce(fast))
    stop.set()
    th.join()
    th2.join()
    if samples and base is not None:
        peak = max(samples) - base
        rep.put("memory_ratio", peak / io_bytes,
                f"one verdict of a 6.4 GB task: peak {peak / 2**30:.1f} GB of device memory = "
                f"{peak / io_bytes:.2f} x (inputs + outputs) -> {v.status} {v.message[:120]}")
    print("    memory stages: " + ", ".join(f"{st.name} {st.seconds:.2f} s" for st in v.stages), flush=True)
    memory_timeline(apps, t_start, io_bytes // 2)
    outs = two_at_once(big, fast, cache)
    rep.put("two_at_once", outs, f"two verdicts of the 6.4 GB task at once: {outs}")


def two_at_once(ref: str, fast: str, cache: str, timeout: float = 600.0) -> list[str]:
    """Two evaluator processes, each with its own candidate of `fast` against `ref`, started together: each
    process's verdict, its seconds, and its warnings about memory (a wait, a referee let go)."""
    two = [sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from evaluator import Evaluator, EvalSettings\n"
        "src = open(sys.argv[1]).read(); ref = open(sys.argv[2]).read()\n"
        "t = time.time()\n"
        "with Evaluator(EvalSettings(device='cuda', cache_dir=%r, time_compiled=False)) as ev:\n"
        "    v = ev.evaluate(ref, src)\n"
        "    mem = [w[:160] for w in v.warnings if 'memory' in w or 'referee go' in w]\n"
        "    print(v.status, f'in {time.time() - t:.0f} s:', v.message[:200], mem)\n") % (str(ROOT), cache)]
    with tempfile.TemporaryDirectory() as d:
        Path(d, "r.py").write_text(ref)
        procs = []
        for i in range(2):
            Path(d, f"c{i}.py").write_text(nonce(fast))
            procs.append(subprocess.Popen(two + [str(Path(d, f"c{i}.py")), str(Path(d, "r.py"))],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        outs = []
        try:
            for p in procs:
                try:
                    outs.append(p.communicate(timeout=timeout)[0].strip())
                except subprocess.TimeoutExpired:
                    p.kill()
                    outs.append(f"killed after {timeout:.0f} s: {(p.communicate()[0] or '').strip()[-200:]}")
        finally:  # interrupted too: no evaluator of ours left holding the device after the benchmark
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
    return outs


SQUEEZER = r'''
import sys, time, torch
free, _ = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]) * 2**30)
held = torch.empty(max(0, free - keep), dtype=torch.uint8, device="cuda")
print("ready", free - keep, flush=True)
time.sleep(float(sys.argv[2]))
'''


def squeeze_section(rep: Report, fast: str, cache: str, free_gb: float) -> None:
    """7b. Two verdicts of the 6.4 GB task at once on a device that another process has filled but for `free_gb`
    (one verdict's worth, not two): both honest kernels must come out `correct`, one after the other, and neither
    waits out its bound for the other (each process holds its referee while its candidate waits; the evaluation
    whose wait began later lets its referee go). One verdict of this task (6 GB a side) holds about 57 GB: its
    referee about 19 GB (measured on an H100), its candidate's admission 38 GB. With less free than that, neither
    can run: both wait out their bound and fail as `infra_error`, naming the process that holds the memory."""
    big = REF.format(rows=4096, cols=393216)
    p = subprocess.Popen([sys.executable, "-c", SQUEEZER, str(free_gb), "900"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        if "ready" not in line:
            rep.put("squeeze", None, f"the process that fills the device did not start: {line!r}")
            return
        t = time.time()
        outs = two_at_once(big, fast, cache)
        rep.put("squeeze", outs, f"two verdicts of the 6.4 GB task at once with {free_gb:g} GB of the device free "
                                 f"(another process holds {int(line.split()[1]) / 2**30:.1f} GB), "
                                 f"{time.time() - t:.0f} s: {outs}")
    finally:
        p.kill()
        p.wait()


def roofline_section(ev: Evaluator, rep: Report) -> None:
    # 8. roofline
    v = ev.evaluate(COPY_REF.format(rows=4096, cols=393216), nonce(COPY_CUDA), time=True)
    if v.timing and v.timing.pct_of_limit:
        rep.put("copy_pct_of_limit", v.timing.pct_of_limit,
                f"copy kernel: {v.timing.candidate.median_ms:.3f} ms, roofline {v.timing.roofline_ms:.3f} ms "
                f"-> {v.timing.pct_of_limit:.1f} % of the limit ({v.status})")
    v = ev.evaluate(MEAN_REF, nonce(MEAN_CUDA))
    if v.timing and v.timing.pct_of_limit:
        rep.put("mean_pct_of_limit", v.timing.pct_of_limit,
                f"mean over dim 1 of 128x4096x4095: {v.timing.candidate.median_ms:.3f} ms, roofline "
                f"{v.timing.roofline_ms:.3f} ms -> {v.timing.pct_of_limit:.1f} % ({v.status} {v.message[:80]})")
    else:
        print(f"  mean over dim 1: {v.status} {v.message[:200]}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n", type=int, default=8, help="candidates for best-of-n")
    ap.add_argument("--cold", type=int, default=5, help="cold fast-form candidates (after a first one)")
    ap.add_argument("--cache", default=None, help="build cache (default: a fresh temp folder)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default="", help="comma-separated sections (default: all)")
    ap.add_argument("--squeeze-free-gb", type=float, default=60.0,
                    help="squeeze: device memory left free by the process that fills the device")
    ap.add_argument("--busy", action="store_true", help="a busy second process during the spread measurement")
    a = ap.parse_args()
    rep = Report(a.json)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        run(a, rep)
    except KeyboardInterrupt:
        print("\ninterrupted: the figures measured so far", flush=True)
    finally:
        rep.table()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
