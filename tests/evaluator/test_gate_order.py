"""The device gate's order (`processes/gate.py`): among candidates waiting for the exclusive side, the one that first
asked for it goes first, and keeps its place between its rounds, so the first verdict is not delayed by rounds shared
out with candidates that began timing after it; and the race compares a candidate with one timed just before it that
passed every check."""

from __future__ import annotations

import threading
import time

from evaluator.processes import gate as gate_mod
from evaluator.processes.gate import DeviceGate, Race


def _round(g: DeviceGate, me: int, order: list[int], hold: float = 0.0) -> None:
    with g.exclusive(me):
        order.append(me)
        time.sleep(hold)


def test_the_candidate_that_began_timing_first_has_the_device_before_ones_that_waited_longer_for_their_round():
    for _ in range(3):
        g = DeviceGate(shared=2)
        order: list[int] = []
        _round(g, 1, order)  # candidate 1 began timing first (its first round)
        held = threading.Event()
        release = threading.Event()

        def holder() -> None:  # someone else's round holds the device meanwhile
            with g.exclusive(0):
                held.set()
                release.wait(5)

        threading.Thread(target=holder).start()
        assert held.wait(5)
        late = [threading.Thread(target=_round, args=(g, k, order)) for k in (2, 3, 4, 5)]  # their first rounds
        for t in late:
            t.start()
            time.sleep(0.03)
        time.sleep(0.1)
        first = threading.Thread(target=_round, args=(g, 1, order))  # candidate 1's next round, asked last
        first.start()
        time.sleep(0.05)
        release.set()
        for t in [*late, first]:
            t.join(5)
        assert order[:2] == [1, 1] and sorted(order[2:]) == [2, 3, 4, 5], order
        assert order[2:] == [2, 3, 4, 5], order  # the others in the order they first asked
        for k in range(6):
            g.leave(k)
        assert not g._since and not g._asking and not g._gave_back


def _candidate(g: DeviceGate, me: int, rounds: int, order: list[int]) -> None:
    """A candidate's time stage as the device stage runs it: rounds alone on the device with a little work of its own
    between them (its figures looked at), then, its runner gone, the reference alone again."""
    for _ in range(rounds):
        _round(g, me, order, hold=0.01)
        time.sleep(0.005)
    g.unregister(me)  # its runner killed before the reference is timed alone
    for _ in range(2):
        _round(g, me, order, hold=0.005)
    g.leave(me)


def test_a_candidate_keeps_its_place_between_its_rounds_and_after_its_runner_is_gone():
    for _ in range(3):
        g = DeviceGate(shared=2)
        order: list[int] = []
        first = threading.Thread(target=_candidate, args=(g, 1, 6, order))
        first.start()
        time.sleep(0.015)  # the second begins timing while the first is in its first round
        second = threading.Thread(target=_candidate, args=(g, 2, 6, order))
        second.start()
        first.join(10)
        second.join(10)
        assert order == [1] * 8 + [2] * 8, order
        assert not g._since and not g._asking


def test_a_candidate_gone_quiet_does_not_hold_the_line():
    g = DeviceGate(shared=2)
    order: list[int] = []
    _round(g, 1, order)  # it began timing first, then does something else (not a round) for a long while
    t0 = time.monotonic()
    _round(g, 2, order)
    assert order == [1, 2] and time.monotonic() - t0 < 0.5


def test_a_cancelled_wait_leaves_the_line():
    g = DeviceGate(shared=2)
    order: list[int] = []
    cancel = threading.Event()
    with g.exclusive(5):
        t = threading.Thread(target=lambda: _wait_cancelled(g, cancel))
        t.start()
        time.sleep(0.1)
        cancel.set()
        t.join(5)
    _round(g, 6, order)  # the line is not blocked by the one that left it
    assert order == [6] and not g._asking


def _wait_cancelled(g: DeviceGate, cancel: threading.Event) -> None:
    try:
        with g.exclusive(3, cancel):
            raise AssertionError("had the device while another held it")
    except gate_mod.Cancelled:
        pass


def test_a_candidate_timed_after_a_faster_one_that_passed_is_found_unable_to_be_the_best(monkeypatch):
    r = Race()
    r.post(1, 2.0, 1.9, 2.1)
    r.leave(1, keep=True)  # passed every check
    r.post(2, 1.0, 0.95, 1.05)
    assert "at least 1.90x" in r.hopeless(2)
    r.post(3, 2.0, 1.8, 2.2)  # its interval reaches the other's: not hopeless
    assert r.hopeless(3) == ""
    r.leave(3)
    caught = Race()
    caught.post(1, 2.0, 1.9, 2.1)
    caught.leave(1)  # caught after its timing: leaves nothing behind
    caught.post(2, 1.0, 0.95, 1.05)
    assert caught.hopeless(2) == ""
    monkeypatch.setattr(gate_mod, "RACE_KEEP_S", 0.0)  # long after its verdict: forgotten
    time.sleep(0.01)
    assert r.hopeless(2) == ""
