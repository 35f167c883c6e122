import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# The matrix multiply stays in the library (F.linear: MKL/oneDNN). This kernel does all the rest in one pass, in
# place on the GEMM's output: add the bias, relu, scale.
cpp_src = r"""
#include <torch/extension.h>

torch::Tensor bias_relu_scale_(torch::Tensor y, torch::Tensor bias, double s) {
    TORCH_CHECK(!y.is_cuda() && y.is_contiguous() && y.scalar_type() == torch::kFloat32,
                "y must be a contiguous float32 CPU tensor");
    TORCH_CHECK(bias.scalar_type() == torch::kFloat32 && bias.numel() == y.size(-1),
                "bias must be a float32 tensor of y.size(-1) elements");
    auto b = bias.contiguous();
    float* p = y.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    const float sf = static_cast<float>(s);
    const int64_t cols = y.size(-1);
    const int64_t rows = cols == 0 ? 0 : y.numel() / cols;
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float* row = p + r * cols;
            for (int64_t c = 0; c < cols; ++c) {  // one pass: bias, relu, scale (vectorised by the compiler)
                const float v = row[c] + pb[c];
                row[c] = (v > 0.0f ? v : 0.0f) * sf;
            }
        }
    });
    return y;
}
"""

epilogue_ext = load_inline(
    name="linear_relu_scale_epilogue_cpu",
    cpp_sources=cpp_src,
    functions=["bias_relu_scale_"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # the same parameters as Model
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.linear.weight)  # library GEMM; the bias goes into the kernel
        return epilogue_ext.bias_relu_scale_(y, self.linear.bias, self.scale)
