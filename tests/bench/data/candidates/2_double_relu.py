import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Flat layout (<dir>/<task name>.py); pure PyTorch: not_a_kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + x)
