"""Whose work is on the GPU (`evaluator/processes/devmon.py`): attribution over a scripted device, the unavailable monitor
on a machine without NVML, and (with a GPU) the real monitor finding this process's memory and load."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import pytest

from evaluator.processes import devmon
from evaluator.processes.devmon import (
    Attribution,
    DeviceMonitor,
    FakeMonitor,
    Neighbour,
    attribute,
    neighbours,
    open_monitor,
)

# above any pid_max: no /proc entry, so each is named "pid N"
OURS, CAND, OTHER, FOURTH = 99_000_001, 99_000_002, 99_000_003, 99_000_004
GB = 2**30


def _device(**kw) -> FakeMonitor:
    return FakeMonitor({OURS: 2 * GB, CAND: 3 * GB, OTHER: int(14.1 * GB)}, **kw)


def test_only_another_process_busy() -> None:
    a = attribute(_device(samples=[(10.0, OTHER, 87.0), (11.0, OURS, 40.0)]), {CAND}, {OURS}, since_s=5.0)
    assert a.known and a.candidate == {} and a.others == [Neighbour(OTHER, f"pid {OTHER}", int(14.1 * GB), 87.0)]
    assert a.describe() == f"another process used the GPU meanwhile: pid {OTHER} (87 % SM, 14.1 GB)"


def test_only_the_candidate_busy() -> None:
    a = attribute(_device(samples=[(10.0, CAND, 99.0), (10.5, CAND, 60.0)]), {CAND}, {OURS}, since_s=5.0)
    assert a.known and a.candidate == {CAND: 99.0} and a.others == []
    assert a.describe() == f"the candidate's processes kept the GPU busy (pid {CAND}, 99 % SM)"


def test_both_busy_and_the_busiest_neighbour_first() -> None:
    m = _device(samples=[(10.0, CAND, 50.0), (10.0, OTHER, 30.0)])
    m.add(FOURTH, 90.0, at=11.0, memory=GB // 2)
    a = attribute(m, {CAND}, {OURS}, since_s=5.0)
    assert a.candidate == {CAND: 50.0} and [n.pid for n in a.others] == [FOURTH, OTHER]
    assert a.describe() == (f"2 other processes used the GPU meanwhile: pid {FOURTH} (90 % SM, 512 MB), "
                            f"pid {OTHER} (30 % SM, 14.1 GB); the candidate's too (pid {CAND}, 50 % SM)")


def test_nobody_busy_samples_before_since_or_idle() -> None:
    m = _device(samples=[(4.0, OTHER, 100.0), (10.0, OTHER, 0.0), (10.0, CAND, 0.5)])
    a = attribute(m, {CAND}, {OURS}, since_s=5.0)
    assert a.known and not a.candidate and not a.others
    assert a.describe() == "nobody kept the GPU busy meanwhile"


def test_the_script_changes_while_it_runs() -> None:
    m, t0 = _device(), time.time()
    assert attribute(m, {CAND}, {OURS}, t0 - 1).describe() == "nobody kept the GPU busy meanwhile"
    m.add(OTHER, 70.0)
    assert [n.pid for n in attribute(m, {CAND}, {OURS}, t0 - 1).others] == [OTHER]
    m.add(CAND, 80.0)
    a = attribute(m, {CAND}, {OURS}, t0 - 1)
    assert a.candidate == {CAND: 80.0} and len(a.others) == 1
    assert attribute(m, {CAND}, {OURS}, time.time() + 1).describe() == "nobody kept the GPU busy meanwhile"


def test_an_untrustworthy_pid_view_is_not_known() -> None:
    """A container without the host's PID namespace: NVML's pids are the host's, ours appear nowhere."""
    m = FakeMonitor({123456: 2 * GB, 123457: 3 * GB}, [(10.0, 123457, 99.0)])
    a = attribute(m, {CAND}, {OURS}, since_s=5.0)
    assert not a.known and not a.others and "PID namespace" in a.reason
    assert a.describe().startswith("whose work was on the GPU is not known: NVML lists none of our processes")
    assert neighbours(m, {OURS}) == []


