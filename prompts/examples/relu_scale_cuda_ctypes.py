import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# CUDA only: the kernel and an extern "C" launcher taking raw pointers, sizes and the stream. No torch headers
# anywhere (no C++ wrapper: Python calls the launcher through ctypes), so the build is nvcc's second.
cuda_src = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void relu_scale_kernel(const float* __restrict__ x, float* __restrict__ y, float s, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = x[i];
        y[i] = (v > 0.0f ? v : 0.0f) * s;
    }
}

extern "C" const char* relu_scale_launch(const float* x, float* y, float s, int64_t n, void* stream) {
    if (n == 0) return nullptr;
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535 * 8) blocks = 65535 * 8;  // the grid-stride loop covers the rest
    relu_scale_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(x, y, s, n);
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
"""

# is_python_module=False: load_inline builds a plain shared library and returns its path
lib = ctypes.CDLL(load_inline(
    name="relu_scale_ctypes",
    cpp_sources="",
    cuda_sources=cuda_src,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
    verbose=False,
))
lib.relu_scale_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_int64, ctypes.c_void_p]
lib.relu_scale_launch.restype = ctypes.c_char_p


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        err = lib.relu_scale_launch(x.data_ptr(), y.data_ptr(), self.scale, x.numel(),
                                    torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"relu_scale kernel launch failed: {err.decode()}")
        return y
