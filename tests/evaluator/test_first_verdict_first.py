"""The first verdict first (`EvalSettings.compiled_wait` off, the editor's): a candidate timed before its reference's
torch.compile has ended gets its verdict without that figure instead of waiting seconds for it, and the compile is
put off while candidates of the reference are on their way (`Referees.on_its_way`); later candidates have it."""

from __future__ import annotations

import threading
import time

import pytest
from eval_helpers import REF_ADD, fast_settings, py_candidate

from evaluator.processes.gate import DeviceGate
from evaluator.processes.referees import Referees, reference_key
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
    r._compile = lambda h, gate, limits=None: began.append((h, gate, limits))  # type: ignore[method-assign]
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
            assert "torch.compile's reference not timed (still compiling)" in v.stage("time").message
            h = e._referees._kept[reference_key(REF_ADD)]
            assert not (h.compiling or h.compiled), "the compile began while the job's candidates were coming"
        deadline = time.monotonic() + 300  # then it begins, in the background
        while not (h.compiled or h.compile_error) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert h.compiled, h.compile_error or "not compiled once the candidates were done"
        v2 = e.evaluate(REF_ADD, py_candidate("return args[0] + args[1] * 2"))
        assert v2.status == "correct", v2.message
        assert v2.timing is not None and v2.timing.speedup_compiled and not v2.timing.compiled_pending, v2.timing
