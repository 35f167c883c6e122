import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# One C++ source shared by two candidates (level1/1_add and level2/1_add_relu): built once, keyed by its hash.
cpp_source = r"""
#include <torch/extension.h>

torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto ac = a.contiguous(), bc = b.contiguous();
    auto out = torch::empty_like(ac);
    const float* pa = ac.data_ptr<float>();
    const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = ac.numel();
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
    return out;
}

torch::Tensor add_relu(torch::Tensor a, torch::Tensor b) {
    auto ac = a.contiguous(), bc = b.contiguous();
    auto out = torch::empty_like(ac);
    const float* pa = ac.data_ptr<float>();
    const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = ac.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float s = pa[i] + pb[i];
        po[i] = s > 0.f ? s : 0.f;
    }
    return out;
}
"""

ops = load_inline(
    name="klsp_bench_test_ops",
    cpp_sources=cpp_source,
    functions=["add", "add_relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ops.add(a, b)
