"""Whose work kept the device busy, decided by the device stage with a scripted device monitor (no GPU needed).

The candidate's work is the candidate's (`tampered` when it runs where nothing of it may); another process's work is
contention: named, making the figures uncertain, never the candidate's fault; where nobody can tell whose, the
candidate's processes are killed and the device going idle then decides.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from evaluator import messages as M
from evaluator import verdict as V
from evaluator.processes.devmon import FakeMonitor
from evaluator.settings import EvalSettings
from evaluator.stages.device import session
from evaluator.stages.device.session import RefereeHandle, Stop
from evaluator.stages.device.stage import DeviceStage

CANDIDATE, REFEREE, NEIGHBOUR = 4001, 4002, 4003


class FakeWorker:
    def __init__(self, pid: int, idle_after_kill: bool = True) -> None:
        self.pid = self.worker_pid = pid
        self.dead = False
        self.replies: list[M.IdleReport] = []

    def processes(self) -> list[int]:
        return [self.pid]

    def ask(self, op: M.Op, req: Any, **kw: Any) -> tuple[Any, list[int]]:
        assert op is M.RefereeOps.idle
        return self.replies.pop(0), []


class FakePool:
    closed = False

    def __init__(self) -> None:
        self.released: list[Any] = []
        self.monitor: Any = None  # its released (killed) workers' device memory goes back there

    def release(self, w: Any, tainted: bool) -> None:
        self.released.append(w)
        w.dead = True
        for mem in (getattr(self.monitor, "memory", {}), getattr(self.monitor, "truth", {})):
            mem.pop(w.pid, None)


def _stage(monitor: FakeMonitor, referee_replies: list[M.IdleReport] | None = None) -> tuple[DeviceStage, FakePool]:
    info = M.ReferenceLoaded(init_args=[], in_bytes=0, out_bytes=0, ref_mutates=False, slots_max=1, set_bytes=0)
    ref = RefereeHandle(worker=FakeWorker(REFEREE), key="k", info=info, init_seed=0)  # type: ignore[arg-type]
    ref.worker.replies = list(referee_replies or [])
    pool = FakePool()
    st = DeviceStage(EvalSettings(), ref, pool, "cuda:0", "", threading.Event(), lambda a, b: None,  # type: ignore[arg-type]
                     profile=False, time_it=True)
    st.runner = FakeWorker(CANDIDATE)  # type: ignore[assignment]
    st.monitor = pool.monitor = monitor
    return st, pool


BUSY_60S = M.IdleReport(idle=False, probes=900, waited_ms=60_000.0)
SLOW_IDLE = M.IdleReport(idle=True, probes=40, waited_ms=180.0, idle_at=time.perf_counter())
IDLE = M.IdleReport(idle=True, probes=2, waited_ms=0.1, idle_at=time.perf_counter())


def _monitor(*busy: int) -> FakeMonitor:
    now = time.time()
    m = FakeMonitor(memory={REFEREE: 2 << 30, CANDIDATE: 1 << 30, NEIGHBOUR: 14 << 30})
    for pid in busy:
        m.add(pid, 90.0, at=now + 0.01)
    return m


def test_another_process_busy_is_contention_named_never_the_candidates() -> None:
    st, _ = _stage(_monitor(NEIGHBOUR))
    st._busy_device(SLOW_IDLE, time.time() - 1, "time", "before its inputs were written")
    assert st.contention and "another process used the GPU" in st.contention[0]
    assert f"pid {NEIGHBOUR}" in st.contention[0]


def test_the_candidate_busy_before_its_inputs_are_written_is_tampered() -> None:
    st, _ = _stage(_monitor(CANDIDATE))
    with pytest.raises(Stop) as e:
        st._busy_device(SLOW_IDLE, time.time() - 1, "time", "before its inputs were written")
    assert e.value.status == V.TAMPERED and "candidate's processes kept the GPU busy" in e.value.message


def test_the_candidates_own_work_inside_its_clocked_request_is_not_a_fault() -> None:
    st, _ = _stage(_monitor(CANDIDATE))
    st._busy_device(SLOW_IDLE, time.time() - 1, "time", "after the candidate's request returned", on_clock=True)
    assert not st.contention


def test_both_busy_and_the_device_never_idle_blames_the_candidate_only_for_its_own_work() -> None:
    st, _ = _stage(_monitor(CANDIDATE, NEIGHBOUR))
    with pytest.raises(Stop) as e:
        st._busy_device(BUSY_60S, time.time() - 1, "time", "after the candidate's request returned", on_clock=True)
    assert e.value.status == V.TAMPERED  # still running 60 s after its request: its work, whoever else was there
    st, _ = _stage(_monitor(CANDIDATE, NEIGHBOUR))
    st._busy_device(SLOW_IDLE, time.time() - 1, "time", "before its inputs were written")
    assert st.contention  # busy a moment with a neighbour there too: contention, not a verdict


def test_a_neighbour_busy_for_the_whole_wait_is_not_the_candidates_fault() -> None:
    st, _ = _stage(_monitor(NEIGHBOUR))
    idle = st._busy_device(BUSY_60S, time.time() - 1, "time", "after the candidate's request returned", on_clock=True)
    assert not idle.idle and st.contention and f"pid {NEIGHBOUR}" in st.contention[0]


LOOK = M.IdleReport(idle=False, probes=300, waited_ms=session.IDLE_LOOK_S * 1e3)


def test_a_device_another_process_never_leaves_idle_ends_the_wait_at_the_first_look() -> None:
    """A training job beside the oracle keeps the device busy without a gap: after one look (not a minute), NVML
    showing nothing of the candidate's ends the wait as contention, named; no probe is asked again."""
    st, _ = _stage(_monitor(NEIGHBOUR))  # the referee has no replies: asking again would fail the test
    assert st._idle_bound() == session.IDLE_LOOK_S
    t0, before = time.monotonic(), time.perf_counter()
    idle = st._busy_device(LOOK, time.time() - 4, "time", "after the candidate's request returned", on_clock=True)
    assert time.monotonic() - t0 < 1.0 and not idle.idle
    assert before <= idle.idle_at <= time.perf_counter()  # the request's clock runs to the end of the wait
    assert st.contention and "never idle for 3.0 s" in st.contention[0] and f"pid {NEIGHBOUR}" in st.contention[0]
    st, _ = _stage(_monitor(NEIGHBOUR))  # before the inputs are written: the same
    st._busy_device(LOOK, time.time() - 4, "time", "before its inputs were written")
    assert st.contention and f"pid {NEIGHBOUR}" in st.contention[0]


