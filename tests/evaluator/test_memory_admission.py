"""Device memory admission: candidates side by side hold what their tasks need from admission to the end of their
device stage, so a burst started at once never all see the same free memory and run out together."""

from __future__ import annotations

import threading
import time

import pytest
from eval_helpers import Board, Host

from evaluator.processes.memory import AdmitCancelled, Hold, MemoryLedger

GB = 1 << 30


class Device:
    """A device's free memory: `total` less what the admitted candidates have allocated so far."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.taken: dict[int, int] = {}  # pid -> bytes
        self.lock = threading.Lock()

    def free(self) -> int:
        with self.lock:
            return self.total - sum(self.taken.values())

    def used(self, pids: set[int]) -> int:
        with self.lock:
            return sum(b for p, b in self.taken.items() if p in pids)


def test_a_burst_is_admitted_as_far_as_it_fits_and_the_rest_wait_for_a_release() -> None:
    dev, ledger = Device(140 * GB), MemoryLedger()
    admitted: list[int] = []
    lock = threading.Lock()

    def candidate(i: int) -> None:
        ledger.admit(i, Hold(40 * GB, lambda: {i}), dev.free, dev.used, bound_s=0.2)
        with lock:
            admitted.append(i)
        # allocates its memory only after admission, as a runner does after its import
        with dev.lock:
            dev.taken[i] = 40 * GB

    threads = [threading.Thread(target=candidate, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # longer than the bound: holders of this process are waited for whatever the bound
    assert len(admitted) == 3, admitted  # 3 x 40 GB of 140: the fourth would run out
    first = admitted[0]
    with dev.lock:
        del dev.taken[first]
    ledger.release(first)
    time.sleep(0.6)
    assert len(admitted) == 4
    for i in admitted[1:]:
        with dev.lock:
            dev.taken.pop(i, None)
        ledger.release(i)
    for t in threads:
        t.join(5)
    assert len(admitted) == 5 and ledger.held() == 1  # the last one holds its memory until it releases it


def test_what_a_holder_already_took_is_not_counted_twice() -> None:
    """Free memory shows what a holder allocated; only the rest of its need is still to come."""
    dev, ledger = Device(100 * GB), MemoryLedger()
    ledger.admit(1, Hold(60 * GB, lambda: {1}), dev.free, dev.used, bound_s=0.1)
    dev.taken[1] = 60 * GB
    got = ledger.admit(2, Hold(35 * GB, lambda: {2}), dev.free, dev.used, bound_s=0.1)
    assert not got.timed_out and got.waited_s < 0.2 and got.free == 40 * GB


def test_memory_allocated_for_a_holder_elsewhere_is_not_counted_twice() -> None:
    """Its arena is allocated by the referee (another process): once said taken, free memory shows it and it is
    no longer to come; until then it is."""
    dev, ledger = Device(100 * GB), MemoryLedger()
    first = Hold(60 * GB, lambda: {1})
    ledger.admit(1, first, dev.free, dev.used, bound_s=0.1)
    dev.taken[9] = 40 * GB  # the referee (pid 9) allocates the arena for it
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(ledger.admit(2, Hold(35 * GB, lambda: {2}), dev.free, dev.used,
                                                               bound_s=0.1)))
    t.start()
    time.sleep(0.4)
    assert t.is_alive(), "60 GB were promised, 40 of them allocated where its own pids do not show them"
    first.taken = 40 * GB
    t.join(2)
    assert got and not got[0].timed_out


def test_without_a_per_process_view_admission_is_stricter_never_looser() -> None:
    dev, ledger = Device(100 * GB), MemoryLedger()
    ledger.admit(1, Hold(60 * GB, lambda: {1}), dev.free, lambda pids: 0, bound_s=0.1)
    dev.taken[1] = 60 * GB
    done = threading.Event()
    threading.Thread(target=lambda: (ledger.admit(2, Hold(35 * GB), dev.free, lambda pids: 0, bound_s=0.1),
                                     done.set()), daemon=True).start()
    assert not done.wait(0.5)  # 40 free, 60 still counted as to come: it waits for the holder
    ledger.release(1)
    assert done.wait(2)


def test_other_processes_memory_is_waited_for_up_to_the_bound_then_it_goes_ahead() -> None:
    dev, ledger = Device(20 * GB), MemoryLedger()
    dev.taken[999] = 15 * GB  # a notebook's
    t0 = time.monotonic()
    got = ledger.admit(1, Hold(8 * GB), dev.free, dev.used, bound_s=0.4)
    assert got.timed_out and 0.35 <= time.monotonic() - t0 < 2.0 and got.free == 5 * GB


def test_a_cancelled_wait_holds_nothing() -> None:
    dev, ledger = Device(10 * GB), MemoryLedger()
    ledger.admit(1, Hold(8 * GB), dev.free, dev.used, bound_s=0.1)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(AdmitCancelled):
        ledger.admit(2, Hold(8 * GB), dev.free, dev.used, bound_s=10.0, cancel=cancel)
    assert ledger.held() == 1


def test_turns_are_first_come_first_served_and_a_cancelled_one_leaves_the_line() -> None:
    ledger = MemoryLedger()
    first = ledger.take_turn()
    order: list[str] = []
    cancel = threading.Event()

    def wait(name: str, ev: threading.Event | None = None) -> None:
        try:
            t = ledger.take_turn(ev)
        except AdmitCancelled:
            order.append(f"{name} cancelled")
            return
        order.append(name)
        t.end()

    threads = []
    for name, ev in (("a", None), ("b", cancel), ("c", None)):
        threads.append(threading.Thread(target=wait, args=(name, ev)))
        threads[-1].start()
        time.sleep(0.1)  # in this order
    assert ledger.waiting_turns() == 3 and order == []
    cancel.set()
    time.sleep(0.5)
    assert order == ["b cancelled"], "a cancelled wait leaves the line at once, holding nobody up"
    first.end()
    first.end()  # harmless twice
    for t in threads:
        t.join(5)
    assert order == ["b cancelled", "a", "c"] and ledger.waiting_turns() == 0


BIG_TASK_BOUND_S = 3.0  # the admission bound of the four big tasks below (well above their ~1.2 s in turns)


def _evaluation(ledger: MemoryLedger, dev: Device, n: int, referee: int, need: int, turns: bool,
                done: dict[int, float]) -> None:
    """One evaluation as the evaluator runs it on a GPU: its referee loads (and stays, pinned, while its candidate
    waits), then its candidate is admitted, runs and ends, and the referee goes."""
    turn = ledger.take_turn() if turns else None
    with dev.lock:
        dev.taken[1000 + n] = referee  # the referee's inputs and reference outputs, kept for its candidate
    time.sleep(0.1)  # its load takes a while (side by side, all of them load meanwhile)
    ledger.admit(n, Hold(need, lambda: {n}), dev.free, dev.used, bound_s=BIG_TASK_BOUND_S)
    if turn is not None:
        turn.end()
    _candidate_runs(ledger, dev, n, need, done)


def _candidate_runs(ledger: MemoryLedger, dev: Device, n: int, need: int, done: dict[int, float]) -> None:
    """An admitted candidate allocates its need, runs and ends; its referee goes with it. `done[n]`: when it ended,
    -1 where what it allocated did not fit."""
    ok = dev.free() >= need
    with dev.lock:
        dev.taken[n] = need
    time.sleep(0.2)  # verify and time
    with dev.lock:
        del dev.taken[n], dev.taken[1000 + n]
    ledger.release(n)
    done[n] = time.monotonic() if ok else -1.0


def _side_by_side(threads: list[threading.Thread], done: dict[int, float], join_s: float) -> list[int]:
    """Runs the evaluations at once; the ones whose candidates ran out of memory."""
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_s)
    return [n for n, t in done.items() if t < 0]


@pytest.mark.parametrize("turns", [False, True])
def test_in_turns_evaluations_of_big_tasks_never_wait_on_each_others_referees(turns: bool) -> None:
    """Four tasks whose referee and candidate fit two at a time: loaded all at once, the referees leave no room
    for any candidate (each waits for the others' referees until the bound, then runs out of memory); in turns,
    every one is admitted with room for it, one after another."""
    dev, ledger = Device(100 * GB), MemoryLedger()
    done: dict[int, float] = {}
    t0 = time.monotonic()
    ran_out = _side_by_side([threading.Thread(target=_evaluation, args=(ledger, dev, n, 20 * GB, 25 * GB, turns,
                                                                        done)) for n in range(4)], done, 20)
    if turns:
        # one after another: ~1.2 s of loads and runs, never a wait until the bound (which alone would exceed this)
        assert not ran_out and len(done) == 4 and max(done.values()) - t0 < BIG_TASK_BOUND_S - 0.1, done
    else:
        assert ran_out, "without turns the pinned referees should have left no room"


def test_a_wait_for_other_processes_memory_is_posted_while_it_lasts() -> None:
    ledger, board = MemoryLedger(), Board()
    ledger.board = board
    t0 = time.monotonic()

    def free() -> int:  # other processes hold all but 10 GB for 2.5 s
        return 10 * GB if time.monotonic() - t0 < 2.5 else 100 * GB

    got = ledger.admit("c", Hold(30 * GB), free, lambda pids: 0, bound_s=30.0)
    assert not got.timed_out and got.waited_s >= 2.4
    # posted after a second of waiting (not for a passing shortfall), what it lacks, again while it waits, then gone
    assert board.posted[0] == 20 * GB and board.posted[-1] == 0, board.posted
    assert 2 <= len(board.posted) - 1 <= 3, board.posted
    ledger.release("c")


def test_a_wait_for_this_process_own_holders_is_not_posted() -> None:
    ledger, board = MemoryLedger(), Board()
    ledger.board = board
    ledger.admit("first", Hold(90 * GB), lambda: 100 * GB, lambda pids: 0, bound_s=1.0)
    done = threading.Event()

    def second() -> None:
        ledger.admit("second", Hold(30 * GB), lambda: 100 * GB, lambda pids: 0, bound_s=1.0)
        done.set()

    threading.Thread(target=second, daemon=True).start()
    time.sleep(1.6)  # past WANT_AFTER_S: still not posted, the memory is this process's own
    assert not done.is_set() and board.posted == []
    ledger.release("first")
    assert done.wait(2.0) and board.posted == []
    ledger.release("second")


def test_idle_referees_go_while_another_process_waits_for_memory() -> None:
    ledger, board = MemoryLedger(), Board()
    ledger.board = board
    shed = threading.Semaphore(0)
    stop = ledger.watch(shed.release)
    try:
        assert not shed.acquire(timeout=2.5)  # nobody waits: what is kept stays
        board.others = 6 * GB
        assert shed.acquire(timeout=2.5)  # another process waits: our idle referees go
    finally:
        stop()
    while shed.acquire(timeout=0):
        pass
    assert not shed.acquire(timeout=2.5)  # stopped (the evaluator closed): never called again


def test_a_waiting_admission_says_what_it_waits_for() -> None:
    # the user sees why a verdict has not started: the figures, and whether this process's own evaluations or other
    # processes hold the memory
    dev, ledger = Device(20 * GB), MemoryLedger()
    ledger.admit(1, Hold(12 * GB, lambda: {1}), dev.free, dev.used, bound_s=0.1)  # admitted, nothing taken yet
    heard: list = []
    t = threading.Thread(target=lambda: ledger.admit(2, Hold(10 * GB, lambda: {2}), dev.free, dev.used, bound_s=5.0,
                                                     on_wait=heard.append), daemon=True)
    t.start()
    time.sleep(0.4)
    assert heard and heard[0].holders == 1 and heard[0].need == 10 * GB and heard[0].pending == 12 * GB
    assert heard[0].describe() == "20.0 GB free, 10.0 GB needed; 1 evaluation(s) of this process still to take 12.0 GB of it"
    ledger.release(1)
    t.join(2)
    ledger.release(2)
    dev.taken[999] = 15 * GB  # a notebook's
    heard.clear()
    ledger.admit(3, Hold(8 * GB), dev.free, dev.used, bound_s=0.3, on_wait=heard.append)
    assert heard and heard[0].describe().endswith("other processes hold the rest")


CROSS_BOUND_S = 8.0  # the admission bound of the two processes below (well above their ~5 s when one gives way)


def _process_evaluation(ledger: MemoryLedger, dev: Device, n: int, referee: int, need: int, give_way: bool,
                        loaded: threading.Barrier, done: dict[int, float], gave: dict[int, int]) -> None:
    """One evaluation of its own process (its own ledger; the board shared): its referee loads and stays, pinned,
    while its candidate waits; one that gives way lets its referee go, and loads it again once admitted."""
    with dev.lock:
        dev.taken[1000 + n] = referee
    loaded.wait(5)  # both referees loaded before either candidate asks (their loads overlapped)
    time.sleep(0.05 * n)  # the first process's wait begins first

    def let_go() -> int:
        with dev.lock:
            return dev.taken.pop(1000 + n, 0)

    hold = Hold(need, lambda: {n})
    got = ledger.admit(n, hold, dev.free, dev.used, bound_s=CROSS_BOUND_S, on_yield=let_go if give_way else None)
    if got.regain:  # as the device stage does: nothing held while its referee loads again, then its own need
        gave[n] = got.regain
        ledger.release(n, freed=False)
        hold.need -= got.regain
        with dev.lock:
            dev.taken[1000 + n] = referee
        got = ledger.admit(n, hold, dev.free, dev.used, bound_s=CROSS_BOUND_S, since=got.since)
    _candidate_runs(ledger, dev, n, need, done)


@pytest.mark.parametrize("give_way", [False, True])
def test_two_processes_that_each_hold_what_the_other_waits_for_take_turns_by_when_they_began(give_way: bool) -> None:
    """Two processes (two ledgers, one host-wide board) on a card that fits one big task at a time: each has loaded
    its referee, which stays for its candidate, and each candidate waits for memory the other's referee holds. Left
    alone, both wait out their bound and one runs out of memory; with the board's order, the later one lets its
    referee go, the first is admitted and runs, then the later one loads its referee again and runs."""
    dev, wall = Device(60 * GB), {}
    ledgers = {}
    for pid in (1, 2):
        ledgers[pid] = MemoryLedger()
        ledgers[pid].board = Board(wall, pid)
    done: dict[int, float] = {}
    gave: dict[int, int] = {}
    t0 = time.monotonic()
    loaded = threading.Barrier(2)
    ran_out = _side_by_side([threading.Thread(target=_process_evaluation, args=(
        ledgers[pid], dev, pid, 20 * GB, 25 * GB, give_way, loaded, done, gave)) for pid in (1, 2)], done, 30)
    if give_way:
        assert not ran_out and len(done) == 2, done
        assert gave == {2: 20 * GB}, gave  # the later one gave way, with its referee's memory, and only it
        assert done[1] < done[2] and max(done.values()) - t0 < CROSS_BOUND_S - 0.5, (done, t0)
    else:
        assert ran_out and time.monotonic() - t0 >= CROSS_BOUND_S, done  # each waited out its bound
    assert wall == {}  # nothing left wanted on the board


def test_an_admission_gives_way_only_to_a_wait_that_began_before_its_own() -> None:
    dev, wall = Device(30 * GB), {}
    ledger = MemoryLedger()
    ledger.board = Board(wall, 1)
    dev.taken[999] = 20 * GB  # another process's
    wall[2] = (8 * GB, time.time() + 3600)  # that process waits too, but began after this one will
    asked: list[float] = []

    def let_go() -> int:
        asked.append(time.monotonic())
        return 5 * GB

    got = ledger.admit("c", Hold(15 * GB), dev.free, dev.used, bound_s=6.0, on_yield=let_go)
    assert got.timed_out and not asked and got.regain == 0  # never gave way to a later wait
    ledger.release("c")
    wall[2] = (8 * GB, time.time() - 5)  # now one that began before it
    got = ledger.admit("d", Hold(15 * GB), dev.free, dev.used, bound_s=6.0, on_yield=let_go)
    assert len(asked) == 1 and got.regain == 5 * GB  # once, and the memory it gave back is its to wait for
    ledger.release("d")


@pytest.mark.parametrize("running", [False, True])
def test_an_admitted_evaluation_short_of_memory_mid_run_goes_before_one_waiting_to_start(running: bool) -> None:
    """One process on a card that fits one big task at a time (seen on an 80 GB card, the fixtures side by side):
    evaluation 1 is admitted and runs, and its referee's check runs out of memory; evaluation 2 has loaded its
    referee and waits for 1 to end. 2's referee holds what 1's check lacks and 2 cannot start before 1 ends: left
    alone, 1 waits out its bound and fails. As a running evaluation's wait, 2 lets its referee go at once; 1's check
    gets its memory and ends, then 2 loads its referee again and is admitted."""
    dev, ledger = Device(60 * GB), MemoryLedger()
    ledger.admit(1, Hold(30 * GB, lambda: {1}), dev.free, dev.used, bound_s=1.0)
    dev.taken.update({1: 30 * GB, 1001: 10 * GB, 1002: 15 * GB})  # its candidate's share; both referees
    gave: list[int] = []

    def let_go() -> int:
        with dev.lock:
            gave.append(dev.taken.pop(1002, 0))
        ledger.freed()
        return gave[-1]

    got: list = []

    def second() -> None:
        got.append(ledger.admit(2, Hold(30 * GB, lambda: {2}), dev.free, dev.used, bound_s=10.0, on_yield=let_go))

    t = threading.Thread(target=second)
    t.start()
    time.sleep(0.3)  # 2 waits for 1 (a holder of this process)
    t0 = time.monotonic()
    ok = ledger.wait_free(("referee", 1), 8 * GB, dev.free, bound_s=3.0, running=running)
    waited = time.monotonic() - t0
    with dev.lock:
        del dev.taken[1], dev.taken[1001]
    ledger.release(1)
    t.join(15)
    ledger.release(2)
    if running:
        assert ok and waited < 1.5 and gave == [15 * GB], (ok, waited, gave)
        assert got and got[0].regain == 15 * GB and not got[0].timed_out
    else:
        assert not ok and waited >= 3.0 and gave == []  # its check's memory never came: it fails


def test_a_running_evaluations_wait_goes_first_on_the_board() -> None:
    """Across processes the same: an admission of another process waiting for this one's memory gives way to an
    admitted evaluation's mid-run wait, whenever that wait began."""
    wall: dict = {}
    mine, theirs = MemoryLedger(), MemoryLedger()
    mine.board, theirs.board = Board(wall, 1), Board(wall, 2)
    dev = Device(60 * GB)
    dev.taken.update({1: 30 * GB, 1002: 15 * GB})  # this process's running candidate; the other's referee
    gave: list[int] = []

    def let_go() -> int:
        with dev.lock:
            gave.append(dev.taken.pop(1002, 0))
        return gave[-1]

    got: list = []
    t = threading.Thread(target=lambda: got.append(theirs.admit(2, Hold(30 * GB, lambda: {2}), dev.free, dev.used,
                                                                 bound_s=12.0, on_yield=let_go)))
    t.start()
    time.sleep(0.5)  # its wait began first
    ok = mine.wait_free(("referee", 1), 20 * GB, dev.free, bound_s=10.0, running=True)
    with dev.lock:
        del dev.taken[1]
    t.join(20)
    theirs.release(2)
    assert ok and gave == [15 * GB] and got and got[0].regain == 15 * GB
    assert wall == {}


def test_an_arena_of_big_sets_holds_enough_calls_for_a_request_within_an_eighth_of_the_device() -> None:
    from evaluator.stages.device.load import TIMED_SETS, arena_slots

    mb, gb = 1 << 20, 1 << 30
    h200, v100 = 140 * 10**9, 16 * gb
    # small sets: the referee's cap, in a sixteenth of the device (at most 8 GB)
    assert arena_slots(128, 128 * mb, h200, gpu=True) == 64
    assert arena_slots(128, 1 * mb, h200, gpu=True) == 128
    # 512 MB sets (ReLU over 8192 x 8192, fp32): 16 in 8 GB were too few calls a request; 32 within an eighth
    assert arena_slots(128, 512 * mb, h200, gpu=True) == TIMED_SETS == 32
    # an eighth of a 16 GB card holds 4 of them; never less than the sixteenth gave
    assert arena_slots(128, 512 * mb, v100, gpu=True) == 4
    assert arena_slots(128, 300 * mb, v100, gpu=True) == 6
    # the referee's own cap and the floor of two still hold; one set over 1 GB stays alone
    assert arena_slots(8, 512 * mb, h200, gpu=True) == 8
    assert arena_slots(128, 900 * mb, 4 * gb, gpu=True) == 2
    assert arena_slots(1, 6 * gb, h200, gpu=True) == 1
    # the CPU: its own share, whatever the device
    assert arena_slots(128, 1 * mb, 0, gpu=False) == 64


def _evaluation_of_its_own_process(ledger: MemoryLedger, dev: Device, pid: int, need: int, go: threading.Barrier,
                                   spans: dict[int, tuple[float, float, object]], over: list[int]) -> None:
    """One candidate of its own process: admitted, it imports its module, then allocates its need and runs."""
    go.wait()
    got = ledger.admit(pid, Hold(need, lambda: {pid}), dev.free, dev.used, bound_s=10.0)
    start = time.monotonic()
    time.sleep(0.3)
    with dev.lock:
        dev.taken[pid] = need
        if sum(dev.taken.values()) > dev.total:
            over.append(pid)
    time.sleep(0.5)
    with dev.lock:
        del dev.taken[pid]
    ledger.release(pid)
    spans[pid] = (start, time.monotonic(), got)


@pytest.mark.parametrize("one_host", [True, False])
def test_two_processes_admitting_at_once_never_both_take_the_same_free_memory(one_host: bool) -> None:
    """Two processes (two ledgers) each admit a 35 GB candidate on a 60 GB card at the same moment: each sees 60 GB
    free before either has allocated. Seen on an 80 GB card with the GPU suite's three groups side by side: both
    admitted, then both short of memory mid-run, each waiting out its bound for what the other held. With each
    process's promises on the host's board and one decision at a time, the second waits for the first to end."""
    dev, wall = Device(60 * GB), {}
    hosts = [Host()] * 2 if one_host else [Host(), Host()]  # not one host: as before the promises were posted
    ledgers = {}
    for pid in (1, 2):
        ledgers[pid] = MemoryLedger()
        ledgers[pid].board = Board(wall, pid, hosts[pid - 1])
    go, spans, over = threading.Barrier(2), {}, []
    threads = [threading.Thread(target=_evaluation_of_its_own_process,
                                args=(ledgers[pid], dev, pid, 35 * GB, go, spans, over)) for pid in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(spans) == 2, spans
    if not one_host:
        assert over  # each admitted into the same free memory
        return
    first, second = sorted(spans.values(), key=lambda s: s[0])
    assert not over and second[0] >= first[1] - 0.01, spans  # the second admitted only once the first ended
    assert not second[2].timed_out  # admitted with its memory, not at its bound
    assert second[2].reserved == 35 * GB  # and it can say why it waited: the first's promise
    assert hosts[0].reserved == {}  # nothing promised once both ended


def test_what_another_process_took_of_its_promise_is_no_longer_promised() -> None:
    """A promise shrinks as its holder allocates (rewritten on the board every second): another process is admitted
    into what is really left, without waiting for the first to end."""
    dev, wall, host = Device(100 * GB), {}, Host()
    first, second = MemoryLedger(), MemoryLedger()
    first.board, second.board = Board(wall, 1, host), Board(wall, 2, host)
    first.admit(1, Hold(60 * GB, lambda: {1}), dev.free, dev.used, bound_s=1.0)
    assert host.reserved == {1: 60 * GB}
    with dev.lock:
        dev.taken[1] = 60 * GB  # all of it taken: free memory shows it
    got = second.admit(2, Hold(35 * GB, lambda: {2}), dev.free, dev.used, bound_s=10.0)
    assert not got.timed_out and got.waited_s < 2.5, got  # once the first's promise was rewritten (every second)
    second.release(2)
    first.release(1)
    assert host.reserved == {}
