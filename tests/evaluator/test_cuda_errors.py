"""Sticky CUDA errors reported by a device worker are crashes of the candidate, not infrastructure failures.

The message below is the one torch 2.11 raised on the H200 for a kernel writing out of bounds."""

import pytest

from evaluator.stages.device.session import _CUDA_FATAL

H200_ILLEGAL = (
    "AcceleratorError: CUDA error: an illegal memory access was encountered\n"
    "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
)


@pytest.mark.parametrize("msg", [
    H200_ILLEGAL,
    "RuntimeError: CUDA error: unspecified launch failure",
    "RuntimeError: CUDA error: misaligned address",
    "RuntimeError: CUDA error: device-side assert triggered",
])
def test_fatal_cuda_errors_are_recognised(msg: str) -> None:
    assert _CUDA_FATAL.search(msg)


@pytest.mark.parametrize("msg", [
    "RuntimeError: Expected all tensors to be on the same device",
    "ImportError: cannot import name 'x'",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
])
def test_other_errors_are_not(msg: str) -> None:
    assert not _CUDA_FATAL.search(msg)