def test_a_sibling_candidate_that_never_leaves_the_device_idle_makes_the_figures_uncertain() -> None:
    """Another candidate of the same evaluation (best-of-n) keeping the device busy is no neighbour to name as
    another process, but the wait it caused is on this request's clock: said, so the figures are uncertain."""
    sibling = 4004
    m = _monitor(sibling)
    st, _ = _stage(m)
    st.our_pids = lambda: {sibling}
    idle = st._busy_device(LOOK, time.time() - 4, "time", "after the candidate's request returned", on_clock=True)
    assert not idle.idle and st.never_idle
    assert st.contention and "this evaluation's other candidates (pids 4004)" in st.contention[0]


def test_the_candidates_work_from_before_its_answer_does_not_keep_the_wait_going() -> None:
    """An NVML sample can cover work from just before it: the candidate's samples in the wait's first second are its
    request's own work, not work it left running."""
    now = time.time()
    m = _monitor()
    m.add(CANDIDATE, 80.0, at=now - session.IDLE_LOOK_S + 0.3)  # the wait began IDLE_LOOK_S ago
    m.add(NEIGHBOUR, 60.0, at=now)
    st, _ = _stage(m)
    idle = st._busy_device(LOOK, now - 4, "time", "after the candidate's request returned", on_clock=True)
    assert not idle.idle and st.contention


def test_the_candidates_work_late_in_the_wait_keeps_it_going_on_its_clock() -> None:
    """Its work still on the device after its answer, beside a neighbour's: the wait goes on (on its clock) until the
    device is idle; it never ends early as contention."""
    st, _ = _stage(_monitor(CANDIDATE, NEIGHBOUR), [M.IdleReport(idle=True, probes=2, waited_ms=500.0, idle_at=7.0)])
    idle = st._busy_device(LOOK, time.time() - 4, "time", "after the candidate's request returned", on_clock=True)
    assert idle.idle and idle.idle_at == 7.0 and idle.waited_ms == pytest.approx(session.IDLE_LOOK_S * 1e3 + 500.0)
    assert st.ref.worker.replies == []  # asked once more


