"""The CUDA path (skipped without a GPU): fast form and KernelBench form, events timing, faults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from eval_helpers import fast_settings, py_candidate, reference

from evaluator import Evaluator

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
RELU_REF = reference("torch.relu(args[0])", "[torch.randn(1024, 4096)]")
KB_RELU = (ROOT / "benchmarks" / "bench_evaluator.py").read_text().split("KB_CUDA = r'''")[1].split("'''")[0]

ILLEGAL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <cuda_runtime.h>
#include <stdint.h>
__global__ void bad_kernel(float* y) { float* p = (float*)0x10; y[threadIdx.x] = *p; }
extern "C" const char* bad_launch(float* y, void* stream) {
    bad_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(y);
    return nullptr;
}
"""
cpp_source = """
#include <torch/extension.h>
extern "C" const char* bad_launch(float* y, void* stream);
torch::Tensor bad(torch::Tensor x, int64_t stream) {
    auto y = torch::empty_like(x);
    bad_launch(y.data_ptr<float>(), reinterpret_cast<void*>(stream));
    return y;
}
"""
ext = load_inline(name="klsp_illegal", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["bad"],
                  no_implicit_headers=True, use_pch=True)

class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *args):
        return ext.bad(args[0], torch.cuda.current_stream().cuda_stream)
'''


@pytest.fixture(scope="module")
def gev(cache_dir):
    with Evaluator(fast_settings(cache_dir, device="cuda", time_compiled=True, timing_calls=100,
                                 run_timeout=60.0, kernel_check=True)) as e:
        yield e


def test_device_info(gev):
    info = gev.device_info()
    assert info["capability"] and info["bandwidth_gbs"] > 100 and info["peak_tflops"] > 1
    assert info["arch_list"].endswith("+PTX")


def test_fast_form_example_correct_and_timed(gev):
    src = (ROOT / "evaluator" / "examples" / "fast_form_example.py").read_text()
    v = gev.evaluate(RELU_REF, src, profile=True)
    assert v.status == "correct", (v.message, v.compiler_log, v.detail)
    assert v.timing.method == "outside-clock" and v.timing.candidate.calls >= 5 and v.timing.batch_calls >= 1
    assert v.timing.eager and v.timing.speedup_eager and v.timing.eager_alone_ms
    assert v.timing.checked_calls >= 2 and any(c.startswith("time(the evaluator's clock") for c in v.checked)
    assert v.profile.ops and v.kernel.is_kernel and v.kernel.custom_share > 0.5, v.kernel
    assert any(k["custom"] for k in v.kernel.kernels), v.kernel.kernels


@pytest.mark.parametrize("stem", ["relu_scale", "linear_relu_scale"])
def test_the_ctypes_form_builds_without_torch_headers_and_its_kernels_are_its_own(gev, stem):
    """The worked examples of `binding = "ctypes"`: launchers called through ctypes on the library load_inline
    built; correct, timed, and their kernels (found by name in the profile) are own code."""
    ex = ROOT / "prompts" / "examples"
    v = gev.evaluate((ex / f"{stem}_ref.py").read_text(), (ex / f"{stem}_cuda_ctypes.py").read_text())
    assert v.status == "correct", (v.message, v.compiler_log, v.detail)
    msg = v.stage("compile").message
    host = re.search(r"host (\d+\.\d) s", msg)  # no torch header to parse: the host unit is an empty file
    assert (host is not None and float(host.group(1)) < 1.0) or "cached" in msg or "host reused" in msg, msg
    assert v.timing.speedup_eager and v.kernel.finding == "own_code", v.kernel.message
    assert any(k["custom"] for k in v.kernel.kernels), v.kernel.kernels


@pytest.mark.parametrize("form", ["fast", "kernelbench"])
def test_new_kernels_behind_a_wrapper_already_built_compile_no_host_code(gev, form):
    """A refinement that changes only its kernels: the second build takes the first one's host object (its name
    made unique, so no earlier run's build is found), and both are correct."""
    import uuid

    src = (ROOT / "evaluator" / "examples" / "fast_form_example.py").read_text() if form == "fast" else KB_RELU
    tag = uuid.uuid4().hex[:10]
    first = re.sub(r'name="(relu_\w+)"', rf'name="\1_{tag}"', src, count=1)
    second = first.replace("y[i] = v > 0.f ? v : 0.f;", "y[i] = fmaxf(v, 0.f);")
    assert first != src and second != first
    a = gev.evaluate(RELU_REF, first, time=False)
    b = gev.evaluate(RELU_REF, second, time=False)
    assert a.status == "correct" and b.status == "correct", (a.message, b.message, b.compiler_log)
    assert "host reused" not in a.stage("compile").message
    assert "host reused" in b.stage("compile").message, b.stage("compile").message


def test_kernelbench_form_correct(gev):
    v = gev.evaluate(RELU_REF, KB_RELU, time=False)
    assert v.status == "correct", (v.message, v.compiler_log, v.detail)


def test_decoy_kernel_over_torch_ops_is_correct_and_library_only(gev):
    src = (ROOT / "evaluator" / "examples" / "fast_form_example.py").read_text()
    decoy = src.replace("return relu_ext.relu_forward(x, torch.cuda.current_stream().cuda_stream)",
                        "out = torch.relu(x)\n        relu_ext.relu_forward(x[:1, :1].contiguous(), "
                        "torch.cuda.current_stream().cuda_stream)\n        return out")
    assert decoy != src
    v = gev.evaluate(RELU_REF, decoy, time=False)
    assert v.status == "correct", v.message
    assert v.kernel.finding == "library_only", v.kernel
    assert "aten::" in v.kernel.message or "almost nothing" in v.kernel.message


def test_illegal_address_crashes_and_pool_recovers(gev):
    v = gev.evaluate(RELU_REF, ILLEGAL, time=False)
    assert v.status == "crashed", v.message
    assert "illegal" in v.message.lower() or "signal" in v.message
    src = (ROOT / "evaluator" / "examples" / "fast_form_example.py").read_text()
    ok = gev.evaluate(RELU_REF, src, time=False)
    assert ok.status == "correct", ok.message


def test_other_stream_work_is_timed(gev):
    ref = reference("args[0] * 2", "[torch.randn(256, 256)]")
    sneaky = py_candidate(
        "s = self.s\n"
        "s.wait_stream(torch.cuda.current_stream())\n"
        "with torch.cuda.stream(s):\n"
        "    torch.cuda._sleep(2_000_000)\n"
        "    out = args[0] * 2\n"
        "torch.cuda.current_stream().wait_stream(s) if False else None\n"
        "return out",
        init="self.s = torch.cuda.Stream()")
    v = gev.evaluate(ref, sneaky)
    assert v.status in ("correct", "incorrect"), v.message
    if v.timing:
        assert v.timing.candidate.median_ms > 0.5, v.timing
        assert any("escaped" in w for w in v.warnings)
