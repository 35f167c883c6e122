"""The first verdict first (`EvalSettings.compiled_wait` off, the editor's): a candidate timed before its reference's
torch.compile has ended gets its verdict without that figure instead of waiting seconds for it, and the compile is
put off while candidates of the reference are on their way (`Referees.on_its_way`; one under way stops); later
candidates have it. A reference superseded by a newer version of its document stops its compile, and begins none
until it is current again."""

from __future__ import annotations

import threading
import time

import pytest
from eval_helpers import REF_ADD, fast_settings, py_candidate

from evaluator.processes.gate import DeviceGate
from evaluator.processes.handle import WorkerError
from evaluator.processes.referees import RefereeHandle, Referees, reference_key
from evaluator.settings import EvalSettings


class _Handle:
    """What `compile_ahead` reads of a kept referee."""

    def __init__(self) -> None:
        self.worker = type("W", (), {"dead": False})()
        self.retired = self.compiled = self.compiling = False
        self.compile_error = ""


def _referees(wait: bool) -> tuple[Referees, list[tuple]]:
    r = Referees(EvalSettings(compiled_wait=wait), threading.Lock())
    r._kept[reference_key(REF_ADD)] = _Handle()  # type: ignore[assignment]
    began: list[tuple] = []
    r._compile = lambda a: began.append((a.h, a.gate, a.limits))  # type: ignore[method-assign]
    return r, began


def _settle(began: list, n: int) -> None:
    deadline = time.monotonic() + 5
    while len(began) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)


def test_a_compile_ahead_asked_while_candidates_are_on_their_way_begins_once_the_last_is_done():
    r, began = _referees(wait=False)
    gate = DeviceGate(shared=2)
    with r.on_its_way(REF_ADD):
        with r.on_its_way(REF_ADD + "\n# the same code\n"):
            assert r.compile_ahead(REF_ADD, gate, {"x": 1}) is False
        _settle(began, 1)
        assert not began, "the compile began while a candidate was still on its way"
    _settle(began, 1)
    assert len(began) == 1 and began[0][1] is gate and began[0][2] == {"x": 1}, began
    with r.on_its_way(REF_ADD.replace("a + 2 * b", "a + 3 * b")):  # another reference's candidate: not this one's
        pass
    _settle(began, 2)
    assert len(began) == 1


def test_nothing_is_put_off_where_verdicts_wait_for_the_compile():
    r, began = _referees(wait=True)
    with r.on_its_way(REF_ADD):
        assert r.compile_ahead(REF_ADD, DeviceGate(shared=2)) is True
        _settle(began, 1)
        assert len(began) == 1
    _settle(began, 2)
    assert len(began) == 1  # not begun twice


class _Compiling:
    """A referee's worker whose torch.compile takes until it is stopped (the request cancelled kills it)."""

    def __init__(self) -> None:
        self.dead = False
        self.asked = threading.Event()
        self.gate: DeviceGate | None = None
        self.gate_held: list[int] = []  # the gate's shared side taken when it was killed

    def ask(self, op, request, *, timeout, cancel=None, kill_on_cancel=True):  # noqa: ANN001, ANN201
        self.asked.set()
        while not (cancel is not None and cancel.is_set()):
            time.sleep(0.01)
        if kill_on_cancel:
            self.kill()
        raise WorkerError("cancelled", "cancelled")

    def kill(self) -> None:
        if not self.dead and self.gate is not None:
            self.gate_held.append(self.gate._shared)
        self.dead = True


class _Pool:
    def __init__(self) -> None:
        self.released: list = []

    def release(self, w, tainted=False) -> None:  # noqa: ANN001
        w.kill()
        self.released.append(w)


def _compiling(wait: bool = False) -> tuple[Referees, RefereeHandle, _Pool]:
    r = Referees(EvalSettings(compiled_wait=wait), threading.Lock())
    gate = DeviceGate(shared=2)
    r.pool = _Pool()  # type: ignore[assignment]
    h = RefereeHandle(worker=_Compiling(), key=reference_key(REF_ADD), info=None, init_seed=0)  # type: ignore[arg-type]
    h.worker.gate = gate  # type: ignore[attr-defined]
    r._kept[h.key] = h
    assert r.compile_ahead(REF_ADD, gate)
    assert h.worker.asked.wait(5)  # type: ignore[attr-defined]
    return r, h, r.pool  # type: ignore[return-value]


