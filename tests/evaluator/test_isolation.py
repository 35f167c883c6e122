"""Isolation: candidate code runs in spawned workers; crashes, hangs and noise never reach the caller."""

from __future__ import annotations

import os
import threading

from eval_helpers import REF_ADD, fast_settings, pid_exists, proc_children, py_candidate

from evaluator import Evaluator
from evaluator.processes.environment import scrubbed_env
from evaluator.processes.handle import Spec, Worker

GOOD = py_candidate("return args[0] + 2 * args[1]")


def _still_serves(e: Evaluator) -> None:
    v = e.evaluate(REF_ADD, GOOD, time=False)
    assert v.status == "correct", v.message


def test_segfault_is_crashed_sigsegv(lab_ev):
    v = lab_ev.evaluate(REF_ADD, py_candidate("import ctypes\nctypes.string_at(0)\nreturn args[0]"))
    assert v.status == "crashed"
    assert "signal 11 (SIGSEGV)" in v.message and "verify" in v.message
    _still_serves(lab_ev)


def test_infinite_loop_times_out(lab_ev):
    v = lab_ev.evaluate(REF_ADD, py_candidate("while True:\n    pass"))
    assert v.status == "timeout"
    assert "timeout after 6 s" in v.message
    _still_serves(lab_ev)


def test_os_exit_is_crashed(lab_ev):
    v = lab_ev.evaluate(REF_ADD, py_candidate("import os\nos._exit(3)"))
    assert v.status == "crashed" and "exit status 3" in v.message
    _still_serves(lab_ev)


def test_huge_allocation_is_a_runtime_error(lab_ev):
    v = lab_ev.evaluate(REF_ADD, py_candidate("x = torch.empty(1 << 42, dtype=torch.float32)\nreturn args[0]"))
    assert v.status in ("runtime_error", "crashed"), v.message
    assert "memory" in v.message.lower() or "SIGKILL" in v.message
    _still_serves(lab_ev)


def test_crash_at_import_in_compile_worker(lab_ev):
    src = "import ctypes\nctypes.string_at(0)\n" + GOOD
    v = lab_ev.evaluate(REF_ADD, src)
    assert v.status == "crashed" and "SIGSEGV" in v.message and "compil" in v.message
    _still_serves(lab_ev)


def test_printing_to_fd1_does_not_reach_the_caller(lab_ev, capfd):
    noisy = py_candidate("import os, sys\nos.write(1, b'GARBAGE-ON-FD1\\n')\nprint('GARBAGE-PRINT')\n"
                         "sys.stdout.flush()\nreturn args[0] + 2 * args[1]",
                         extra="import os\nos.write(1, b'{\"type\": \"result\"}\\n')")
    v = lab_ev.evaluate(REF_ADD, noisy, time=False)
    assert v.status == "correct", v.message
    out, _err = capfd.readouterr()
    assert "GARBAGE" not in out and "result" not in out


def test_environment_is_scrubbed(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "t0k3n")
    monkeypatch.setenv("TORCH_SHOW_CPP_STACKTRACES", "1")
    # what torch sets in a process once it has compiled something (the host's folder, outside the sandbox's)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torchinductor_host"))
    env = scrubbed_env()
    assert "OPENAI_API_KEY" not in env and "MY_SERVICE_TOKEN" not in env
    assert env["TORCH_SHOW_CPP_STACKTRACES"] == "1" and "PATH" in env
    assert env["TORCHINDUCTOR_CACHE_DIR"]  # trusted workers may share the host's caches
    w = Worker(Spec("runner", tuple(dict(env, KLSP_DEVICE="cpu").items())))
    try:
        from evaluator import messages as M

        r, _ = w.ask(M.RunnerOps.diag, M.Empty(), timeout=60)
        assert "OPENAI_API_KEY" not in r.env and "MY_SERVICE_TOKEN" not in r.env
        # the candidate's caches stay in its own folder: the host's is not in what its sandbox was started with
        with open(f"/proc/{w.proc.pid}/environ", "rb") as f:
            assert b"torchinductor_host" not in f.read()
        assert r.cwd == w.workdir and r.tmp == w.workdir  # its own folder
        if os.geteuid() == 0:
            assert r.uid != 0  # root drops to nobody inside the sandbox
    finally:
        w.kill()
    assert not os.path.exists(w.workdir)


