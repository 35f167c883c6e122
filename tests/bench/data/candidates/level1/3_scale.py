import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Wrong on purpose: scales by factor + 1."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor + 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor
