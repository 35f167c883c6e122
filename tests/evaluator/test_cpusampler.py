"""The evaluator's own sampling of a sandbox's threads (cpusampler.py) and what the kernel check makes of it
(kernelcheck.against_samples): real child processes running a library built here with gcc, numpy and Python."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evaluator import cpusampler, kernelcheck
from evaluator.verdict import KERNEL_NOT_CHECKED, LIBRARY_ONLY, OWN_CODE

WHY = cpusampler.unavailable()
needs_sampling = pytest.mark.skipif(bool(WHY) or shutil.which("gcc") is None, reason=WHY or "needs gcc")

SPIN = ("#include <math.h>\n#include <time.h>\n"
        "double spin(long n) { double s = 0; for (long i = 0; i < n; i++) s += (double)i * 1e-9 + s * 1e-12; return s; }\n"
        "double spin_exp(long n) { volatile double s = 0; for (long i = 0; i < n; i++) s += exp(-(double)(i & 1023) * 1e-3);"
        " return s; }\n"
        "double nap(long n) { struct timespec t = {0, 20000000}; double s = spin(n); nanosleep(&t, 0);"
        " return s + spin(n); }\n")

CHILD = textwrap.dedent("""
    import ctypes, os, signal, sys, threading, time
    import numpy as np
    x = np.random.rand(2_000_000)
    y = np.empty_like(x)  # written in place: a loaded machine's page faults would hide the work from user samples
    lib = ctypes.CDLL(sys.argv[1]); lib.spin.restype = ctypes.c_double; lib.spin.argtypes = [ctypes.c_long]
    lib.spin_exp.restype = ctypes.c_double; lib.spin_exp.argtypes = [ctypes.c_long]
    lib.nap.restype = ctypes.c_double; lib.nap.argtypes = [ctypes.c_long]
    work = sys.argv[2]
    if work.startswith("torch_"):
        import torch
        tx = torch.rand(2_000_000)
        ty = torch.empty_like(tx)
    os.kill(os.getpid(), signal.SIGSTOP)  # the evaluator opens its sampling while the process is stopped
    if work == "own":
        lib.spin(60_000_000)
    elif work == "own_libm":
        lib.spin_exp(20_000_000)
    elif work == "own_nap":
        for _ in range(3):
            lib.nap(2_000_000)
    elif work == "sleep_then_numpy":
        for _ in range(3):
            time.sleep(0.02)
            np.exp(x)
    elif work == "numpy":  # square roots: numpy's own loops on every x86 (its exp is libm's without AVX-512)
        for _ in range(40):
            np.sqrt(x, out=y)
    elif work == "new_thread":
        t = threading.Thread(target=lambda: [np.exp(x, out=y) for _ in range(45)]); t.start(); t.join()
    elif work == "new_thread_own":
        t = threading.Thread(target=lambda: lib.spin(60_000_000)); t.start(); t.join()
    elif work in ("forked_own", "forked_own_gone"):  # a helper process made during the call does its work
        pid = os.fork()
        if pid == 0:
            lib.spin(60_000_000)
            if work == "forked_own":  # ... and is there, stopped with the sandbox, when its samples are placed
                os.kill(os.getpid(), signal.SIGSTOP)
            os._exit(0)
        os.waitpid(pid, os.WUNTRACED)
    elif work == "torch_calling":  # PyTorch's operators on the thread that runs the call
        for _ in range(30):
            torch.exp(tx, out=ty)
    elif work == "torch_thread":  # ... and on a thread of its own, which a profiler of the call does not record
        t = threading.Thread(target=lambda: [torch.exp(tx, out=ty) for _ in range(30)]); t.start(); t.join()
    elif work == "late_library":
        late = ctypes.CDLL(sys.argv[3]); late.spin.restype = ctypes.c_double; late.spin.argtypes = [ctypes.c_long]
        late.spin(60_000_000)
    os.kill(os.getpid(), signal.SIGSTOP)
