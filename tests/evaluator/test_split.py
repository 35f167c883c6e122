"""The KernelBench-form splitter (evaluator/split.py): kernels compile with nvcc without torch's headers, the
host side with g++ (torch's precompiled header applies), and what cannot be split says why."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import check_cuda_sources
import fixturelib

from evaluator.sandboxed.split import NoSplit, items, parse_kernel, split

ROOT = Path(__file__).resolve().parents[2]
KB_RELU = (ROOT / "benchmarks" / "bench_evaluator.py").read_text().split("KB_CUDA = r'''")[1].split("'''")[0]
STANDARD = fixturelib.kernel_fixtures("standard")


def _calls(source: str) -> list[fixturelib.InlineCall]:
    return [c for c in fixturelib.inline_calls(source) if c.cuda_sources]


def test_items_and_kernel_signatures():
    src = """
#include <torch/extension.h>
#define BLOCK 256
struct P { float a; };  // a comment { with braces }
template <bool V, int N = 4>
__global__ void __launch_bounds__(1024) k(const float* __restrict__ x, float* y, int64_t n, P p) { y[0] = x[0]; }
torch::Tensor f(torch::Tensor x) { return x; }
"""
    its = items(src)
    assert [i.text.split()[0] for i in its] == ["#include", "#define", "struct", "template", "torch::Tensor"]
    k = parse_kernel(its[3].text)
    assert k.name == "k" and k.template_params == ["V", "N"]
    assert k.params == [("const float* __restrict__", "x"), ("float*", "y"), ("int64_t", "n"), ("P", "p")]


def test_launches_become_extern_c_launchers():
    s = split(["torch::Tensor relu_forward(torch::Tensor x);"],
              [_calls(KB_RELU)[0].cuda_sources[0]])
    cuda, cpp = "\n".join(s.cuda_sources), "\n".join(s.cpp_sources)
    assert "torch" not in re.sub(r"//.*", "", cuda)
    assert "<<<" not in cpp and "__klsp_launch_0(dim3(" in cpp
    assert 'extern "C" void __klsp_launch_0(dim3 klsp_g' in cuda and "relu_kernel<<<klsp_g" in cuda
    assert cpp.startswith("#include <torch/extension.h>")  # first, so the precompiled header applies
    assert s.launches == 1


@pytest.mark.parametrize("src,why", [
    ("#include <torch/extension.h>\ntemplate <typename scalar_t>\n__global__ void k(scalar_t* x) {}\n"
     "void f(torch::Tensor t) { AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), \"k\", [&] { "
     "k<scalar_t><<<1, 1>>>(t.data_ptr<scalar_t>()); }); }", "scalar_t"),
    ("#include <torch/extension.h>\n__global__ void k(torch::PackedTensorAccessor32<float, 2> a) {}\n"
     "void f(torch::Tensor t) { k<<<1, 1>>>(t.packed_accessor32<float, 2>()); }", "torch"),
    ("#include <cuda_runtime.h>\n__global__ void k(float* x) {}\nvoid f(float* x) { k<<<1, 1>>>(x); }",
     "already the fast form"),
    ("#include <torch/extension.h>\n#ifdef FAST\n__global__ void k(float* x) {}\n#endif\n", "conditional"),
    ("#include <torch/extension.h>\n__constant__ float w[4];\n__global__ void k(float* x) { x[0] = w[0]; }\n"
     "void f(torch::Tensor t) { cudaMemcpyToSymbol(w, t.data_ptr<float>(), 16); k<<<1, 1>>>(t.data_ptr<float>()); }",
     "device variable"),
])
def test_what_cannot_be_split_says_why(src: str, why: str):
    with pytest.raises(NoSplit, match=why):
        split([], [src])


def _standard_sources() -> list[tuple[str, list[str], list[str]]]:
    out = [("bench_kb_relu", ["torch::Tensor relu_forward(torch::Tensor x);"], _calls(KB_RELU)[0].cuda_sources)]
    for path in STANDARD:
        for c in _calls(path.read_text()):
            out.append((path.stem, c.cpp_sources, c.cuda_sources))
    return out


@pytest.mark.skipif(check_cuda_sources.nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("name,cpp,cu", _standard_sources(), ids=[n for n, _, _ in _standard_sources()])
def test_split_standard_form_compiles_without_torch_in_the_kernel_unit(name, cpp, cu, tmp_path: Path):
    s = split(cpp, cu)
    cu_file = tmp_path / "k.cu"
    cu_file.write_text("\n".join(s.cuda_sources))
    p = subprocess.run([check_cuda_sources.nvcc_path(), "-c", str(cu_file), "-o", str(tmp_path / "k.o"),
                        *check_cuda_sources.NVCC_COMMON], capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    # the host unit: g++ with torch's headers (the CPU wheel's missing CUDA macro header gets its stand-in)
    cpp_file = tmp_path / "main.cpp"
    cpp_file.write_text("\n".join(s.cpp_sources))
    cmd = ["g++", "-std=c++20", "-fsyntax-only", "-fPIC", "-DTORCH_API_INCLUDE_EXTENSION_H",
           "-DTORCH_EXTENSION_NAME=x", *check_cuda_sources.torch_include_flags(tmp_path)]
    inc = check_cuda_sources.cuda_include_dir()
    if inc:
        cmd += ["-isystem", inc]
    p = subprocess.run(cmd + [str(cpp_file)], capture_output=True, text=True, timeout=600, check=False)
    if p.returncode and re.search(r"c10/cuda/|ATen/cuda/.*No such file", p.stderr):
        pytest.skip("the CPU build of torch lacks the CUDA headers this wrapper includes")
    assert p.returncode == 0, p.stderr[-3000:]
