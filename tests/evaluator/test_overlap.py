"""Calls that overlap each other across a timed request (GPU): every call's work is on the clock, but a runner that
queues independent calls on several streams runs them side by side, which a caller running forward once at a time
never sees. The timing step also times each side's calls one request per call; where the candidate's calls ran
markedly faster in a request of many than alone (more than the reference's), its figures are the single calls'.

The device is simulated: the stage's requests return the times a GPU would give (figures from the H200: an honest
scale-bias-ReLU kernel 1.32x eager, the same kernel with half of each request on a side stream 2.01x)."""

from __future__ import annotations

import random
import threading
from contextlib import contextmanager
from typing import Any

import pytest

from evaluator import messages as M
from evaluator.processes.devmon import FakeMonitor
from evaluator.settings import EvalSettings
from evaluator.stages.device.session import RefereeHandle, Request
from evaluator.stages.device.stage import DeviceStage
from evaluator.stages.device.time import overlapped

HARNESS_MS = 0.40  # the outside clock's own cost of a request (IPC, signals, the idle probe)
EAGER_MS = 3.0  # one reference call
HONEST_MS = 2.27  # one call of the honest kernel (1.32x)


class SimulatedGpu(DeviceStage):
    """The timing step's requests against a simulated device: `ways` of the candidate's calls in a request run side
    by side (1: one after another, as a caller sees them)."""

    def __init__(self, cand_ms: float, ways: int, launch_ms: float = 0.0, fixed_ms: float = 0.0) -> None:
        info = M.ReferenceLoaded(init_args=[], in_bytes=0, out_bytes=0, ref_mutates=False, slots_max=64, set_bytes=0)
        ref = RefereeHandle(worker=None, key="k", info=info, init_seed=0)  # type: ignore[arg-type]
        super().__init__(EvalSettings(time_compiled=False), ref, None, "cuda:0", "", threading.Event(),  # type: ignore[arg-type]
                         lambda a, b: None, profile=False, time_it=True)
        self.runner = object()  # type: ignore[assignment]
        self.monitor = FakeMonitor()
        self.n_slots = 64
        self.call_ms = [cand_ms + HARNESS_MS]
        self.cand_ms, self.ways, self.launch_ms, self.fixed_ms = cand_ms, ways, launch_ms, fixed_ms
        self.rng = random.Random(7)
        self.single_requests = 0
        self.ref.roofline = M.RooflineReport(bytes=0, bytes_read=0, bytes_written=0, flops=0.0, roofline_ms=None,
                                             bound="", bandwidth_gbs=0.0, tflops=0.0)

    def _noise(self) -> float:
        return self.rng.gauss(0.0, 0.004)

    def _request(self, n: int, variant: str = "task", few: bool = False) -> Request:
        return Request(slots=list(range(n)), outs=list(range(n)), seeds=[0] * n, args=[[]] * n, fresh=[False] * n)

    def _fill(self, req: Request, poison: bool, keep: bool = False) -> bool:
        return True

    @contextmanager
    def _alone(self):  # type: ignore[override]
        yield

    def _harness(self, req: Request) -> float:
        return HARNESS_MS + 0.002 * len(req.slots) + self._noise()

    def _reference_request(self, req: Request, which: str = "eager") -> float:
        return HARNESS_MS + 0.002 * len(req.slots) + EAGER_MS * len(req.slots) + self._noise()

    def _candidate_request(self, req: Request, stage: str, poison: bool = True, keep: bool = False) -> Any:
        n = len(req.slots)
        if n == 1:
            self.single_requests += 1
        busy = self.launch_ms + self.cand_ms * -(-n // self.ways)  # `ways` calls at a time
        claim = M.RunClaim(calls=n, scalars=[{} for _ in range(n)], problems=[[] for _ in range(n)])
        return HARNESS_MS + self.fixed_ms + 0.002 * n + busy + self._noise(), claim

    def _check(self, req: Request, claim: M.RunClaim, picks: list[int], precision: bool = False) -> list[Any]:
        return [M.CheckResult(match=True, message="") for _ in picks]

    def _idle_checks(self, after: str) -> None:
        pass

    def _neighbours_since(self, since: float) -> None:
        pass


@pytest.mark.parametrize("ways", [1, 2])
def test_calls_overlapped_across_a_request_are_timed_one_at_a_time(ways: int) -> None:
    st = SimulatedGpu(HONEST_MS, ways)
    st._time()
    t = st.out.timing
    assert t is not None and t.speedup_eager is not None
    assert st.single_requests >= 3 and t.single_call is not None and t.eager_single_call is not None
    # the honest kernel's figure and the overlapping one's are the same: what one call costs
    assert t.speedup_eager == pytest.approx(EAGER_MS / HONEST_MS, rel=0.03)
    if ways == 1:
        assert not t.overlap and (t.batch_calls or 0) > 1
    else:
        assert t.batch_calls == 1 and "its calls overlapped each other" in t.overlap
        assert t.overlap in st.out.warnings


def test_a_candidate_with_more_launches_than_the_reference_is_not_called_overlapped() -> None:
    """What a request of many hides of a call (its launch latency) is not overlap: a candidate whose launches cost
    more than the reference's keeps its figures from requests of many."""
    st = SimulatedGpu(0.10, 1, launch_ms=0.008)
    st._time()
    t = st.out.timing
    assert t is not None and not t.overlap


def test_a_fixed_cost_left_over_on_the_candidates_side_is_not_overlap() -> None:
    """Both sides' requests pay the same fixed costs (a worker woken, the GPU switched to its context and back);
    what is left over on one side (15 µs a request, against 0.1 ms calls) is no overlap."""
    st = SimulatedGpu(0.10, 1, fixed_ms=0.015)
    st._time()
    t = st.out.timing
    assert t is not None and not t.overlap and (t.batch_calls or 0) > 1


@pytest.mark.parametrize(("cand", "eager", "one_c", "one_e", "expect"), [
    ([1.13] * 9, [3.0] * 9, [2.27] * 7, [3.0] * 7, True),  # two calls at a time
    ([2.27] * 9, [3.0] * 9, [2.28] * 7, [3.0] * 7, False),  # one after another
    ([0.10] * 9, [0.12] * 9, [0.115] * 7, [0.13] * 7, False),  # a launch a request of many hides, on both sides
    ([0.10] * 9, [0.12] * 9, [0.16] * 7, [0.125] * 7, True),  # 60 % of a call hidden on its side only
    ([1.13] * 9, [3.0] * 9, [2.27] * 2, [3.0] * 2, False),  # too few single calls to say
])
def test_the_overlap_rule(cand: list[float], eager: list[float], one_c: list[float], one_e: list[float],
                          expect: bool) -> None:
    assert bool(overlapped(cand, eager, one_c, one_e, spread_ms=0.002)) is expect


def test_the_single_calls_own_spread_is_not_overlap() -> None:
    """Requests of one call vary by more than a call's hidden part: nothing is said."""
    assert overlapped([0.05] * 9, [0.06] * 9, [0.058] * 7, [0.06] * 7, spread_ms=0.01) == ""