def test_without_nvml_the_wait_is_one_probe_of_the_whole_bound() -> None:
    st, _ = _stage(FakeMonitor(available=False, reason="NVML not found"))
    assert st._idle_bound() == session.IDLE_WAIT_S


def test_unknown_whose_decided_by_killing_the_candidate() -> None:
    unknown = FakeMonitor(available=False, reason="NVML not found")
    st, pool = _stage(unknown, [M.IdleReport(idle=True, probes=2, waited_ms=1.0)])
    runner = st.runner
    with pytest.raises(Stop) as e:
        st._busy_device(BUSY_60S, time.time() - 1, "time", "after the candidate's request returned", on_clock=True)
    assert pool.released == [runner] and e.value.status == V.TAMPERED
    assert "idle as soon as the candidate's processes were killed" in e.value.message
    st, pool = _stage(unknown, [BUSY_60S])
    with pytest.raises(Stop) as e:
        st._busy_device(BUSY_60S, time.time() - 1, "time", "after the candidate's request returned", on_clock=True)
    assert e.value.status == V.INFRA_ERROR and "another process's work" in e.value.message


def test_unknown_whose_and_idle_after_a_wait_is_contention() -> None:
    st, _ = _stage(FakeMonitor(available=False, reason="NVML not found"))
    st._busy_device(SLOW_IDLE, time.time() - 1, "time", "before its inputs were written")
    assert st.contention and "not known" in st.contention[0]


def test_noise_names_what_was_measured() -> None:
    from evaluator.stages.device.time import _noise

    assert "the device was shared: another process" in _noise(0.05, 0.04, ["another process used the GPU"])
    quiet = _noise(0.05, 0.04, [])
    assert "machine was busy" in quiet or "nothing else seen using the machine" in quiet


def test_memory_held_by_others_is_measured_before_the_import_and_named() -> None:
    m = _monitor()
    st, _ = _stage(m)
    st.ref.info = dataclasses.replace(st.ref.info, total_bytes=80 << 30, in_bytes=4 << 30, out_bytes=1 << 30)
    st.free_at_start = 2 << 30  # measured before the candidate was imported
    line = st._memory_held_by_others()
    assert "2.0 GB of 80.0 GB were free" in line and f"pid {NEIGHBOUR}" in line
    st.free_at_start = 60 << 30
    assert st._memory_held_by_others() == ""


def test_memory_others_took_after_the_candidate_started_is_theirs_but_its_own_is_not() -> None:
    """Admitted with enough free, the candidate runs out because others allocated since (evaluations side by side):
    not its fault. Its own processes' memory, however large, never counts as another's."""
    m = FakeMonitor(memory={REFEREE: 2 << 30, CANDIDATE: 60 << 30, NEIGHBOUR: 72 << 30})
    st, _ = _stage(m)
    st.ref.info = dataclasses.replace(st.ref.info, total_bytes=80 << 30, in_bytes=4 << 30, out_bytes=1 << 30)
    st.free_at_start = 60 << 30
    line = st._memory_held_by_others()  # the task needs 9 GB: 8 GB left beside the neighbour's
    assert "other processes held 72.0 GB of 80.0 GB when it ran out" in line and f"pid {NEIGHBOUR}" in line
    stop = st._failure(M.Failed(error="OutOfMemoryError: CUDA out of memory", kind="exception"), "run", "time")
    assert stop.status == V.INFRA_ERROR and "not the candidate's fault" in stop.message
    assert stop.others_memory  # the evaluation is run again (Evaluator._device_stage)
    m = FakeMonitor(memory={REFEREE: 2 << 30, CANDIDATE: 75 << 30, NEIGHBOUR: 1 << 30})
    st, _ = _stage(m)
    st.ref.info = dataclasses.replace(st.ref.info, total_bytes=80 << 30, in_bytes=4 << 30, out_bytes=1 << 30)
    st.free_at_start = 60 << 30
    assert st._memory_held_by_others() == ""
    stop = st._failure(M.Failed(error="OutOfMemoryError: CUDA out of memory", kind="exception"), "run", "time")
    assert stop.status == V.RUNTIME_ERROR and not stop.others_memory


