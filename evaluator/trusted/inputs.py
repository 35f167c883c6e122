"""Referee side: the inputs of every trial and every timed call, drawn from seeds the candidate never sees.

A trial's inputs are a pure function of (seed, variant), so the referee can write them for the candidate and
draw them again later to check a call's output without keeping a copy. Variants:

- ``task``: `get_inputs()` as the task defines it;
- ``ramp``: the task's values times a positional ramp (0.5 … 2.0 along the flattened index): a kernel that
  computes only part of a reduction or of its output changes the answer even where bounded losses barely move;
- ``signed``: floating inputs replaced by standard normal values (same shapes and dtypes): signs flip, so a
  kernel that is only right for the task's own distribution (e.g. ReLU for ELU on `torch.rand`) is caught;
- ``wide``: standard normal values times 8 (magnitudes outside [0, 1)).

Integer and boolean inputs (indices, masks) and non-tensor arguments always come from `get_inputs()` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..shared.tree import leaves, tree_map  # noqa: F401  (re-exported)
from ..variants import DESCRIBE, OUT_OF_DISTRIBUTION, VARIANTS  # noqa: F401  (torch-free, for the parent)

RAMP_CHUNK = 1 << 24


def _ramp(t: torch.Tensor) -> torch.Tensor:
    """t times 0.5 … 2.0 along its flattened index, into a new tensor, in chunks: one extra copy of `t` at most
    (a 6 GB input needs 6 GB more, not a full-size ramp and a product besides). `t` itself is left alone
    (get_inputs() may hand out the same tensor every time)."""
    if not t.is_floating_point() or t.numel() < 2:
        return t
    src = t.reshape(-1)
    out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    dst = out.view(-1)
    n = src.numel()
    step = 1.5 / (n - 1)
    for s in range(0, n, RAMP_CHUNK):
        e = min(n, s + RAMP_CHUNK)
        r = torch.arange(s, e, device=t.device, dtype=torch.float64).mul_(step).add_(0.5)
        torch.mul(src[s:e], r.to(t.dtype), out=dst[s:e])
    return out


def _normal(scale: float) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(t: torch.Tensor) -> torch.Tensor:
        if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
            return t
        out = torch.randn(t.shape, dtype=t.dtype, device=t.device)
        return out.mul_(scale) if scale != 1.0 else out

    return f


def make(get_inputs: Callable[[], Any], seed: int, variant: str, device: torch.device) -> list:
    """Fresh inputs on `device` for (seed, variant); deterministic for a given torch and device.

    `get_inputs()` runs with `device` as the default device, so `torch.rand(...)` draws directly on the GPU
    (KernelBench's inputs reach gigabytes); tensors it creates on an explicit device are moved afterwards."""
    torch.manual_seed(seed)
    with torch.device(device):
        inputs = list(get_inputs())
    inputs = [tree_map(lambda t: t.to(device), x) for x in inputs]
    if variant == "ramp":
        inputs = [tree_map(_ramp, x) for x in inputs]
    elif variant in ("signed", "wide"):
        torch.manual_seed(seed ^ 0x5DEECE66D)
        f = _normal(1.0 if variant == "signed" else 8.0)
        with torch.device(device):
            inputs = [tree_map(f, x) for x in inputs]
    elif variant != "task":
        raise ValueError(f"unknown input variant {variant!r}")
    return inputs


def nbytes(x: Any) -> int:
    return sum(t.numel() * t.element_size() for _, t in leaves(x) if isinstance(t, torch.Tensor))
