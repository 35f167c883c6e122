"""The comparison's tolerance, in the referee's own terms (no candidate, no worker): a valid reduction in another
summation order passes at fp32 tolerance; a precision downgrade, a perturbed element and zeros do not."""

import pytest
import torch

from evaluator.trusted.compare import Mismatch, compare_tensor


def _sequential_row_sums(x: torch.Tensor, parts: int) -> torch.Tensor:
    """fp32 sums the way a per-thread OpenMP reduction does them: `parts` sequential partial sums, then added."""
    chunks = torch.tensor_split(x, parts, dim=1)
    total = torch.zeros(x.shape[0], dtype=torch.float32)
    for c in chunks:
        acc = torch.zeros(x.shape[0], dtype=torch.float32)
        for j in range(c.shape[1]):
            acc += c[:, j]
        total += acc
    return total


def test_reduction_in_another_order_passes_everywhere():
    # rows whose sum lands near zero carry the rounding of terms of size ~64: an absolute 1e-4 alone refuses them
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(96, 4099, generator=g)
        ref = x.sum(dim=-1)
        compare_tensor("output", ref, _sequential_row_sums(x, 2), 1e-4, 1e-4)
        compare_tensor("output", ref * 8, _sequential_row_sums(x * 8, 3), 1e-4, 1e-4, ood=True)


def test_precision_downgrade_and_perturbation_fail():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 512, generator=g), torch.randn(512, 128, generator=g)
    ref = a @ b
    with pytest.raises(Mismatch):
        compare_tensor("output", ref, (a.bfloat16() @ b.bfloat16()).float(), 1e-4, 1e-4)
    bad = ref.clone()
    bad[3, 7] += 1e-2 * float(ref.pow(2).mean().sqrt())  # 1 % of the output's RMS, one element
    with pytest.raises(Mismatch, match=r"1 of 16384 elements"):
        compare_tensor("output", ref, bad, 1e-4, 1e-4)


def test_zeros_never_pass_small_outputs():
    ref = torch.full((64,), 1e-6)
    with pytest.raises(Mismatch, match="all zero"):
        compare_tensor("output", ref, torch.zeros(64), 1e-4, 1e-4)
