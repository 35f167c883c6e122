import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * self.scale


def get_inputs():
    return [torch.randn(512, 2048)]


def get_init_inputs():
    return [2048, 2048, 2.0]
