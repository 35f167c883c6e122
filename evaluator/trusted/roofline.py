"""Trusted (the referee): the reference's roofline. Bytes and FLOPs of one reference call (what it really reads
and writes, FLOPs of matmuls/convs), the lower bound on time they imply at the device's peak bandwidth and
throughput, and the physical floor: the inputs' bytes at the highest bandwidth the hardware has (no honest call
reads its inputs faster)."""

from __future__ import annotations

from typing import Any

import torch

from .. import messages as M
from ..shared.tree import leaves


def roofline(model: Any, gen: list, device: torch.device, limits: dict) -> M.RooflineReport:
    """The roofline of one call of `model` on the inputs `gen`, by `limits` (the device's peaks)."""
    from torch.utils.flop_counter import FlopCounterMode

    tensors = [t for _, t in leaves(gen) if isinstance(t, torch.Tensor)]
    traffic = Traffic(tensors)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter, traffic.mode():
        out = model(*gen)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    written = sum(t.numel() * t.element_size() for _, t in leaves(out) if isinstance(t, torch.Tensor))
    nbytes = traffic.bytes_read() + written
    flops = float(counter.get_total_flops())
    bw = float(limits.get("roofline_bandwidth_gbs") or limits.get("bandwidth_gbs") or 0)
    tf = float(limits.get("roofline_tflops") or limits.get("peak_tflops") or 0)
    phys = float(limits.get("physical_bandwidth_gbs") or 0)
    t_mem = nbytes / (bw * 1e9) * 1e3 if bw else 0.0
    t_comp = flops / (tf * 1e12) * 1e3 if tf else 0.0
    floor = traffic.bytes_read() / (phys * 1e9) * 1e3 if phys else None
    return M.RooflineReport(bytes=int(nbytes), bytes_read=int(traffic.bytes_read()), bytes_written=int(written),
                            flops=flops, roofline_ms=max(t_mem, t_comp) or None,
                            bound="compute" if t_comp > t_mem else "memory", bandwidth_gbs=bw, tflops=tf,
                            source=str(limits.get("roofline_source", "")), floor_ms=floor or None)


class Traffic:
    """Bytes the reference really reads from its inputs (per input storage: the most any one operator reads of
    it; view operators read nothing) while it runs under a TorchDispatchMode."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        self.size = {}
        for t in tensors:
            st = t.untyped_storage()
            self.size[st.data_ptr()] = st.nbytes()
        self.read: dict[int, int] = {}

    def mode(self) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                out = func(*args, **(kwargs or {}))
                if not getattr(func, "is_view", False):
                    for _, a in leaves([list(args), dict(kwargs or {})]):
                        if isinstance(a, torch.Tensor):
                            try:
                                p = a.untyped_storage().data_ptr()
                            except (RuntimeError, NotImplementedError):
                                continue
                            if p in outer.size:
                                outer.read[p] = max(outer.read.get(p, 0), a.numel() * a.element_size())
                return out

        return Mode()

    def bytes_read(self) -> int:
        return sum(min(v, self.size[p]) for p, v in self.read.items())