""")


def _lib(tmp_path: Path, name: str) -> str:
    (tmp_path / f"{name}.c").write_text(SPIN)
    out = tmp_path / f"lib{name}.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(out), str(tmp_path / f"{name}.c"), "-lm"], check=True)
    return str(out)


def _stopped(pid: int) -> None:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.005)
    raise TimeoutError("the child never stopped")


def _sample(tmp_path: Path, work: str, own: list[str], *extra: str, load: str = "") -> cpusampler.Tally:
    """Run `work` in a child that loaded `load` (else own[0]); tally with `own` as the evaluator's builds."""
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")  # no BLAS pool spinning beside it
    p = subprocess.Popen([sys.executable, str(child), load or own[0], work, *extra], env=env, start_new_session=True)
    try:
        _stopped(p.pid)
        s = cpusampler.Sampler([p.pid], 100_000)
        assert s.open(), s.error
        c0 = time.clock_gettime_ns(((~p.pid) << 3) | 2)
        s.start()
        os.kill(p.pid, signal.SIGCONT)
        time.sleep(0.05)
        _stopped(p.pid)
        s.close()
        cpu = time.clock_gettime_ns(((~p.pid) << 3) | 2) - c0
        return s.tally(cpusampler.file_ids(own), cpu, calling_tid=p.pid)
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # a helper it made too
        p.wait()


@needs_sampling
def test_its_own_library_is_found_by_inode_and_numpy_elsewhere(tmp_path: Path) -> None:
    own = _lib(tmp_path, "own")
    t = _sample(tmp_path, "own", [own])
    assert t.samples > 50 and t.own > 0.8 * t.samples, t.describe()
    assert t.own_ms > 0.5 * t.sampled_ms * 0.8 and t.foreign == 0, t.describe()

    t = _sample(tmp_path, "numpy", [own])
    assert t.samples > 50 and t.own == 0 and t.runtime == 0, t.describe()
    assert any(n.startswith("_multiarray_umath") for n in t.where), t.describe()
    # numpy is another package than PyTorch: its time is the library work no PyTorch operator records
    assert t.foreign > 0.8 * t.samples and t.foreign_ms > 0.8 * t.samples * 0.1, t.describe()
    assert all(n.startswith("_multiarray_umath") or n.startswith("lib") for n in t.foreign_where()), t.describe()

    t = _sample(tmp_path, "own_libm", [own])  # its loop's exp() in libm counts with its own code
    assert t.runtime > 0.1 * t.samples and t.own + t.runtime > 0.8 * t.samples, t.describe()
    assert t.own_ms > 0.7 * t.samples * 0.1, t.describe()

    copy = tmp_path / "copy"
    copy.mkdir()
    other = str(shutil.copy(own, copy / "libown.so"))  # the same name and bytes, another file
    t = _sample(tmp_path, "own", [own], load=other)  # it runs the copy: not the library the evaluator built
    assert t.samples > 50 and t.own == 0 and t.where.get("libown.so", 0) > 0.8 * t.samples, t.describe()


@needs_sampling
def test_a_wait_counts_with_its_own_code_only_where_the_thread_came_back_there(tmp_path: Path) -> None:
    own = _lib(tmp_path, "own")
    t = _sample(tmp_path, "own_nap", [own])  # three 20 ms naps halfway through its own loop
    assert t.own > 0.5 * t.samples, t.describe()
    assert t.waited_ms > 45, t.describe()
    assert t.own_ms > t.waited_ms + 0.5 * t.own * t.period_ns / 1e6, t.describe()
    t = _sample(tmp_path, "sleep_then_numpy", [own])  # the interpreter sleeps, then numpy: nobody's wait
    assert t.own == 0 and t.waited_ms == 0 and t.own_ms == 0, t.describe()
    # its naps are gaps between its samples: the second and third (40 ms); the first may begin before the
    # process's first sample (sampling counts CPU time, and it naps a few µs after it is let go)
    assert t.idle_ms > 35, t.describe()