def test_failures_and_no_monitor_are_not_known() -> None:
    a = attribute(FakeMonitor({OURS: GB}, error="per-process utilisation: NVML error 3 (Not Supported)"),
                  {CAND}, {OURS}, 0.0)
    assert not a.known and "Not Supported" in a.reason
    for m in (DeviceMonitor("NVML not found"), FakeMonitor(available=False, reason="NVML not found")):
        assert attribute(m, {CAND}, {OURS}, 0.0) == Attribution(False, "NVML not found")
        assert neighbours(m, {OURS}) == []


def test_names_from_proc_for_a_real_pid() -> None:
    me = os.getpid()
    comm = Path(f"/proc/{me}/comm").read_text().strip()
    a = attribute(FakeMonitor({OURS: GB, me: 3 * GB}, [(10.0, me, 87.0)]), {CAND}, {OURS}, 5.0)
    assert a.others == [Neighbour(me, comm, 3 * GB, 87.0)]
    assert a.describe() == f"another process used the GPU meanwhile: {comm} (pid {me}, 87 % SM, 3.0 GB)"
    assert devmon.process_name(OTHER) == f"pid {OTHER}"


def test_neighbours_are_the_memory_holders_not_ours() -> None:
    m = _device()
    assert [(n.pid, n.memory) for n in neighbours(m, {OURS})] == [(OTHER, int(14.1 * GB)), (CAND, 3 * GB)]
    assert m.free_bytes() == (80 * GB - int(19.1 * GB), 80 * GB)
    assert str(Neighbour(OTHER, f"pid {OTHER}")) == f"pid {OTHER}"  # memory unknown, no load asked


def test_uuid_forms() -> None:
    u = "6f3b1c2e-1111-2222-3333-444455556666"
    assert devmon._uuid_forms(u) == [f"GPU-{u}", f"MIG-{u}"]
    assert devmon._uuid_forms(f" GPU-{u}\n") == [f"GPU-{u}"]


def test_without_nvml_the_monitor_is_unavailable_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    m = open_monitor()  # whatever this machine has: never raises
    assert isinstance(m, DeviceMonitor) and (m.available or m.reason)

    def no_lib(name: str, *a: object, **kw: object) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(devmon, "_state", None)
    monkeypatch.setattr(ctypes, "CDLL", no_lib)
    for m in (open_monitor(), open_monitor(uuid="GPU-0000"), open_monitor(index=3)):
        assert not m.available and m.reason == "NVML not found (libnvidia-ml.so.1)"
        assert m.processes() == {} and m.busy(0.0) == {} and m.device_busy() is None and m.free_bytes() is None
    monkeypatch.setattr(devmon, "_state", None)  # the next test loads the real library again, if there is one


@pytest.mark.gpu
def test_the_real_monitor_sees_this_process() -> None:
    torch = pytest.importorskip("torch")
    m = open_monitor(str(torch.cuda.get_device_properties(0).uuid))
    assert m.available, m.reason
    x = torch.ones(64 * 2**20, device="cuda")  # 256 MB
    torch.cuda.synchronize()
    procs, me = m.processes(), os.getpid()
    assert procs and max(procs.values()) >= x.nbytes, procs  # a struct of the wrong layout reads garbage here
    if me not in procs:
        pytest.skip(f"NVML's pids are another PID namespace's (pid {me} not in {sorted(procs)})")
    assert procs[me] > 0 and attribute(m, set(), {me}, time.time()).known
    free, total = m.free_bytes() or (0, 0)
    assert 0 < free < total
    a = torch.randn(4096, 4096, device="cuda")
    since, deadline, seen = time.time(), time.monotonic() + 8.0, {}
    while me not in seen and time.monotonic() < deadline:
        for _ in range(50):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
        seen = m.busy(since)
    assert seen.get(me, 0) > 0, seen
    assert (m.device_busy() or 0) > 0
    got = attribute(m, {me}, set(), since)
    assert got.known and me in got.candidate, got
