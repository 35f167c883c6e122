import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Pure PyTorch (no custom kernel): correct, the oracle warns about it."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0.0)