@needs_sampling
@pytest.mark.parametrize("work", ["new_thread", "new_thread_own", "forked_own", "forked_own_gone"])
def test_threads_and_processes_started_during_the_call_are_sampled(tmp_path: Path, work: str) -> None:
    """The sampling is inherited: a thread or process created during the call (a pool's worker, a helper) is
    sampled like the threads that were there before, in whatever code it runs."""
    own = _lib(tmp_path, "own")
    t = _sample(tmp_path, work, [own])
    assert t.samples * t.period_ns / 1e6 > 30, t.describe()  # its work, seen (80-100 ms of numpy here and in CI, ~150 ms of its loop)
    if work == "new_thread":
        assert t.own == 0 and t.where.get("?", 0) < 0.1 * t.samples, t.describe()
        assert any(n.startswith("_multiarray_umath") for n in t.where), t.describe()
    elif work == "forked_own_gone":  # its code can no longer be placed: seen, counted apart, never its own
        assert t.own == 0 and t.gone > 0.8 * t.samples, t.describe()
        assert t.where.get(cpusampler.GONE) == t.gone and "in processes that ended during the call" in t.describe()
    else:
        assert t.own > 0.8 * t.samples and t.own_ms > 100, t.describe()


@needs_sampling
def test_pytorchs_work_on_a_thread_of_its_own_is_counted_apart(tmp_path: Path) -> None:
    """PyTorch's operators on the calling thread are what its profile records; on a thread the candidate started,
    their samples in PyTorch's libraries are counted apart (`side_library`)."""
    own = _lib(tmp_path, "own")
    t = _sample(tmp_path, "torch_calling", [own])
    assert t.samples > 200 and t.side_library == 0 and t.foreign == 0, t.describe()
    assert t.calling_library is not None and t.calling_library > 0.8 * t.samples, t.describe()
    t = _sample(tmp_path, "torch_thread", [own])
    assert t.samples > 200 and t.side_library > 0.8 * t.samples and t.foreign == 0, t.describe()
    assert t.calling_library is not None and t.calling_library < 0.1 * t.samples, t.describe()
    assert t.side_library_ms == pytest.approx(t.side_library * 0.1), t.describe()


@needs_sampling
def test_code_mapped_during_the_call_is_not_its_own(tmp_path: Path) -> None:
    own = _lib(tmp_path, "own")
    late = _lib(tmp_path, "late")
    t = _sample(tmp_path, "late_library", [own, late], late)
    assert t.samples > 50 and t.own == 0, t.describe()
    assert t.where.get("liblate.so", 0) > 0.8 * t.samples


def _tally(own_bins: int, samples: int, period_ms: float = 0.05, unsampled_ms: float = 0.0) -> cpusampler.Tally:
    return cpusampler.Tally(period_ns=int(period_ms * 1e6), samples=samples, own=own_bins, bins=samples,
                            own_bins=own_bins, unsampled_ms=unsampled_ms)


