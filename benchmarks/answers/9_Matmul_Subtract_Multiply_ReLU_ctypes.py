"""KernelBench level 2 / 9_Matmul_Subtract_Multiply_ReLU in the ctypes binding (`binding = "ctypes"`): the same
fused kernel as the project's fixture (tests/fixtures/kernels/level2), built with no torch headers anywhere and
called through ctypes; the GEMM (torch.mm, cuBLAS, without the bias) is called from Python. A stand-in model's answer
for benchmarks/bench_first_verdict.py --binding ctypes, not a test fixture.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

// The fused elementwise tail. v: the raw GEMM output x @ W^T (no bias yet); bias: the Linear bias of this column.
__device__ __forceinline__ float sub_mul_relu_tail(float v, float bias, float p0, float p1) {
    const float t = (v + bias - p0) * p1;  // p0: subtract_value, p1: multiply_value
    return t < 0.0f ? 0.0f : t;
}

// In place over y (numel n). The bias index of element i is i % out_features.
template <bool VEC>
__global__ void __launch_bounds__(256) sub_mul_relu_kernel(
        float* __restrict__ y, const float* __restrict__ bias, int64_t n, int64_t inner, int64_t nbias, float p0,
        float p1) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (VEC) {  // inner % 4 == 0: the 4 lanes of a float4 share one bias element
        float4* y4 = reinterpret_cast<float4*>(y);
        const int64_t n4 = n >> 2;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
            const int64_t col = (i << 2) % inner;  // inner == out_features
            const float4 b4 = *reinterpret_cast<const float4*>(bias + col);
            float4 v = y4[i];
            v.x = sub_mul_relu_tail(v.x, b4.x, p0, p1);
            v.y = sub_mul_relu_tail(v.y, b4.y, p0, p1);
            v.z = sub_mul_relu_tail(v.z, b4.z, p0, p1);
            v.w = sub_mul_relu_tail(v.w, b4.w, p0, p1);
            y4[i] = v;
        }
    } else {
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            const float b = bias[i % inner];
            y[i] = sub_mul_relu_tail(y[i], b, p0, p1);
        }
    }
}

extern "C" const char* sub_mul_relu_launch(float* y, const float* bias, int64_t n, int64_t inner,
        int64_t nbias, float p0, float p1, void* stream_ptr) {
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (n <= 0) return nullptr;
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int64_t cap = (int64_t)(sms > 0 ? sms : 80) * 8;
    const bool vec = (inner % 4 == 0) && (n % 4 == 0) && ((((uintptr_t)y) | ((uintptr_t)bias)) & 15) == 0;
    const int64_t work = vec ? n / 4 : n;
    int64_t blocks = (work + 255) / 256;
    if (blocks > cap) blocks = cap;
    if (vec) sub_mul_relu_kernel<true><<<(unsigned)blocks, 256, 0, stream>>>(y, bias, n, inner, nbias, p0, p1);
    else sub_mul_relu_kernel<false><<<(unsigned)blocks, 256, 0, stream>>>(y, bias, n, inner, nbias, p0, p1);
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
"""

_lib = ctypes.CDLL(load_inline(
    name="kb_l2_9_sub_mul_relu_ctypes",
    cpp_sources="",
    cuda_sources=cuda_src,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
    verbose=False,
))
_lib.sub_mul_relu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_float, ctypes.c_float, ctypes.c_void_p]
_lib.sub_mul_relu_launch.restype = ctypes.c_char_p


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias.contiguous()
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 2 and x.size(1) == w.size(1)):
            raise ValueError("sub_mul_relu: expected a 2-D float32 CUDA input matching the weight")
        y = torch.mm(x, w.t())  # contiguous: the kernel runs in place on it
        err = _lib.sub_mul_relu_launch(y.data_ptr(), b.data_ptr(), y.numel(), w.size(0), w.size(0),
                                       float(self.subtract_value), float(self.multiply_value),
                                       torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"sub_mul_relu: kernel launch failed: {err.decode()}")
        return y
