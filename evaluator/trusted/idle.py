"""Trusted (the referee): the device-idle probe. The evaluator's clock of a timed request stops once the referee
sees the device idle: work the candidate left queued or running on the GPU delays the referee's own probe (the GPU
time-slices between processes), so it is counted."""

from __future__ import annotations

import statistics
import time

import torch

from .. import messages as M


class IdleProbe:
    """A one-element kernel and a synchronisation, timed; calibrated on the idle device (`calibrate`, at load)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.probe: torch.Tensor | None = None
        self.idle_limit_s = 0.0

    def calibrate(self) -> None:
        """How long a probe of ours takes (a one-element kernel and a synchronisation) on an idle device."""
        self.probe = torch.zeros(1, device=self.device)
        samples = []
        for _ in range(30):
            t0 = time.perf_counter()
            self.probe.add_(1.0)
            torch.cuda.synchronize(self.device)
            samples.append(time.perf_counter() - t0)
        self.idle_limit_s = 3 * statistics.median(samples) + 50e-6

    def wait(self, bound_s: float = M.IDLE_BOUND_S) -> M.IdleReport:
        """GPU: returns once the device is idle, as a probe of this process sees it: two probes in a row as fast as
        on an idle device (work another process left queued or running delays them: the GPU time-slices between
        processes). The evaluator's clock of a timed request stops after this. Not idle after `bound_s`: says so
        (the evaluator asks again, or decides whose work it was). CPU: at once (the runner is stopped by a signal
        when it replies)."""
        if self.device.type != "cuda":
            return M.IdleReport(idle=True)
        if self.probe is None:
            self.calibrate()
        assert self.probe is not None
        t_start = time.perf_counter()
        fast = probes = 0
        first_fast = t_start
        while fast < 2:
            t0 = time.perf_counter()
            self.probe.add_(1.0)
            torch.cuda.synchronize(self.device)
            dt = time.perf_counter() - t0
            probes += 1
            if dt <= self.idle_limit_s:
                fast += 1
                if fast == 1:
                    first_fast = t0
            else:
                fast = 0
            if time.perf_counter() - t_start > bound_s:
                return M.IdleReport(idle=False, probes=probes, waited_ms=(time.perf_counter() - t_start) * 1e3)
        return M.IdleReport(idle=True, probes=probes, waited_ms=(time.perf_counter() - t_start) * 1e3,
                            idle_at=first_fast)
