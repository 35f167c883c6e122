"""The host-wide device lease (evaluator/processes/lease.py), on the CPU: timing excludes every other user of the device, across
processes and across threads of one process; turns overlap each other but never a timer; a timer gets in past a
stream of turns (writer preference); a SIGKILLed holder leaves nothing held; cancel and timeout; a forked child's
turns leave its parent's alone; a folder that cannot be used leaves a no-op that says why. Every test is bounded
(a SIGALRM deadline: pytest-timeout is not a dependency)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evaluator.processes.lease import Cancelled, DeviceLease, Held, LeaseTimeout, for_device

ROOT = Path(__file__).resolve().parents[2]
KEY = "cuda:GPU-0a1b2c3d-test/lease"

CHILD = r"""
import os, sys, time
from evaluator.processes.lease import DeviceLease
key, folder, mode, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
lease = DeviceLease(key, folder)
assert not lease.reason, lease.reason
if mode == "loop":  # turns back to back, each 1 ms, counting them into a file
    fd, n = os.open(sys.argv[5], os.O_RDWR | os.O_CREAT), 0
    print("in", flush=True)
    while True:
        with lease.turn():
            n += 1
            os.pwrite(fd, b"%20d" % n, 0)
            time.sleep(0.001)
if mode == "want":  # waits for `hold` GB of device memory other processes hold (since argv[5]), until killed
    lease.want(int(hold) << 30, float(sys.argv[5]) if len(sys.argv) > 5 else None)
    print("in", flush=True)
    time.sleep(3600)
if mode == "reserve":  # its admitted evaluations have yet to take `hold` GB of the device, until killed
    lease.reserve(int(hold) << 30)
    print("in", flush=True)
    time.sleep(3600)
if mode == "admitting":  # decides an admission for `hold` seconds
    with lease.admitting():
        print("in", flush=True)
        time.sleep(hold)
    print("out", flush=True)
    sys.exit(0)
with (lease.exclusive(who="child") if mode == "exclusive" else lease.turn()):
    print("in", flush=True)
    time.sleep(hold)