def test_a_claim_the_samples_hold_stands_and_one_they_do_not_is_library_work() -> None:
    summary = {"custom_ms": 10.0}  # per call, three calls: 30 ms claimed
    f, msg, held = kernelcheck.against_samples(OWN_CODE, "own", summary, _tally(500, 700), 3)  # 25 ms sampled
    assert (f, held) == (OWN_CODE, kernelcheck.SAMPLES_AGREE) and "agrees" in msg
    f, msg, held = kernelcheck.against_samples(OWN_CODE, "own", summary, _tally(200, 700), 3)  # 10 ms: a loaded
    assert (f, held) == (OWN_CODE, kernelcheck.SAMPLES_AGREE)  # machine's wall ranges stay within the slack
    f, msg, held = kernelcheck.against_samples(OWN_CODE, "own", summary, _tally(120, 700), 3)  # 6 ms: a fifth
    assert (f, held) == (LIBRARY_ONLY, kernelcheck.SAMPLES_CONTRADICT)  # of the claim is not a loaded machine
    f, msg, held = kernelcheck.against_samples(OWN_CODE, "own", summary, _tally(2, 700), 3)
    assert (f, held) == (LIBRARY_ONLY, kernelcheck.SAMPLES_CONTRADICT) and "claims 30 ms" in msg
    f, msg, held = kernelcheck.against_samples(OWN_CODE, "own", summary, _tally(2, 700, unsampled_ms=40.0), 3)
    assert (f, held) == (KERNEL_NOT_CHECKED, kernelcheck.SAMPLES_UNMEASURED) and "could not be measured" in msg
    f, _msg, held = kernelcheck.against_samples(LIBRARY_ONLY, "lib", summary, _tally(2, 700), 3)
    assert (f, held) == (LIBRARY_ONLY, kernelcheck.SAMPLES_CONTRADICT)
    f, _msg, held = kernelcheck.against_samples(OWN_CODE, "own", {"custom_ms": 0.05}, _tally(0, 40), 3)
    assert (f, held) == (OWN_CODE, kernelcheck.SAMPLES_AGREE)  # too little to tell apart from the margin


def test_library_work_no_event_shows_is_the_librarys_where_it_could_do_the_work() -> None:
    """numpy (another package than PyTorch) runs no PyTorch operator, and PyTorch's operators on a thread the
    candidate started are not its profile's: where the samples find such work for at least half the reference's
    time on the work left to its own code, the library did that work. A few samples (numpy reading a shape), far
    less than that work, or PyTorch's work that the profiled operators' worker threads account for change nothing."""
    def sampled(foreign: int = 0, side: int = 0, gone: int = 0) -> cpusampler.Tally:  # every 50 µs, three calls
        t = _tally(20, 700)
        t.foreign, t.side_library, t.gone = foreign, side, gone
        t.where, t.foreign_names = {"_multiarray_umath.so": foreign, "libtorch_cpu.so": side}, {"_multiarray_umath.so"}
        return t

    def check(t: cpusampler.Tally, left_ms: float, evented_ms: float = 0.0, cpus: int = 2) -> tuple[str, str]:
        return kernelcheck.unevented_library(OWN_CODE, "own", left_ms, t, 3, evented_ms, cpus)

    f, msg = check(sampled(foreign=40), 0.2)  # 0.67 ms a call against 0.2
    assert f == LIBRARY_ONLY and "_multiarray_umath.so 40" in msg and "The profile said: own" in msg, msg
    assert check(sampled(foreign=12), 0.2)[0] == LIBRARY_ONLY  # 0.2 ms a call: at least half
    assert check(sampled(foreign=40), 2.0) == (OWN_CODE, "own")
    assert check(sampled(foreign=kernelcheck.UNSEEN_MIN_BINS - 1), 0.0) == (OWN_CODE, "own")
    # PyTorch on another thread: 2 ms a call, its profiled operators 0.01 ms a call on two CPUs
    f, msg = check(sampled(side=120), 0.3, evented_ms=0.01)
    assert f == LIBRARY_ONLY and "threads other than the one its profile records (120 samples)" in msg, msg
    # ... where its profiled operators ran 1.5 ms a call, their worker threads can have done it all
    assert check(sampled(side=120), 0.3, evented_ms=1.5) == (OWN_CODE, "own")
    assert check(sampled(side=120), 0.3, evented_ms=1.5, cpus=1)[0] == LIBRARY_ONLY  # ... not on one CPU
    # ... but that 1.5 ms is the runner's claim: held to 3x what the calling thread was sampled running in
    # PyTorch's libraries (its operators' own thread), a claim of long operators buys no allowance
    t = sampled(side=120)
    t.calling_library = 2  # 0.1 ms over three calls: at most 0.1 ms a call of operators
    f, msg = check(t, 0.3, evented_ms=1.5)
    assert f == LIBRARY_ONLY and "account for at most 0.283" in msg, msg  # (2 x 0.1 x 3 + 5 x 0.05) / 3
    t.calling_library = 90  # 4.5 ms over three calls: the claim stands
    assert check(t, 0.3, evented_ms=1.5) == (OWN_CODE, "own")
    assert check(sampled(side=kernelcheck.UNSEEN_MIN_BINS), 0.0) == (OWN_CODE, "own")  # a few samples
    # a child forked for the call, gone before its mappings could be read: whatever it ran is not its own code
    f, msg = check(sampled(gone=40), 0.2)
    assert f == LIBRARY_ONLY and "processes that ended before the evaluator could see" in msg, msg
    assert check(sampled(gone=40), 2.0) == (OWN_CODE, "own")  # far less than the work left to its own code
    assert check(sampled(gone=kernelcheck.UNSEEN_MIN_BINS - 1), 0.0) == (OWN_CODE, "own")
    assert kernelcheck.unevented_library(OWN_CODE, "own", 0.2, None, 3) == (OWN_CODE, "own")
    # its own code's time not measured (the samples could neither hold nor refute the profile's claim): library
    # work no event shows that covers the work left to its own code did that work all the same
    f, msg = kernelcheck.unevented_library(KERNEL_NOT_CHECKED, "?", 0.2, sampled(foreign=40), 3)
    assert f == LIBRARY_ONLY and "The profile said: ?" in msg, msg
    assert kernelcheck.unevented_library(KERNEL_NOT_CHECKED, "?", 2.0, sampled(foreign=40), 3) == \
        (KERNEL_NOT_CHECKED, "?")
    assert kernelcheck.unevented_library(KERNEL_NOT_CHECKED, "?", 0.0, sampled(foreign=40), 3) == \
        (KERNEL_NOT_CHECKED, "?")  # no work known to be left to its own code: nothing to hold it against


