import ctypes

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# The matrix multiply stays in the library (F.linear: MKL/oneDNN). This function does all the rest in one pass, in
# place on the GEMM's output: add the bias, relu, scale. Plain C++, no torch headers (Python calls it through
# ctypes), so it builds in well under a second.
cpp_src = r"""
#include <stdint.h>

// y[r, c] = max(y[r, c] + bias[c], 0) * s for a contiguous (rows, cols) y
extern "C" void bias_relu_scale(float* __restrict__ y, const float* __restrict__ bias, float s, int64_t rows,
                                int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        float* row = y + r * cols;
        for (int64_t c = 0; c < cols; ++c) {  // one pass: bias, relu, scale (vectorised by the compiler)
            const float v = row[c] + bias[c];
            row[c] = (v > 0.0f ? v : 0.0f) * s;
        }
    }
}
"""

# is_python_module=False: load_inline builds a plain shared library and returns its path
lib = ctypes.CDLL(load_inline(
    name="linear_relu_scale_epilogue_cpu_ctypes",
    cpp_sources=cpp_src,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=["-O3"],
    verbose=False,
))
lib.bias_relu_scale.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_int64, ctypes.c_int64]
lib.bias_relu_scale.restype = None


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # the same parameters as Model
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.linear.weight).contiguous()  # library GEMM; the bias goes into the kernel
        bias = self.linear.bias.contiguous()
        cols = y.size(-1)
        lib.bias_relu_scale(y.data_ptr(), bias.data_ptr(), self.scale, y.numel() // cols if cols else 0, cols)
        return y
