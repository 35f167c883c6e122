"""The outside clock ends when an answer's bytes are whole, before they are decoded: a long claim and a short one
end alike, and the process that answered is stopped (and the device probed) before anything reads it."""

from __future__ import annotations

import json
import socket
import time

import pytest

from evaluator import messages as M
from evaluator.processes.environment import scrubbed_env
from evaluator.processes.handle import Spec, Worker
from evaluator.shared import protocol
from evaluator.shared.protocol import Channel, ProtocolError


def test_a_whole_line_is_handed_over_before_it_is_decoded(monkeypatch):
    a, b = socket.socketpair()
    theirs, ours = Channel(a), Channel(b)
    events: list[str] = []
    real = json.loads
    monkeypatch.setattr(protocol.json, "loads", lambda s: (events.append("decoded"), real(s))[1])
    theirs.send({"type": "result", "id": "x", "reply": {"n": 1}})
    msg, _ = ours.recv(5, lambda line: events.append(line.decode()))
    assert msg["reply"] == {"n": 1}
    assert events == ['{"type":"result","id":"x","reply":{"n":1}}', "decoded"]
    # a garbled line is handed over too (the clock ends), then refused
    a.sendall(b"{not json\n")
    seen: list[bytes] = []
    with pytest.raises(ProtocolError):
        ours.recv(5, seen.append)
    assert seen == [b"{not json"]
    theirs.close()
    ours.close()


def test_the_answer_hook_runs_once_at_the_answer_and_is_cleared():
    w = Worker(Spec("runner", tuple(dict(scrubbed_env(), KLSP_DEVICE="cpu").items())))
    try:
        w.wait_ready(timeout=120)
        calls: list[float] = []
        w.at_answer = lambda: calls.append(time.perf_counter())
        t_sent = time.perf_counter()
        r, _ = w.ask(M.RunnerOps.diag, M.Empty(), timeout=60)
        t_back = time.perf_counter()
        assert r.cwd == w.workdir
        assert len(calls) == 1 and w.at_answer is None
        assert t_sent < w.reply_at <= calls[0] <= t_back  # the clock's end, then the hook, then the decoded reply
        w.ask(M.RunnerOps.diag, M.Empty(), timeout=60)  # cleared: the next answer does not call it again
        assert len(calls) == 1
    finally:
        w.kill()


def test_a_requests_span_in_parts_with_the_workers_own_counts():
    from evaluator.stages.device.session import _phases, phases_table

    marks = (1.0, 1.00005, 1.0021, 1.00215, 1.0025)  # sent, woken, answer arrived, stopped, idle
    stamps = [1.0002, 1.0020, 5.0, 5.0017, 3, 0, 1]  # the worker's claim: took, answered, CPU at both, counts
    row = _phases("candidate", stamps, marks, 2, cpu_s=0.0018)
    assert row["wake"] == 50.0 and row["deliver"] == 150.0 and row["work"] == 1800.0 and row["back"] == 100.0
    assert row["stop"] == 50.0 and row["probe"] == 350.0 and row["total"] == 2500.0
    assert row["cpu_inside"] == 1700.0 and (row["faults"], row["major_faults"], row["preempted"]) == (3, 0, 1)
    bare = _phases("reference", None, marks, 1)  # no claim (a worker without KLSP_DEBUG_TIMING): the parent's marks
    assert bare["work"] == 2050.0 and bare["faults"] == 0
    lines = phases_table([row, row, bare]).splitlines()
    assert lines[0].startswith("phases candidate (n=2, µs medians): pids=2 ")
    assert lines[1].startswith("spread candidate (µs sd): ") and " work=0 " in lines[1]  # two equal rows
    assert lines[2].startswith("phases reference (n=1, ") and len(lines) == 3  # one row: no spread
