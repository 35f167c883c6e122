import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>

torch::Tensor relu_scale(torch::Tensor x, double s) {
    TORCH_CHECK(!x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CPU tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const float sf = static_cast<float>(s);
    const int64_t n = xc.numel();
    // One fused pass (relu and scale), vectorised by the compiler.
    for (int64_t i = 0; i < n; ++i) {
        const float v = in[i];
        out[i] = (v > 0.0f ? v : 0.0f) * sf;
    }
    return y;
}
"""

relu_scale_ext = load_inline(
    name="relu_scale_cpu",
    cpp_sources=cpp_src,
    functions=["relu_scale"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_scale_ext.relu_scale(x, self.scale)
