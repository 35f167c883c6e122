import ctypes

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# The matrix multiply stays in cuBLAS (F.linear). This kernel does all the rest in one pass, in place on the
# GEMM's output: add the bias, relu, scale. CUDA only, no torch headers anywhere (Python calls the launcher through
# ctypes), so the build is nvcc's second.
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

# is_python_module=False: load_inline builds a plain shared library and returns its path
lib = ctypes.CDLL(load_inline(
    name="linear_relu_scale_epilogue_ctypes",
    cpp_sources="",
    cuda_sources=cuda_src,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
    verbose=False,
))
lib.bias_relu_scale_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_int64,
                                       ctypes.c_int64, ctypes.c_void_p]
lib.bias_relu_scale_launch.restype = ctypes.c_char_p


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # the same parameters as Model
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.linear.weight).contiguous()  # cuBLAS GEMM; the bias goes into the kernel
        bias = self.linear.bias.contiguous()
        err = lib.bias_relu_scale_launch(y.data_ptr(), bias.data_ptr(), self.scale, y.numel(), y.size(-1),
                                         torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"bias_relu_scale kernel launch failed: {err.decode()}")
        return y
