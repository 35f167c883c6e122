"""A runner that could not start because the device had no memory for its context (other processes hold it; no
candidate code has run in it) is contention: the verdict waits for memory and starts another, up to a bound, and
only a start that fails for another reason, or the bound passed, ends it."""

from __future__ import annotations

import threading

import pytest

from evaluator.processes.handle import WorkerError
from evaluator.stages.device.stage import start_runner

CUDA_OOM = ("the runner failed to start: AcceleratorError: CUDA error: out of memory\n"
            "Search for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/")


class Runner:
    def __init__(self, n: int, fails: str | None) -> None:
        self.n, self.fails = n, fails

    def wait_ready(self, cancel: threading.Event | None = None) -> None:
        if self.fails:
            raise WorkerError("crashed", self.fails)


class Runners:
    def __init__(self, fails: list[str | None]) -> None:
        self.fails, self.given, self.released = list(fails), [], []

    def acquire(self, cancel: threading.Event | None = None) -> Runner:
        r = Runner(len(self.given), self.fails.pop(0))
        self.given.append(r)
        return r

    def release(self, r: Runner, tainted: bool) -> None:
        self.released.append((r.n, tainted))


def test_a_start_short_of_device_memory_waits_for_it_and_starts_another() -> None:
    pool, waits, notes = Runners([CUDA_OOM, CUDA_OOM, None]), [], []
    r, _ = start_runner(pool, None, lambda left: waits.append(left) or True, 60.0, notes.append)  # type: ignore[arg-type]
    assert r.n == 2 and len(waits) == 2 and all(0 < w <= 60.0 for w in waits)
    assert pool.released == [(0, True), (1, True)]  # the ones that failed went back, never reused
    assert len(notes) == 2 and "out of memory" in notes[0].message


def test_memory_that_never_comes_or_cannot_be_told_ends_it_with_the_starts_error() -> None:
    pool = Runners([CUDA_OOM, None])
    with pytest.raises(WorkerError, match="out of memory"):
        start_runner(pool, None, lambda left: False, 60.0, lambda e: None)  # type: ignore[arg-type]
    assert len(pool.given) == 1


def test_any_other_failure_or_no_device_to_wait_on_ends_it_at_once() -> None:
    pool = Runners(["the runner failed to start: ImportError: no module named torch", None])
    with pytest.raises(WorkerError, match="ImportError"):
        start_runner(pool, None, lambda left: True, 60.0, lambda e: None)  # type: ignore[arg-type]
    assert len(pool.given) == 1
    pool = Runners([CUDA_OOM, None])
    with pytest.raises(WorkerError, match="out of memory"):
        start_runner(pool, None, None, 60.0, lambda e: None)  # type: ignore[arg-type]  # the CPU: no wait
    assert len(pool.given) == 1


def test_the_bound_holds_across_tries_and_runs_from_the_first_failure() -> None:
    import time

    pool = Runners([CUDA_OOM] * 3 + [None])
    with pytest.raises(WorkerError, match="out of memory"):
        start_runner(pool, None, lambda left: time.sleep(0.25) or True, 0.2, lambda e: None)  # type: ignore[arg-type]
    assert len(pool.given) == 2  # waited once, tried again, and the bound had passed

    # a caller that waited for a pool's slot (other candidates' runners) longer than the bound still waits
    slow = Runners([CUDA_OOM, None])
    real = slow.acquire
    slow.acquire = lambda cancel=None: (time.sleep(0.3), real(cancel))[1]  # type: ignore[method-assign]
    waits: list[float] = []
    r, secs = start_runner(slow, None, lambda left: waits.append(left) or True, 0.2,  # type: ignore[arg-type]
                           lambda e: None)
    assert r.n == 1 and len(waits) == 1 and waits[0] > 0.1
    assert secs < 0.45  # its start: the second slot wait (0.3 s) is in it, the first is not
