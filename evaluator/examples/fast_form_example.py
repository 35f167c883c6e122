"""One-shot example of the FAST candidate form (KernelBench level 1, 19_ReLU).

Why this form: a `.cu` that includes torch headers takes ~50 s to compile; the same kernel without them takes
~1 s. So:

* `cuda_sources` hold only CUDA: the kernel plus an `extern "C"` launcher that takes raw pointers, sizes and
  the stream (as `void*`), and returns an error string or nullptr. No torch headers in the `.cu`.
* `cpp_sources` hold the torch wrapper: `#include <torch/extension.h>` FIRST (so the precompiled header
  applies), checks, output allocation, the launcher call. Built with `use_pch=True`.
* `no_implicit_headers=True` stops load_inline from prepending torch headers to the `.cu`.
* Python passes `torch.cuda.current_stream().cuda_stream`, so the kernel runs on the caller's stream.

The result is still a standard, self-contained `load_inline` module that needs only torch.
"""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = x[i];
        y[i] = v > 0.f ? v : 0.f;
    }
}

extern "C" const char* relu_launch(const float* x, float* y, int64_t n, void* stream) {
    if (n == 0) return nullptr;
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535 * 8) blocks = 65535 * 8;  // grid-stride loop covers the rest
    relu_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(x, y, n);
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
"""

cpp_source = r"""
#include <torch/extension.h>

extern "C" const char* relu_launch(const float* x, float* y, int64_t n, void* stream);

torch::Tensor relu_forward(torch::Tensor x, int64_t stream) {
    TORCH_CHECK(x.is_cuda(), "relu_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const char* err = relu_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
                                  reinterpret_cast<void*>(stream));
    TORCH_CHECK(err == nullptr, "relu kernel launch failed: ", err);
    return y;
}
"""

relu_ext = load_inline(
    name="relu_fast",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_forward"],
    no_implicit_headers=True,
    use_pch=True,
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_forward(x, torch.cuda.current_stream().cuda_stream)