@pytest.mark.parametrize("runs, status", [(["others", "correct"], V.CORRECT), (["others", "others"], V.INFRA_ERROR),
                                          (["runtime"], V.RUNTIME_ERROR)])
def test_a_candidate_run_out_of_memory_by_other_processes_is_evaluated_again_once(monkeypatch, runs, status) -> None:
    """Other processes' memory ran the candidate out mid-run (measured by the evaluator): the whole device stage
    runs again, once, and its verdict says so; a second such run stays `infra_error`; the candidate's own
    out-of-memory is never run again."""
    from evaluator import api
    from evaluator.stages.device.session import Outcome

    outcomes = {"others": Outcome(status=V.INFRA_ERROR, message="out of memory during timing, but other processes "
                                  "held 72.0 GB of 80.0 GB when it ran out: not the candidate's fault",
                                  others_memory=True),
                "correct": Outcome(status=V.CORRECT, message="correct"),
                "runtime": Outcome(status=V.RUNTIME_ERROR, message="out of memory: CUDA out of memory")}
    asked: list[str] = []

    def once(self, *a, **k):  # type: ignore[no-untyped-def]
        asked.append(runs[len(asked)])
        return dataclasses.replace(outcomes[asked[-1]], warnings=[]), 0.0

    monkeypatch.setattr(api.Evaluator, "_device_stage_once", once)
    monkeypatch.setattr(api.assembly, "device_verdict", lambda run, comp, out, queued, label: out)
    ev = api.Evaluator.__new__(api.Evaluator)
    ev._device_label = "test"
    out = ev._device_stage(None, "", "", None, None, None, True, True)  # type: ignore[arg-type]
    assert asked == runs and out.status == status
    if len(runs) == 2:
        assert out.warnings and out.warnings[0].startswith("evaluated a second time: the first run ended with out of memory")


class HiddenMemoryMonitor(FakeMonitor):
    """NVML that lists the device's processes but cannot tell their memory (-1, as in some containers); its free
    memory is the truth."""

    def __init__(self, truth: dict[int, int]) -> None:
        super().__init__(memory={p: -1 for p in truth})
        self.truth = truth

    def free_bytes(self) -> tuple[int, int] | None:
        return self.total - sum(self.truth.values()), self.total


@pytest.mark.parametrize("mine_gb, theirs_gb, status", [(1, 76, V.INFRA_ERROR), (70, 7, V.RUNTIME_ERROR)])
def test_without_a_per_process_view_what_a_killed_candidate_gave_back_decides(mine_gb: int, theirs_gb: int,
                                                                               status: str) -> None:
    # the device full and nobody's memory known: the candidate's sandbox is killed and the memory that came back is
    # what it held. Within its task's need, with the device still short: others' (seen on an 80 GB card, candidates
    # of 0.75 GB judged runtime_error for memory a neighbour held); more than its need: its own
    m = HiddenMemoryMonitor({REFEREE: 2 << 30, CANDIDATE: mine_gb << 30, NEIGHBOUR: theirs_gb << 30})
    m.total = 80 << 30
    st, pool = _stage(m)
    st.ref.info = dataclasses.replace(st.ref.info, total_bytes=80 << 30, in_bytes=1 << 30, out_bytes=1 << 30)
    st.free_at_start = 60 << 30  # admitted with enough free
    stop = st._failure(M.Failed(error="OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB",
                                kind="exception"), "run", "verify")
    assert stop.status == status, stop.message
    assert pool.released and st.runner is None  # the candidate's run ends either way
    if status == V.INFRA_ERROR:
        assert "they held 1.0 GB" in stop.message and "not the candidate's fault" in stop.message


