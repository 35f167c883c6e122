"""Both sides: the device a worker runs on, and what its ready message says of torch and the device (what the
device can run: torch's facts only, no decision)."""

from __future__ import annotations

import os
from typing import Any

import torch


def arch_list() -> str:
    """TORCH_CUDA_ARCH_LIST for the visible devices, clamped to what this torch supports (never hard-coded)."""
    archs: list[tuple[int, int]] = []
    supported = [int(a.split("_")[1].rstrip("a").rstrip("f")) for a in torch.cuda.get_arch_list() if a.startswith("sm_")]
    top = max(((s // 10, s % 10) for s in supported), default=(99, 9))
    for i in range(torch.cuda.device_count()):
        cap = min(torch.cuda.get_device_capability(i), top)
        if cap not in archs:
            archs.append(cap)
    if not archs:
        return ""
    archs.sort()
    items = [f"{a}.{b}" for a, b in archs]
    items[-1] += "+PTX"
    return ";".join(items)


def device() -> Any:
    """The device this worker runs on (its CUDA context made now, while nobody waits), and its intra-op threads:
    the same number in the referee and the runner (KLSP_CPU_THREADS), so both sides run under the same conditions."""
    threads = int(os.environ.get("KLSP_CPU_THREADS") or 0)
    if threads > 0:
        torch.set_num_threads(threads)

    want = os.environ.get("KLSP_DEVICE", "cpu")
    if want.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA was asked for but torch.cuda.is_available() is False")
        dev = torch.device(want if ":" in want else "cuda:0")
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)
        return dev
    return torch.device("cpu")


def describe_torch(ready: dict) -> None:
    ready["torch"] = torch.__version__
    ready["torch_cuda"] = torch.version.cuda
    ready["cuda_available"] = torch.cuda.is_available()


def describe_device(ready: dict, dev: Any) -> None:
    ready["device"] = str(dev)
    ready["device_name"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    if dev.type == "cuda":
        ready["arch_list"] = os.environ.get("TORCH_CUDA_ARCH_LIST") or arch_list()
