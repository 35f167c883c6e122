import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# The matrix multiply stays in cuBLAS (F.linear). This kernel does all the rest in one pass, in place on the
# GEMM's output: add the bias, relu, scale. CUDA only, no torch headers, so nvcc compiles it in about a second.
cuda_src = r"""
#include <cuda_runtime.h>
#include <stdint.h>

// y[r, c] = max(y[r, c] + bias[c], 0) * s for a contiguous (rows, cols) y
__global__ void bias_relu_scale_kernel(float* __restrict__ y, const float* __restrict__ bias, float s,
                                       int64_t n, int64_t cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = y[i] + bias[i % cols];
        y[i] = (v > 0.0f ? v : 0.0f) * s;
    }
}

extern "C" const char* bias_relu_scale_launch(float* y, const float* bias, float s, int64_t n, int64_t cols,
                                              void* stream) {
    if (n == 0) return nullptr;
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535 * 8) blocks = 65535 * 8;  // the grid-stride loop covers the rest
    bias_relu_scale_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(y, bias, s, n, cols);
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
"""

# The torch wrapper (torch header first): checks, then the launcher on the caller's stream. Returns y itself.
cpp_src = r"""
#include <torch/extension.h>

extern "C" const char* bias_relu_scale_launch(float* y, const float* bias, float s, int64_t n, int64_t cols,
                                              void* stream);

torch::Tensor bias_relu_scale_(torch::Tensor y, torch::Tensor bias, double s, int64_t stream) {
    TORCH_CHECK(y.is_cuda() && y.is_contiguous() && y.scalar_type() == torch::kFloat32,
                "y must be a contiguous float32 CUDA tensor");
    TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == torch::kFloat32 && bias.numel() == y.size(-1),
                "bias must be a float32 CUDA tensor of y.size(-1) elements");
    auto b = bias.contiguous();
    const char* err = bias_relu_scale_launch(y.data_ptr<float>(), b.data_ptr<float>(), static_cast<float>(s),
                                             y.numel(), y.size(-1), reinterpret_cast<void*>(stream));
    TORCH_CHECK(err == nullptr, "bias_relu_scale kernel launch failed: ", err);
    return y;
}
"""

epilogue_ext = load_inline(
    name="linear_relu_scale_epilogue",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["bias_relu_scale_"],
    no_implicit_headers=True,
    use_pch=True,
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # the same parameters as Model
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.linear.weight)  # cuBLAS GEMM; the bias goes into the kernel
        return epilogue_ext.bias_relu_scale_(y, self.linear.bias, self.scale, torch.cuda.current_stream().cuda_stream)