def _until(cond, secs: float = 5.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + secs
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


def test_a_compile_under_way_stops_when_a_candidate_of_its_reference_comes_and_begins_again_after_it():
    r, h, pool = _compiling()
    with r.on_its_way(REF_ADD):
        assert h.retired, "its candidate would wait for the compile's end to be loaded"
        assert _until(lambda: h.worker in pool.released)  # its worker killed, and gone
        assert h.worker.gate_held == [0], "its worker was killed while the compile held the gate"  # type: ignore
        assert r._kept.get(h.key) is None
        fresh = RefereeHandle(worker=_Compiling(), key=h.key, info=None, init_seed=0)  # type: ignore[arg-type]
        r._kept[h.key] = fresh  # what the candidate's evaluation loads again
        time.sleep(0.1)
        assert not fresh.worker.asked.is_set()  # type: ignore[attr-defined]  (put off while it is on its way)
    assert fresh.worker.asked.wait(5), "the compile did not begin again once the candidate was done"  # type: ignore[attr-defined]
    r.close()


def test_a_compile_under_way_goes_on_while_its_candidates_are_only_being_written():
    r, h, pool = _compiling()
    with r.on_its_way(REF_ADD, arrived=False):  # a job's model still writing (`Evaluator.candidates_coming`)
        time.sleep(0.1)
        assert not h.retired and not pool.released and h.compiling
        with r.on_its_way(REF_ADD):  # its first candidate's build begins
            assert h.retired
    r.close()


def test_a_compile_waited_for_is_not_stopped_by_its_candidates():
    r, h, pool = _compiling(wait=True)
    with r.on_its_way(REF_ADD):
        time.sleep(0.1)
        assert not h.retired and not pool.released and h.compiling
    r.close()
    assert _until(lambda: not h.compiling)


def test_a_superseded_reference_stops_its_compile_for_good_unless_its_code_stays_or_its_verdicts_wait_for_it():
    other = REF_ADD.replace("a + 2 * b", "a + 3 * b")
    r, h, pool = _compiling()
    r.superseded(REF_ADD, by=[REF_ADD + "\n# a comment: the same code\n"])
    time.sleep(0.1)
    assert not h.retired and h.compiling and not pool.released
    r.close()
    r, h, pool = _compiling(wait=True)  # (verdicts that wait: its candidates on their way would compile it)
    with r.on_its_way(REF_ADD):
        r.superseded(REF_ADD, by=[other])
        time.sleep(0.1)
        assert not h.retired and h.compiling and not pool.released
    r.close()
    r, h, pool = _compiling()
    r.superseded(REF_ADD, by=[other])
    assert h.retired and _until(lambda: h.worker in pool.released)
    assert not r._ahead and not r._put_off
    r.close()


def test_a_job_of_a_superseded_reference_neither_keeps_nor_begins_its_compile_until_it_is_current_again():
    other = REF_ADD.replace("a + 2 * b", "a + 3 * b")
    r, h, pool = _compiling()
    with r.on_its_way(REF_ADD, arrived=False):  # a job of it still running: its model writing the next round
        r.superseded(REF_ADD, by=[other])
        assert h.retired and _until(lambda: h.worker in pool.released), "the old version's compile held the device"
        fresh = RefereeHandle(worker=_Compiling(), key=h.key, info=None, init_seed=0)  # type: ignore[arg-type]
        r._kept[h.key] = fresh  # the job's next candidate loads it again
        with r.on_its_way(REF_ADD):
            assert r.compile_ahead(REF_ADD, DeviceGate(shared=2)) is False  # not put off either
    time.sleep(0.1)
    assert not fresh.worker.asked.is_set(), "the superseded reference's compile began once its job was done"  # type: ignore[attr-defined]
    assert r.compile_ahead(REF_ADD, DeviceGate(shared=2)) is False
    r.superseded(other, by=[REF_ADD + "\n# undone: its code again\n"])  # current again
    assert r.compile_ahead(REF_ADD, DeviceGate(shared=2)) is True
    assert fresh.worker.asked.wait(5)  # type: ignore[attr-defined]
    r.close()


@pytest.mark.slow
def test_the_first_verdict_comes_without_waiting_for_the_compile_and_a_later_one_is_timed_against_it(cache_dir):
    from evaluator import Evaluator

    settings = fast_settings(str(cache_dir), time_compiled=True, compile_reference_ahead=True, compiled_wait=False)
    with Evaluator(settings) as e:
        with e.candidates_coming(REF_ADD):  # a job's first round
            e.profile(REF_ADD)  # asks for the compile ahead: put off
            v = e.evaluate(REF_ADD, py_candidate("return args[0] + 2 * args[1]"))
            assert v.status == "correct", v.message
            t = v.timing
            assert t is not None and t.compiled is None and t.speedup_compiled is None and t.compiled_pending, t
            assert "torch.compile's reference not timed (not compiled yet)" in v.stage("time").message
            h = e._referees._kept[reference_key(REF_ADD)]
            assert not (h.compiling or h.compiled), "the compile began while the job's candidates were coming"
        deadline = time.monotonic() + 300  # then it begins, in the background
        while not (h.compiled or h.compile_error) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert h.compiled, h.compile_error or "not compiled once the candidates were done"
        v2 = e.evaluate(REF_ADD, py_candidate("return args[0] + args[1] * 2"))
        assert v2.status == "correct", v2.message
        assert v2.timing is not None and v2.timing.speedup_compiled and not v2.timing.compiled_pending, v2.timing


@pytest.mark.slow
def test_a_job_of_n_candidates_has_their_runners_started_before_they_ask(cache_dir):
    """`candidates_coming(ref, n)`: spares for the n start at once (at most `ahead` beyond `warm`), and what was
    started for candidates that never came goes once the job's first round ends."""
    from evaluator import Evaluator

    with Evaluator(fast_settings(str(cache_dir), warm_workers=1)) as e:
        assert e.device == "cpu"  # started
        runners = e._runners
        assert _until(lambda: len(runners.pids()) == 1 and runners._spawning == 0, 120)
        want = 1 + min(2, runners.ahead)
        with e.candidates_coming(REF_ADD, n=3):
            assert _until(lambda: len(runners.pids()) == want and runners._spawning == 0, 120), runners.pids()
        assert _until(lambda: len(runners.pids()) == 1, 30), runners.pids()