def test_the_referees_share_one_compile_cache_of_the_evaluators_own(tmp_path, monkeypatch):
    """torch.compile's caches of the referees (trusted) in one folder of the build cache, its owner's alone, so a new
    referee of a reference compiled before takes its graphs from there; a folder the user named is kept."""
    from evaluator.processes.startup import COMPILE_CACHE, referee_env
    from evaluator.settings import EvalSettings

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    builds = tmp_path / "builds"
    s = EvalSettings(device="cpu", cache_dir=str(builds))
    env = referee_env(s, scrubbed_env())
    shared = builds / COMPILE_CACHE
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(shared / "inductor") and (shared / "inductor").is_dir()
    assert env["TRITON_CACHE_DIR"] == str(shared / "triton")
    assert shared.stat().st_mode & 0o777 == 0o700
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert referee_env(s, scrubbed_env())["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
    # a sandboxed worker started with the referees' environment still keeps its caches in its own folder
    w = Worker(Spec("runner", tuple(dict(env, KLSP_DEVICE="cpu").items())))
    try:
        with open(f"/proc/{w.proc.pid}/environ", "rb") as f:
            assert COMPILE_CACHE.encode() not in f.read()
    finally:
        w.kill()


def test_no_processes_remain_after_close(cache_dir):
    e = Evaluator(fast_settings(cache_dir, warm_workers=1))
    out: list = []
    th = threading.Thread(target=lambda: out.append(
        e.evaluate(REF_ADD, py_candidate("import time as _t\n_t.sleep(30)\nreturn args[0]"))))
    th.start()
    import time

    deadline = time.time() + 60
    while (e._runners is None or len(e.worker_pids()) < 2) and time.time() < deadline:  # started, running
        time.sleep(0.2)
    pids = e.worker_pids()
    assert pids
    time.sleep(3)
    e.close()
    th.join(timeout=10)
    assert out and out[0].status == "cancelled", (out[0].status, out[0].message)
    time.sleep(0.5)
    for pid in pids:
        assert not pid_exists(pid), f"worker {pid} still exists (zombie or alive)"
    mine = [p for p in proc_children(os.getpid()) if p in pids]
    assert mine == []


def test_closing_while_the_reference_loads_cancels_the_call(cache_dir):
    # Closing the evaluator (the editor shutting down) while a call waits for its referee is nobody's fault: the
    # call is cancelled, never an infrastructure error, and nothing is left behind.
    import time

    slow_ref = REF_ADD.replace("super().__init__()", "super().__init__()\n        import time\n        time.sleep(30)")
    e = Evaluator(fast_settings(cache_dir, warm_workers=1))
    out: list = []
    th = threading.Thread(target=lambda: out.append(e.evaluate(slow_ref, GOOD, time=False)))
    th.start()
    deadline = time.time() + 90
    while not e._referees._loading and time.time() < deadline:  # its referee is loading
        time.sleep(0.1)
    time.sleep(1)
    pids = e.worker_pids()
    e.close()
    th.join(timeout=20)
    assert out, "the call did not return after close"
    assert out[0].status == "cancelled", (out[0].status, out[0].message)
    time.sleep(0.5)
    assert [p for p in pids if pid_exists(p)] == []


def test_closing_while_the_candidate_is_imported_cancels_the_call(cache_dir):
    # The compile stage imports the candidate in a worker of its own; the close kills that worker: cancelled, not
    # "crashed: SIGKILL (out of memory?)" blamed on the candidate.
    import time

    e = Evaluator(fast_settings(cache_dir, warm_workers=1))
    started = threading.Event()
    out: list = []
    slow = py_candidate("return args[0] + 2 * args[1]", extra="import time as _t\n_t.sleep(30)")
    th = threading.Thread(target=lambda: out.append(e.evaluate(
        REF_ADD, slow, time=False, on_stage=lambda st, msg: started.set() if "compile worker" in msg else None)))
    th.start()
    assert started.wait(90), "the compile stage did not start"
    time.sleep(2)  # the import is under way (it sleeps for 30 s)
    e.close()
    th.join(timeout=20)
    assert out, "the call did not return after close"
    assert out[0].status == "cancelled", (out[0].status, out[0].message)


def test_cancel_while_the_evaluator_starts_returns_at_once_and_the_start_carries_on(cache_dir):
    # The first call starts the pools (a worker imports torch and probes the device: seconds). A job cancelled
    # meanwhile must stop waiting at once; the start goes on and the next call uses it.
    import time

    from evaluator.verdict import CANCELLED

    with Evaluator(fast_settings(cache_dir, warm_workers=1)) as e:
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        t0 = time.monotonic()
        v = e.evaluate(REF_ADD, GOOD, cancel=cancel, time=False)
        took = time.monotonic() - t0
        assert v.status == CANCELLED, v.message
        assert took < 1.5, f"cancel took {took:.2f} s"
        _still_serves(e)


def test_close_while_starting_leaves_no_process(cache_dir):
    import time

    e = Evaluator(fast_settings(cache_dir, warm_workers=1))
    threading.Thread(target=lambda: e.evaluate(REF_ADD, GOOD, time=False), daemon=True).start()
    deadline = time.time() + 30
    while not e.worker_pids() and time.time() < deadline:
        time.sleep(0.05)
    pids = e.worker_pids()
    assert pids, "no worker started"
    e.close()
    time.sleep(1.0)
    for pid in pids:
        assert not pid_exists(pid), f"worker {pid} still exists after close() during the start"
    assert e.evaluate(REF_ADD, GOOD, time=False).status == "cancelled"  # closed: not an infrastructure fault


def test_a_killed_evaluator_leaves_no_worker_behind(cache_dir, tmp_path):
    """SIGKILL to the evaluator's process (e.g. `kernel-lsp eval` killed): every worker, sandboxed or not, and
    everything they started dies with it (parent-death signals from a long-lived thread, PID namespaces)."""
    import signal
    import subprocess
    import sys
    import time

    from evaluator.processes import proctree

    code = f"""
import sys, threading, time
from evaluator import Evaluator, EvalSettings
sys.path.insert(0, {str(os.path.dirname(__file__))!r})
from eval_helpers import REF_ADD, py_candidate, fast_settings
ev = Evaluator(fast_settings({cache_dir!r}, warm_workers=1))
slow = py_candidate("import time as _t\\n_t.sleep(120)\\nreturn args[0]")
threading.Thread(target=lambda: ev.evaluate(REF_ADD, slow), daemon=True).start()
deadline = time.time() + 120
while (ev._runners is None or len(ev.worker_pids()) < 3) and time.time() < deadline:
    time.sleep(0.2)
time.sleep(8)  # the candidate is sleeping inside forward now
print("PIDS", " ".join(map(str, ev.worker_pids())), flush=True)
time.sleep(600)
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         cwd=str(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    line = ""
    deadline = time.time() + 200
    while not line.startswith("PIDS") and time.time() < deadline:
        line = p.stdout.readline()
        if not line and p.poll() is not None:
            break
    assert line.startswith("PIDS"), "the evaluator did not start its workers"
    tops = [int(x) for x in line.split()[1:]]
    everything = set(tops)
    for t in tops:
        everything |= set(proctree.descendants(t))
    assert len(everything) > len(tops)  # bwrap's children, the sleeping candidate's runner among them
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.time() + 10
    alive = [q for q in everything if pid_exists(q) and (proctree.stat(q) or ["Z"])[0] not in ("Z", "X")]
    while alive and time.time() < deadline:
        time.sleep(0.2)
        alive = [q for q in everything if pid_exists(q) and (proctree.stat(q) or ["Z"])[0] not in ("Z", "X")]
    for q in alive:
        os.kill(q, signal.SIGKILL)
    assert not alive, f"processes outlived the evaluator: {alive}"


def test_without_namespaces_landlock_lets_workers_read_the_evaluator_wherever_it_is(cache_dir, monkeypatch):
    """A machine without bubblewrap (none installed, or its wheel not on the path): the workers' reads are limited by
    Landlock to what they need. What they need includes the evaluator's own folder and the interpreter's wherever
    they are (a checkout in /work is neither a system folder nor a hidden one: its workers could not read their own
    code and every candidate crashed), and leaves out the folder the evaluator was started in."""
    from evaluator.processes import sandbox

    real = sandbox.capabilities()
    if not real.landlock_abi:
        import pytest

        pytest.skip("a kernel without Landlock")
    root = str(sandbox.Path(sandbox.__file__).resolve().parents[2])
    monkeypatch.chdir(cache_dir)
    monkeypatch.syspath_prepend(str(cache_dir))
    paths = sandbox.needed_read_paths(hidden_only=False)
    assert any(root == p or root.startswith(p.rstrip("/") + "/") for p in paths), (root, paths)
    assert str(cache_dir) not in paths
    if real.root and not all(_others_can_enter(p) for p in paths):
        import pytest

        pytest.skip(f"without namespaces a worker runs as nobody, who cannot enter one of {paths}")
    monkeypatch.setattr(sandbox, "capabilities", lambda: sandbox.Capabilities(
        bwrap="", bwrap_error="switched off for this test", landlock_abi=real.landlock_abi, cgroup=real.cgroup,
        root=real.root))
    with Evaluator(fast_settings(str(cache_dir), warm_workers=0)) as e:
        v = e.evaluate(REF_ADD, GOOD, time=False)
    assert v.status == "correct", v.message
    assert any("namespaces (switched off for this test)" in n for n in v.not_checked), v.not_checked


def _others_can_enter(path: str) -> bool:
    """Every folder on the way to `path`, and `path` itself, is open to other users (as bubblewrap's binds make it)."""
    import stat
    from pathlib import Path

    p = Path(path)
    return all(os.stat(q).st_mode & stat.S_IXOTH for q in [*reversed(p.parents), p] if q.exists())