print("out", flush=True)
"""


@pytest.fixture(autouse=True)
def _deadline() -> Iterator[None]:
    def expired(*_: object) -> None:
        raise TimeoutError("test_lease: over 60 s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def folder(tmp_path: Path) -> str:
    return str(tmp_path / "leases")


@pytest.fixture
def spawn(folder: str) -> Iterator[object]:
    procs: list[subprocess.Popen[str]] = []

    def start(mode: str, hold: float = 0.0, *extra: str) -> subprocess.Popen[str]:
        p = subprocess.Popen([sys.executable, "-c", CHILD, KEY, folder, mode, str(hold), *extra], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout is not None
        assert select.select([p.stdout], [], [], 30)[0], "the child did not start"
        assert p.stdout.readline().strip() == "in"
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def _elapsed(f: object) -> float:
    t = time.monotonic()
    f()  # type: ignore[operator]
    return time.monotonic() - t


def test_exclusive_excludes_another_process_and_names_it(folder: str, spawn) -> None:
    p = spawn("exclusive", 0.5)
    lease = DeviceLease(KEY, folder)
    assert lease.reason == "" and lease.busy() and lease.holders() == [f"child pid {p.pid}"]
    with lease.exclusive(timeout=10, who="test") as held:
        assert held.waited_s >= 0.4, held
        assert held.holders == [f"child pid {p.pid}"]
        assert p.stdout.readline().strip() == "out"  # the child left before we got in
        assert lease.holders() == [f"test pid {os.getpid()}"]
    assert p.wait(10) == 0 and not lease.busy() and lease.holders() == []


def test_two_threads_exclude_each_other_like_two_processes(folder: str) -> None:
    a, b = DeviceLease(KEY, folder), DeviceLease(KEY, folder)  # two Evaluators of one language server
    inside = threading.Event()

    def hold() -> None:
        with a.exclusive(who="A"):
            inside.set()
            time.sleep(0.4)

    t = threading.Thread(target=hold)
    t.start()
    assert inside.wait(5)
    with b.exclusive(timeout=5) as held:
        assert held.waited_s >= 0.3 and held.holders == [f"A pid {os.getpid()}"]
    t.join(5)
    inside.clear()
    t = threading.Thread(target=hold)  # and a turn of one thread waits for another thread's timing
    t.start()
    assert inside.wait(5)

    def turn() -> None:
        with b.turn():
            pass

    assert _elapsed(turn) >= 0.3
    t.join(5)


def test_turns_overlap_each_other(folder: str, spawn) -> None:
    spawn("turn", 5.0)
    lease = DeviceLease(KEY, folder)
    assert not lease.busy()  # a turn is not the exclusive side
    barrier = threading.Barrier(2, timeout=5)

    def turn() -> None:
        with lease.turn():
            barrier.wait()  # both threads inside at once, beside the child's turn

    t = threading.Thread(target=turn)
    t.start()
    assert _elapsed(turn) < 1.0
    t.join(5)


def test_a_turn_waits_for_an_exclusive_holder(folder: str, spawn) -> None:
    p = spawn("exclusive", 0.5)
    lease = for_device(KEY, folder)
    assert for_device(KEY, folder) is lease and for_device(KEY, folder + "-other") is not lease

    def turn() -> None:
        with lease.turn():
            assert p.poll() is not None or p.stdout.readline().strip() == "out"

    assert _elapsed(turn) >= 0.4
    assert p.wait(10) == 0


def test_writer_preference_a_stream_of_turns_does_not_starve_a_timer(folder: str, spawn, tmp_path: Path) -> None:
    counters = [tmp_path / f"turns{i}" for i in range(3)]
    for c in counters:  # three processes taking 1 ms turns back to back: the room is never free of turns
        spawn("loop", 0.0, str(c))

    def counts() -> list[int]:
        return [int(c.read_bytes() or b"0") for c in counters]

    while min(counts()) < 20:
        time.sleep(0.01)
    lease = DeviceLease(KEY, folder)
    waits = []
    for _ in range(5):
        with lease.exclusive(timeout=5) as held:
            before = counts()
            time.sleep(0.05)
            assert counts() == before  # no turn while a timer holds it
        waits.append(held.waited_s)
        time.sleep(0.02)
    print(f"exclusive past a stream of turns: waited {max(waits) * 1e3:.1f} ms at most")
    assert max(waits) < 0.25, waits
    after = counts()
    time.sleep(0.2)
    assert all(x > y for x, y in zip(counts(), after))  # and the turns go on afterwards


@pytest.mark.parametrize("mode", ["exclusive", "turn"])
def test_a_sigkilled_holder_leaves_nothing_held(folder: str, spawn, mode: str) -> None:
    p = spawn(mode, 60.0)
    lease = DeviceLease(KEY, folder)
    assert lease.holders() == ([f"child pid {p.pid}"] if mode == "exclusive" else [])
    with pytest.raises(LeaseTimeout):
        with lease.exclusive(timeout=0.2):
            pass
    p.kill()
    p.wait(10)
    if mode == "exclusive":  # its record is still there, naming a dead pid: ignored
        assert b"child pid" in next(Path(folder).glob("*.room")).read_bytes()
    assert lease.holders() == [] and not lease.busy()
    with lease.exclusive(timeout=2) as held:
        assert held.waited_s < 0.5 and held.holders == []


def test_cancel_and_timeout(folder: str, spawn) -> None:
    p = spawn("exclusive", 60.0)
    lease = DeviceLease(KEY, folder)
    with pytest.raises(LeaseTimeout) as e:
        t = time.monotonic()
        with lease.exclusive(timeout=0.3):
            pass
    assert 0.3 <= time.monotonic() - t < 1.0
    assert e.value.holders == [f"child pid {p.pid}"] and f"child pid {p.pid}" in str(e.value)
    for enter in (lambda ev: lease.exclusive(cancel=ev), lambda ev: lease.turn(cancel=ev)):
        ev = threading.Event()
        threading.Timer(0.2, ev.set).start()
        t = time.monotonic()
        with pytest.raises(Cancelled):
            with enter(ev):
                pass
        assert 0.2 <= time.monotonic() - t < 1.0
    p.kill()
    p.wait(10)
    assert not lease.busy()  # nothing of ours left held: not the turnstile a cancelled turn was waiting at
    with lease.turn():
        pass


def test_nesting_in_one_thread(folder: str) -> None:
    lease = DeviceLease(KEY, folder)
    with lease.exclusive(who="outer") as outer:
        with lease.turn():  # the thread has the device alone already
            with lease.exclusive() as inner:
                assert inner == Held(0.0, [])
        assert lease.holders() == [f"outer pid {os.getpid()}"] and outer.holders == []
    with lease.turn():
        with lease.turn():
            pass
        with pytest.raises(RuntimeError):
            with lease.exclusive(timeout=1):
                pass
    assert not lease.busy()
    with lease.exclusive(timeout=1):  # the nested turns left the room: it is free
        pass


def test_a_forked_childs_turn_leaves_its_parents_turn_alone(folder: str) -> None:
    lease = DeviceLease(KEY, folder)
    with lease.turn():  # this thread has its descriptors now; a forked child inherits them
        pass
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            with lease.turn():  # on the inherited descriptors, leaving it would unlock the parent's turn too
                os.write(w, b"in")
                time.sleep(0.3)
        finally:
            os._exit(0)
    assert os.read(r, 2) == b"in"
    with lease.turn():
        assert os.waitpid(pid, 0)[1] == 0  # the child's turn is over: ours must still hold
        timed_out: list[LeaseTimeout] = []

        def timer() -> None:
            try:
                with lease.exclusive(timeout=0.3):
                    pass
            except LeaseTimeout as e:
                timed_out.append(e)

        t = threading.Thread(target=timer)
        t.start()
        t.join(5)
        assert timed_out, "a timer got in during the parent's turn: the child's turn released it"
    os.close(r)
    os.close(w)


def test_modes_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        lease = DeviceLease(KEY, str(tmp_path / "a" / "leases"))
    finally:
        os.umask(old)
    assert lease.reason == ""
    assert os.stat(lease.folder).st_mode & 0o7777 == 0o1777
    files = sorted(Path(lease.folder).iterdir())
    assert [f.suffix for f in files] == [".room", ".turnstile"]
    assert all(f.stat().st_mode & 0o777 == 0o666 for f in files)
    assert files[0].name == "cuda_GPU-0a1b2c3d-test_lease.room"


def test_the_default_folder_is_klsp_lease_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLSP_LEASE_DIR", str(tmp_path / "env"))
    assert DeviceLease(KEY).folder == str(tmp_path / "env")
    monkeypatch.delenv("KLSP_LEASE_DIR")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    assert DeviceLease(KEY).folder == str(tmp_path / "tmp" / "kernel-lsp-leases")


@pytest.mark.parametrize("how", ["cannot be made", "unwritable"])
def test_an_unusable_folder_is_a_no_op_that_says_why(tmp_path: Path, how: str) -> None:
    if how == "cannot be made":
        (tmp_path / "f").write_text("")
        where = tmp_path / "f" / "leases"
    elif os.geteuid() == 0:
        where = Path("/proc/self")  # a folder even root cannot make files in
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        where = tmp_path / "ro"
    lease = DeviceLease(KEY, str(where))
    assert lease.reason and str(where) in lease.reason
    with lease.exclusive(timeout=0.1) as held:
        assert held == Held(0.0, [])
        with lease.turn():
            pass
    assert not lease.busy() and lease.holders() == []


def test_an_uncontended_turn_is_cheap(folder: str) -> None:
    """A local model takes a turn per generated token. Four flock(2) calls (turnstile in, room in, turnstile out, room
    out) and some Python. Measured on a 2-core Firecracker VM, where one flock costs 1.5-2.5 µs: 7-17 µs a turn
    (noisy), two thirds of it the system calls; a few µs where a system call costs a few hundred ns."""
    lease = for_device(KEY, folder)
    n = 20000
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            with lease.turn():
                pass
        best = min(best, (time.perf_counter() - t) / n)
    print(f"uncontended turn: {best * 1e6:.2f} µs")
    assert best < 100e-6


def test_a_verification_never_runs_beside_another_processs_timing(folder: str, spawn) -> None:
    from evaluator.processes.gate import DeviceGate

    gate = DeviceGate(shared=2)  # an evaluator's gate with the device's host lease, as on a GPU
    gate.lease = DeviceLease(KEY, folder)
    p = spawn("exclusive", 0.5)  # another evaluator's timed round

    def verify() -> None:
        with gate.shared() as waited:
            assert waited >= 0.4  # said as waiting for the device
            assert p.poll() is not None or p.stdout.readline().strip() == "out"

    assert _elapsed(verify) >= 0.4
    inside, leave = threading.Event(), threading.Event()

    def long_verify() -> None:
        with gate.shared():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=long_verify)
    t.start()
    assert inside.wait(5)
    other = DeviceLease(KEY, folder)  # another process's timing (its own descriptors, as another evaluator)
    with pytest.raises(LeaseTimeout):  # the timing waits while the verification runs
        with other.exclusive(timeout=0.3):
            pass
    leave.set()
    t.join(5)
    with other.exclusive(timeout=5) as held:  # and gets in once it is done
        assert held.waited_s < 1.0


@pytest.mark.parametrize("post", ["want", "reserve"])
def test_memory_posted_by_another_process_is_seen_while_it_is_alive_and_fresh(folder: str, spawn, post: str) -> None:
    """What another process waits for (`want`) and what it admitted and has yet to take (`reserve`), on the board."""
    mine, other = DeviceLease(KEY, folder), DeviceLease("cuda:another-device", folder)
    seen = {"want": DeviceLease.wanted_by_others, "reserve": DeviceLease.reserved_by_others}[post]
    suffix = {"want": ".want-", "reserve": ".held-"}[post]
    assert seen(mine) == 0
    p = spawn(post, 6)
    assert seen(mine) == 6 << 30
    assert seen(other) == 0  # another device's board
    getattr(mine, post)(3 << 30)  # our own post is not another process's
    assert seen(mine) == 6 << 30
    getattr(mine, post)(0)
    assert not [n for n in os.listdir(folder) if n.endswith(f"{suffix}{os.getpid()}")]
    theirs = next(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(f"{suffix}{p.pid}"))
    os.utime(theirs, (time.time() - 60, time.time() - 60))
    assert seen(mine) == 0  # not rewritten for a minute: its process no longer waits (holds)
    os.utime(theirs)
    assert seen(mine) == 6 << 30
    p.kill()
    p.wait(10)
    assert seen(mine) == 0  # a dead process waits for nothing and takes nothing more


def test_when_each_wait_began_orders_the_waits_on_the_board(folder: str, spawn) -> None:
    mine = DeviceLease(KEY, folder)
    began = round(time.time() - 10, 3)  # as the board writes it (to the millisecond): the same moment is the same
    p = spawn("want", 6, f"{began:.3f}")
    assert mine.wanted_before(time.time()) == 6 << 30  # it began waiting before a wait that begins now
    assert mine.wanted_before(began - 1) == 0  # and after one that began earlier
    assert mine.wanted_before(began) == (6 << 30 if p.pid < os.getpid() else 0)  # the same moment: the lower pid
    # a wait of ours that began within the same millisecond is ordered as the other process orders it
    assert mine.wanted_before(began + 0.0004) == mine.wanted_before(began - 0.0004) == mine.wanted_before(began)
    assert [(w.pid, w.need) for w in mine.wants()] == [(p.pid, 6 << 30)]
    mine.want(3 << 30, began - 5)  # our own wait is never one that began before ours
    assert mine.wanted_before(time.time()) == 6 << 30
    mine.want(0)
    # a want written without when it began (an older kernel-lsp beside this one): counted, as begun when written
    want = next(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(f".want-{p.pid}"))
    Path(want).write_text(f"{4 << 30}\n")
    assert mine.wanted_by_others() == 4 << 30
    assert mine.wanted_before(time.time() + 60) == 4 << 30 and mine.wanted_before(time.time() - 60) == 0


def test_one_admission_decision_at_a_time_on_the_host(folder: str, spawn) -> None:
    mine = DeviceLease(KEY, folder)
    p = spawn("admitting", 1.0)  # another process decides for a second
    t0 = time.monotonic()
    with mine.admitting():
        assert time.monotonic() - t0 >= 0.5  # ours waited for it
    assert p.stdout is not None and p.stdout.readline().strip() == "out"
    waited: list[float] = []

    def decide() -> None:
        t = time.monotonic()
        with mine.admitting(timeout=0.3):
            waited.append(time.monotonic() - t)

    with mine.admitting():  # two threads of one process exclude each other as two processes do
        other = threading.Thread(target=decide)
        other.start()
        other.join(5)
    assert waited and waited[0] >= 0.3  # it waited, then went on without the lock (a decider stuck inside)
