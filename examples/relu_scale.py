"""A small KernelBench-style module: relu followed by a scale. Sized to run the whole loop on a CPU quickly:

    kernel-lsp optimize examples/relu_scale.py --device cpu
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(16, 16384)]


def get_init_inputs():
    return [2.0]
