import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Plain C++ over raw pointers, no torch headers (Python calls it through ctypes), so it builds in well under a
# second.
cpp_src = r"""
#include <stdint.h>

// One fused pass (relu and scale), vectorised by the compiler.
extern "C" void relu_scale(const float* __restrict__ in, float* __restrict__ out, float s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = in[i];
        out[i] = (v > 0.0f ? v : 0.0f) * s;
    }
}
"""

# is_python_module=False: load_inline builds a plain shared library and returns its path
lib = ctypes.CDLL(load_inline(
    name="relu_scale_cpu_ctypes",
    cpp_sources=cpp_src,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=["-O3"],
    verbose=False,
))
lib.relu_scale.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_int64]
lib.relu_scale.restype = None


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.is_cuda:
            raise TypeError("x must be a float32 CPU tensor")
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.relu_scale(x.data_ptr(), y.data_ptr(), self.scale, x.numel())
        return y
