import torch
import torch.nn as nn


class Model(nn.Module):
    """Hyperbolic tangent (no candidate is provided for this task: it counts as a failure)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(32, 32)]


def get_init_inputs():
    return []