def test_own_code_no_profiler_event_covers_is_timed_by_the_samples_alone() -> None:
    """A launcher called through ctypes leaves no event in the profile: where the samples found the binaries the
    evaluator built at work, their time is its own code's; nothing is added from a few samples, or where the
    profile already has its own code."""
    t = _tally(200, 700)
    t.sampled_ms = 35.0
    assert kernelcheck.unseen_own_ms({"custom_ms": 0.0}, t, 4) == pytest.approx(200 * 0.05 / 4)
    assert kernelcheck.unseen_own_ms({"custom_ms": 0.3}, t, 4) == 0.0  # the profile saw it: the claim is checked
    assert kernelcheck.unseen_own_ms({"custom_ms": 0.0}, None, 4) == 0.0
    few = _tally(kernelcheck.UNSEEN_MIN_BINS - 1, 700)
    few.sampled_ms = 35.0
    assert kernelcheck.unseen_own_ms({}, few, 4) == 0.0
    beside = _tally(20, 7000)  # an epilogue's 1 ms beside a library GEMM's many threads: its own code still
    beside.sampled_ms = 350.0
    assert kernelcheck.unseen_own_ms({}, beside, 4) == pytest.approx(20 * 0.05 / 4)


def test_a_library_called_without_events_is_unmeasured_until_the_samples_tell() -> None:
    """Its library called through ctypes, none of its own code in the profile: not measured where nothing sampled
    or the calls were too short for the samples, known where the samples timed it or a well-sampled call found
    none of it in its binaries."""
    assert "could not be sampled" in kernelcheck.unseen_unmeasured({}, None)
    assert "too short" in kernelcheck.unseen_unmeasured({}, _tally(4, 131))
    assert kernelcheck.unseen_unmeasured({}, _tally(kernelcheck.UNSEEN_MIN_BINS, 131)) == ""
    assert kernelcheck.unseen_unmeasured({}, _tally(0, kernelcheck.UNSEEN_WELL_SAMPLED)) == ""
    assert "too short" in kernelcheck.unseen_unmeasured({}, _tally(0, 40))
    assert kernelcheck.unseen_unmeasured({"custom_ms": 0.2}, None) == ""  # the profile has it: the claim is checked