def test_a_timed_round_waits_for_another_processs_timing_and_says_whose(tmp_path) -> None:
    import subprocess
    import sys

    from evaluator.processes.gate import DeviceGate
    from evaluator.processes.lease import DeviceLease

    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); from evaluator.processes.lease import DeviceLease\n"
            "with DeviceLease('cuda:test', sys.argv[2]).exclusive(who='kernel-lsp bench'):\n"
            "    print('held', flush=True); time.sleep(0.6)\n")
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    p = subprocess.Popen([sys.executable, "-c", code, root, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        gate = DeviceGate(shared=2)
        gate.lease = DeviceLease("cuda:test", str(tmp_path))
        heard: list[tuple[float, list[str]]] = []
        with gate.exclusive(1, None, lambda s, who: heard.append((s, who))) as waited:
            assert waited >= 0.3
        assert heard and heard[0][0] >= 0.3 and any("kernel-lsp bench" in h for h in heard[0][1]), heard
    finally:
        p.wait(timeout=10)


def test_a_neighbour_busy_during_the_timing_rounds_is_named_and_our_own_workers_are_not() -> None:
    ours = 4004  # another candidate's runner of the same evaluator: its gate keeps it off this one's clock
    m = _monitor(NEIGHBOUR)
    m.add(ours, 80.0, at=time.time() + 0.01)
    st, _ = _stage(m)
    st.our_pids = lambda: {ours}
    st._neighbours_since(time.time() - 1)
    assert len(st.contention) == 1 and f"pid {NEIGHBOUR}" in st.contention[0]
    assert f"pid {ours}" not in st.contention[0]
    st, _ = _stage(_monitor(CANDIDATE))
    st._neighbours_since(time.time() - 1)
    assert not st.contention  # the candidate's own work in its rounds is on its clock


def test_a_wait_for_turns_is_not_called_a_timing() -> None:
    st, _ = _stage(_monitor())
    st._note_wait(0.4, [])  # only turns drained (a local model's): nobody's record in the lease
    assert st._lease_warning() == ("waited 0.4 s for the device for other processes' work on it to finish "
                                   "(one timing at a time on a device)")
    st._note_wait(0.2, ["kernel-lsp evaluator pid 77"])
    assert "while kernel-lsp evaluator pid 77 timed on it" in st._lease_warning() and "0.6 s" in st._lease_warning()


def _timed(cand_ms: float, eager_ms: float) -> V.Timing:
    return V.Timing(candidate=V.TimingStats(median_ms=cand_ms, iqr_ms=0.0),
                    eager=V.TimingStats(median_ms=eager_ms, iqr_ms=0.0),
                    speedup_eager=eager_ms / cand_ms, speedup_ci_pct=4.0)


@pytest.mark.parametrize("who", ["candidate", "neighbour", "unknown"])
def test_a_reference_slower_beside_the_candidate_never_makes_a_speedup_nor_a_fault(who: str) -> None:
    """An honest kernel on an idle H200 once got `tampered` here: NVML saw its own timed work (1 % SM), and the
    reference ran 1.54x slower in the rounds than alone. Whoever slowed the reference, the speedup is taken
    against the reference alone (the evaluator's own figure), uncertain, and nobody is blamed."""
    from evaluator.processes.devmon import Attribution, Neighbour
    from evaluator.stages.device.time import against_alone

    att = {"candidate": Attribution(True, candidate={CANDIDATE: 1.0}),
           "neighbour": Attribution(True, others=[Neighbour(NEIGHBOUR, "python3", 15 << 30, 54.0)]),
           "unknown": Attribution(False, "NVML is not available")}[who]
    t = _timed(0.379, 3.125)  # a neighbour's bursts made the reference 14x slower in the rounds
    line = against_alone(t, 0.2163, att)
    assert t.speedup_eager == pytest.approx(0.2163 / 0.379)  # not 8.2x
    assert t.uncertain and t.speedup_ci_pct and t.speedup_ci_pct > 1000  # the interval spans both figures
    assert "14.45x slower beside the candidate's process than alone" in line
    assert ("python3" in line) == (who == "neighbour")
    assert ("NVML is not available" in line) == (who == "unknown")


def test_a_reference_as_fast_beside_the_candidate_as_alone_changes_nothing() -> None:
    from evaluator.processes.devmon import Attribution
    from evaluator.stages.device.time import against_alone

    t = _timed(0.107, 0.141)
    assert against_alone(t, 0.135, Attribution(True, candidate={CANDIDATE: 3.0})) == ""
    assert t.speedup_eager == pytest.approx(0.141 / 0.107) and not t.uncertain and t.speedup_ci_pct == 4.0


def test_an_interval_ends_a_timing_only_after_enough_rounds():
    """Rounds that agree exactly give a zero-width interval at once; the timing still runs CI_MIN_ROUNDS rounds
    before it may stop on it (a spread estimated from five rounds can be far too small to quote)."""
    import contextlib
    import types

    from evaluator.settings import EvalSettings
    from evaluator.stages.device.time import CI_MIN_ROUNDS, Time

    t = Time.__new__(Time)
    t.s = EvalSettings(device="cpu", timing_min_calls=1, warmup_calls=0, timing_budget_s=60.0)
    t.runner = object()
    t.race = None
    t.phases = None
    t.coarse_ms = 0.0  # no CPU time of ended processes
    t._alone = contextlib.nullcontext
    t._request = lambda n: types.SimpleNamespace(n=n)
    t._candidate_request = lambda req, stage: (1.0 + 0.1 * req.n, None)
    t._reference_request = lambda req: 2.0 + 0.1 * req.n
    t._harness = lambda req: 0.1 * req.n
    t._check = lambda req, claim, picks: [types.SimpleNamespace(match=True) for _ in picks]
    t._neighbours_since = lambda since: None
    cand, eager, _, _, _ = t._timed_loop(1)
    assert len(cand) == len(eager) == CI_MIN_ROUNDS


def test_a_6_gb_tasks_need_fits_an_80_gb_card_beside_its_referee() -> None:
    # a verdict of a 6.4 GB task peaked at 3.2-3.6x (inputs + outputs) on an H200, its referee included; the need
    # once counted 5.2x: beside anything else on an 80 GB card a 6 GB task waited out its bound each time
    st, _ = _stage(_monitor())
    gb = 1 << 30
    st.ref.info = dataclasses.replace(st.ref.info, total_bytes=80 * gb, in_bytes=6 * gb, out_bytes=6 * gb,
                                      set_bytes=12 * gb, slots_max=32)
    st.arena_slots = 1  # a set over 1 GB: one in its arena (trusted/layout.py)
    need, referee = st._need_bytes(), 12 * gb  # the referee holds a set of its own
    assert need + referee <= 0.8 * 80 * gb, need / gb
    # never less than what is surely allocated for it: the arena, the check, and its output
    assert need >= 12 * gb + st._check_bytes() + 6 * gb


def test_a_task_bigger_than_the_device_is_tried_at_once_and_its_out_of_memory_says_so() -> None:
    # a 6 GB-a-side task on a 16 GB card: no wait for memory that can never be there, and an out-of-memory is the
    # device's size, said so, never the candidate's fault nor "other processes"
    gb = 1 << 30
    m = FakeMonitor(memory={REFEREE: 1 * gb})
    m.total = 16 * gb
    st, _ = _stage(m)
    st.ref.info = dataclasses.replace(st.ref.info, total_bytes=16 * gb, in_bytes=6 * gb, out_bytes=6 * gb,
                                      set_bytes=12 * gb, slots_max=32)
    st.arena_slots = 2
    t0 = time.monotonic()
    st._admit()
    assert time.monotonic() - t0 < 2.0
    assert any("more than the device's 16.0 GB: tried without waiting" in w for w in st.out.warnings), st.out.warnings
    stop = st._failure(M.Failed(error="OutOfMemoryError: CUDA out of memory", kind="exception"), "run", "verify")
    assert stop.status == V.INFRA_ERROR and "the device has 16.0 GB in all" in stop.message
    st._release_memory()


def test_two_processes_evaluations_that_each_hold_what_the_other_waits_for_do_not_wait_out_their_bound() -> None:
    """Two evaluators' device stages, each in its own process (its own ledger, one host-wide board), on a card that
    fits one 6 GB-a-side task at a time: each referee is loaded and kept for its candidate, and each candidate's need
    is more than the other's referee leaves. The one whose wait began later lets its referee go; the first is
    admitted and runs; the later one loads its referee again, is admitted and says what happened."""
    from eval_helpers import Board

    from evaluator.processes import memory

    gb = 1 << 30
    m = FakeMonitor(memory={5001: 20 * gb, 5002: 20 * gb}, total=60 * gb)
    wall: dict[int, tuple[int, float]] = {}
    stages, reloaded = [], []
    for n in (1, 2):
        st, _ = _stage(m)
        st.device = f"cuda:give-way-{n}-{time.monotonic_ns()}"  # a ledger of its own: another process's
        memory.ledger(st.device).board = Board(wall, n)
        st.ref.worker, st.runner = FakeWorker(5000 + n), FakeWorker(6000 + n)  # type: ignore[assignment]
        st.ref.info = dataclasses.replace(st.ref.info, total_bytes=60 * gb, in_bytes=4 * gb, out_bytes=4 * gb,
                                          set_bytes=8 * gb, slots_max=1)
        st.arena_slots = 1
        assert 20 * gb < st._need_bytes() <= 40 * gb  # fits beside one referee, not beside both

        def let_go(h: RefereeHandle) -> int:
            return m.memory.pop(h.worker.pid, 0)

        def take(st: DeviceStage = st) -> RefereeHandle:
            again = RefereeHandle(worker=FakeWorker(st.ref.worker.pid + 100), key=st.ref.key,  # type: ignore[arg-type]
                                  info=st.ref.info, init_seed=1)
            m.memory[again.worker.pid] = 20 * gb
            reloaded.append(again)
            return again

        st.let_referee_go, st.take_referee = let_go, take
        st.race = st.ref.race  # as `run` sets it: timed beside the other candidates of its referee
        threading.Timer(30, st.cancel.set).start()  # never the test's hang (the bound is two minutes)
        stages.append(st)
    done: dict[int, float] = {}

    def evaluation(n: int) -> None:
        st = stages[n - 1]
        time.sleep(0.05 * n)  # the first process's wait begins first
        st._admit()
        m.memory[st.runner.pid] = st._need_bytes()  # its candidate allocates, runs, and goes with its referee
        time.sleep(0.3)
        del m.memory[st.runner.pid], m.memory[st.ref.worker.pid]
        st._release_memory()
        done[n] = time.monotonic()

    t0 = time.monotonic()
    threads = [threading.Thread(target=evaluation, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    first, later = stages
    assert done[1] < done[2] < t0 + 15, (done, t0)
    assert not any("let its referee go" in w for w in first.out.warnings), first.out.warnings
    assert any(w.startswith("let its referee go (20.0 GB) for an evaluation of another process") for w in
               later.out.warnings), later.out.warnings
    assert reloaded and later.ref is reloaded[0] and later.ref_held and first.ref_held and len(reloaded) == 1
    # timed beside its new referee's other candidates
    assert later.race is later.ref.race is not stages[0].ref.race and first.race is first.ref.race
    assert wall == {}
    for st in stages:
        st.cancel.set()


def test_an_arena_the_referee_cannot_allocate_beside_others_memory_is_theirs_named(monkeypatch) -> None:
    """Admitted after waiting out its bound for memory another process holds (seen on an 80 GB card: 9.3 GB free,
    38 GB needed), the candidate goes ahead and its referee runs out allocating the arena, before the candidate is
    imported: `infra_error` naming who held the memory, never the candidate's nor an unexplained referee failure."""
    from evaluator.processes.handle import WorkerFailed
    from evaluator.stages.device import load

    gb = 1 << 30
    m = FakeMonitor(memory={REFEREE: 2 * gb, CANDIDATE: 1 * gb, NEIGHBOUR: 60 * gb}, total=80 * gb)
    st, _ = _stage(m)
    st.ref.info = dataclasses.replace(st.ref.info, total_bytes=80 * gb, in_bytes=6 * gb, out_bytes=6 * gb,
                                      set_bytes=6 * gb, slots_max=32)
    opened: list[Any] = []

    def ask(op: M.Op, req: Any, **kw: Any) -> tuple[Any, list[int]]:
        assert op is M.RefereeOps.open_arena
        opened.append(req)
        raise WorkerFailed(M.Failed(error="DriverError: cuMemCreate: CUDA driver error 2 (out of memory)",
                                    kind="exception"))

    st.ref.worker.ask = ask  # type: ignore[method-assign]
    monkeypatch.setattr(load, "ADMIT_WAIT_S", 0.3)
    with pytest.raises(Stop) as e:
        st._load()
    assert opened and e.value.status == V.INFRA_ERROR and e.value.stage == "load"
    msg = e.value.message
    assert msg.startswith("the referee ran out of device memory allocating the candidate's arena"), msg
    assert "only 17.0 GB of 80.0 GB were free when the candidate started" in msg and f"pid {NEIGHBOUR}" in msg
    assert "not the candidate's fault" in msg and "cuMemCreate" in msg
    st._release_memory()
