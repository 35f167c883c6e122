import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiply by a constant given at construction."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return [3.0]
