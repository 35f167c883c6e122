"""`kernel-lsp bench` in a subprocess with the real oracle on CPU: kill it mid-sweep, restart, and check that
finished work is not run again and that the tables agree with the History."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel_lsp.bench.ledger import RESULT_NS
from kernel_lsp.history import History

from .fakes import DATA, TASKS

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def bench_cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.bench.cli_runner", "bench", "--kernelbench", str(TASKS), "--level", "1",
            "--level", "2", "--candidates", str(DATA / "candidates"), "--out", str(out), "--device", "cpu",
            "--trials", "1", "--set", "timing_calls=5", "--set", "compile_workers=1", *extra]


def finished(out: Path) -> list[str]:
    db = out / ".kernel-lsp" / "history.sqlite"
    if not db.exists():
        return []
    with History(out / ".kernel-lsp") as h:
        return [j.settings["task"] for j in h.jobs() if j.kind == "bench" and j.state == "done"]


def children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p.name))
    return out


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_killed_sweep_resumes_without_rerunning(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = dict(os.environ, XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")))
    # and long timings (each unit times for its full budget), so the sweep cannot finish before the signal lands
    proc = subprocess.Popen(bench_cmd(out, "--set", "timing_calls=1000000"), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 600
    try:
        while len(finished(out)) < 2:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no task finished within 10 minutes"
            time.sleep(0.5)
    finally:
        workers = children(proc.pid)  # the evaluator's workers (each in a session of its own)
        proc.send_signal(signal.SIGKILL)  # the harshest interruption: no cleanup at all
        proc.wait(timeout=60)
    # orphaned workers finish the operation in hand (e.g. a C++ build), see their pipe closed and exit; wait,
    # as a user would, rather than race them for the same build folder
    end = time.monotonic() + 300
    while any(alive(p) for p in workers) and time.monotonic() < end:
        time.sleep(0.5)
    assert not any(alive(p) for p in workers), "orphaned evaluator workers did not exit"
    before = finished(out)
    assert 2 <= len(before) < 5, before
    assert not (out / "bench.json").exists()  # it never got to write its tables

    res = subprocess.run(bench_cmd(out), cwd=REPO, capture_output=True, text=True, timeout=1200, env=env,
                         check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    meta = json.loads((out / "bench.json").read_text())["meta"]
    assert meta["skipped"] == len(before)
    assert meta["ran"] == 5 - len(before) and meta["missing"] == 1 and meta["errors"] == 0
    assert "(done before)" in res.stderr
    # stdout is exactly the Markdown table that was written
    assert res.stdout == (out / "bench.md").read_text()

    with History(out / ".kernel-lsp") as h:
        done = [j for j in h.jobs() if j.kind == "bench" and j.state == "done"]
        keys = [j.settings["bench_key"] for j in done]
        assert len(keys) == len(set(keys)) == 5  # every unit finished exactly once over both sweeps
        results = [h.get(RESULT_NS, k)["result"] for k in keys]
        statuses = {r["task"]: r["status"] for r in results}
        n_candidates = sum(len(h.candidates(j.task_key)) for j in done)
    assert n_candidates == 5  # one History candidate per evaluated file: nothing recorded twice
    assert statuses == {"level1/1_add": "correct", "level1/2_relu": "correct", "level1/3_scale": "incorrect",
                        "level2/1_add_relu": "correct", "level2/2_double_relu": "correct"}, results
    kernels = {r["task"]: r["kernel"] for r in results if r["status"] == "correct"}
    assert kernels == {"level1/1_add": "own_code", "level1/2_relu": "library_only",
                       "level2/1_add_relu": "own_code", "level2/2_double_relu": "library_only"}, results
    rows = {r["task"]: r for r in csv.DictReader((out / "tasks.csv").open())}
    assert rows["level1/4_tanh"]["status"] == "missing"
    assert float(rows["level1/3_scale"]["live_eager_ms"]) > 0  # baseline measured from the reference alone
    tasks = {t["task"]: t for t in json.loads((out / "bench.json").read_text())["tasks"]}
    # where each verdict's time went, for diagnosing slow sweeps
    assert {"compile", "verify"} <= set(tasks["level1/2_relu"]["extra"]["stage_s"])
    assert tasks["level1/2_relu"]["extra"]["verdict_s"] > 0
    summary = json.loads((out / "bench.json").read_text())["summaries"]
    assert [(s["level"], s["correct"], s["library_only"], s["tasks"]) for s in summary] == [(1, 2, 1, 4),
                                                                                            (2, 2, 1, 2)]
    assert summary[0]["fast_p_eager"]["0.0"] == 0.25 and (out / "speedups.png").exists()

    # a third sweep runs nothing
    res = subprocess.run(bench_cmd(out), cwd=REPO, capture_output=True, text=True, timeout=600, env=env,
                         check=False)
    assert res.returncode == 0
    meta = json.loads((out / "bench.json").read_text())["meta"]
    assert (meta["ran"], meta["skipped"], meta["evaluations"]) == (0, 5, 0)


def test_ctrl_c_cancels_cleanly_and_writes_a_partial_table(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # a cold build cache, so the C++ candidates are still compiling when the signal comes
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    # and long timings (each unit times for its full budget), so the sweep cannot finish before the signal lands
    proc = subprocess.Popen(bench_cmd(out, "--set", "timing_calls=1000000"), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 600
    try:
        while not finished(out):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.3)
        workers = children(proc.pid)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr.decode()[-2000:]
    assert "run the same command to resume" in stderr.decode()
    data = json.loads((out / "bench.json").read_text())
    assert data["meta"]["interrupted"] is True and data["meta"]["ran"] < 5
    assert stdout.decode() == (out / "bench.md").read_text() and "INTERRUPTED" in stdout.decode()
    time.sleep(1)
    assert not any(alive(p) for p in workers), "the evaluator's workers outlived a Ctrl-C"
    with History(out / ".kernel-lsp") as h:
        states = {j.state for j in h.jobs() if j.kind == "bench"}
    assert states <= {"done", "cancelled", "running"} and "done" in states
