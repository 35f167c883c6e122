"""Step 1 of the device stage, load: the runner maps the referee's arena, imports the candidate (extensions from
the cache), builds ModelNew and moves it to the device, each a phase with its own timeout and tamper report."""

from __future__ import annotations

import os
import time
from dataclasses import replace

from ... import messages as M
from ... import verdict as V
from ...errors import EvaluatorClosed, EvaluatorError
from ...processes import devmon, memory
from ...processes.handle import WorkerError, WorkerFailed
from .session import REFEREE_MEMORY_WAIT_S, DeviceSession, Stop, first_line

ADMIT_WAIT_S = 120.0  # how long a candidate waits for other processes' device memory its task needs
ARENA_SHARE = {True: 256 << 20, False: 64 << 20}  # one candidate's arena (GPU / CPU), of several side by side
TIMED_SETS = 32  # input sets a GPU arena holds where an eighth of the device allows, so a request holds that many
# calls: the clock's fixed costs vary by ~0.13 ms a request (an H200), 5 % of 16 calls of 0.15 ms, 2.7 % of 32


class Load(DeviceSession):
    """The load step."""

    def _load(self) -> None:
        assert self.runner is not None
        self.on_stage("compile", "loading the candidate on the device")
        t0 = time.perf_counter()
        slots = self.arena_slots = self._arena_slots()
        self._admit()
        opened, fds = self._open_arena(slots)
        self.arena, self.layout, self.n_slots = opened.arena, opened.layout, opened.slots
        if self.hold is not None:  # the arena is allocated (in the referee's process): no longer to come
            self.hold.taken = min(self.hold.need, opened.nbytes)
        try:
            self._runner(M.RunnerOps.attach, M.Attach(nbytes=opened.nbytes, layout=self.layout), "load", 60.0, fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        if self.runner.cgroup is not None:  # now that the task's size is known: what a candidate may hold
            io = self.ref.info.in_bytes + self.ref.info.out_bytes
            floor = (8 << 30) if self.gpu else (2 << 30)  # CUDA's libraries are big
            self.runner.cgroup.set_memory(min(self.runner.spec.memory_bytes or (1 << 62), max(floor, 4 * io + (1 << 30))))
        self.loaded = self._runner(M.RunnerOps.load,
                                   M.LoadCandidate(candidate_src=self.candidate_src, salt=self.salt,
                                                   cache_dir=self.cache_dir, nonce=self.nonce),
                                   "load", self.s.run_timeout)
        self._state("import")
        self._runner(M.RunnerOps.init, M.InitModel(init_args=self.ref.info.init_args, seed=self.ref.init_seed), "load",
                     self.s.run_timeout)
        self._runner(M.RunnerOps.to_device, M.Empty(), "load", self.s.run_timeout)
        self._state("ModelNew(...)")
        self.out.load_s = time.perf_counter() - t0

    def _open_arena(self, slots: int) -> tuple[M.ArenaOpened, list[int]]:
        """The referee allocates the candidate's arena. Admitted or not, another process can take the memory between
        the admission's look and this allocation (an evaluator beside it loading its own task, a notebook that
        grew): out of memory here is asked again once the arena's bytes are free, up to REFEREE_MEMORY_WAIT_S
        (nothing of the candidate runs yet: a wait, never a refusal); after that, an `infra_error` naming who held
        the memory, never the candidate's fault."""
        until, t0, tries = 0.0, time.monotonic(), 0
        while True:
            if self.ref.compiling:  # the referee answers one request at a time: its torch.compile ahead goes first
                self.on_stage("compile", "waiting for the referee (torch.compile of the reference)")
            self._locked(self.ref.lock)
            try:
                opened = self.ref.worker.ask(M.RefereeOps.open_arena, M.OpenArena(slots=slots), timeout=60.0,
                                             cancel=self.cancel)
                break
            except (WorkerError, WorkerFailed) as e:
                cancelled = isinstance(e, WorkerError) and (e.kind == "cancelled" or self.ref.closed)
                if isinstance(e, WorkerFailed) and memory.OUT_OF_MEMORY.search(str(e.failed.error or "")):
                    until = until or time.monotonic() + REFEREE_MEMORY_WAIT_S
                    if not self.gpu or time.monotonic() >= until:
                        waited = (f" (waited {time.monotonic() - t0:.0f} s for the memory and tried {tries + 1} "
                                  f"times)") if tries else ""
                        raise Stop(V.INFRA_ERROR, self._arena_out_of_memory(e.failed) + waited, "load",
                                   detail=str(e.failed.traceback or "")) from None
                else:
                    raise Stop(V.CANCELLED if cancelled else V.INFRA_ERROR,
                               "cancelled" if cancelled else f"the referee failed: {e}", "load") from None
            finally:
                self.ref.lock.release()
            tries += 1
            self.on_stage("compile", "waiting for device memory (another process took it before the candidate's "
                                     "arena was allocated)")
            memory.ledger(self.device).wait_free(("arena", id(self)), slots * max(1, self.ref.info.set_bytes),
                                                 self._free_unlocked, until - time.monotonic(), self.shed_referees,
                                                 self.cancel, running=True)
            if self.cancel is not None and self.cancel.is_set():
                raise Stop(V.CANCELLED, "cancelled", "load")
        if tries:
            self.out.warnings.append(
                f"the referee ran out of device memory allocating the candidate's arena (another process took it "
                f"after admission): waited {time.monotonic() - t0:.1f} s and allocated it on try {tries + 1}")
        return opened

    def _arena_out_of_memory(self, failed: M.Failed) -> str:
        """The referee ran out of device memory allocating the candidate's arena: before the candidate was imported
        (nothing of it runs yet), so never its fault; the memory others held is named where it explains it (an
        admission that waited out its bound for other processes' memory and went ahead)."""
        first = first_line(failed.error, "out of memory", 200)
        held = self._memory_held_by_others()
        why = f", but {held}" if held else ""
        return (f"the referee ran out of device memory allocating the candidate's arena (before the candidate was "
                f"imported){why}: not the candidate's fault; {first}")

    def _arena_slots(self) -> int:
        """Input sets in this candidate's own arena (see `arena_slots`)."""
        info = self.ref.info
        return arena_slots(info.slots_max or 1, info.set_bytes, info.total_bytes, self.gpu)

    def _admit(self) -> None:
        """GPU: wait until the device has the memory this task needs before the candidate is imported, rather than
        fail with out of memory: candidates of this process side by side hold what their tasks need until their
        device stages end (`processes/memory.py`), so ones started at once do not all see the same free memory;
        other processes' memory is waited for up to ADMIT_WAIT_S. Measured before the import, so what the
        candidate allocates itself is never counted as other processes' memory."""
        if not self.gpu:
            return

        def used(pids: set[int]) -> int:
            return devmon.memory_of(self.monitor, pids)

        def pids() -> set[int]:
            r = self.runner
            return set(r.processes()) if r is not None and not r.dead else set()

        asking = [0.0]  # seconds spent asking the referee (busy with another request: not a wait for memory)

        def free() -> int:
            nvml = self._nvml_free()  # never waits for the referee (its torch.compile ahead holds it for seconds)
            if nvml is not None:
                return nvml
            t = time.perf_counter()
            try:
                return self._referee(M.RefereeOps.memory).free
            finally:
                asking[0] += time.perf_counter() - t

        self.hold = memory.Hold(self._need_bytes(), pids)
        total = self.ref.info.total_bytes
        never = bool(total) and self.hold.need > total  # more than the whole device: waiting gives nothing
        ledger, bound = memory.ledger(self.device), 0.0 if never else ADMIT_WAIT_S
        try:
            got = ledger.admit(id(self), self.hold, free, used, bound, self.cancel, on_wait=self._on_memory_wait,
                               on_yield=None if never else self._give_way)
            if got.regain:  # its referee went for another process's earlier wait: loaded again, then its own need
                ledger.release(id(self), freed=False)
                self.hold.need -= got.regain
                t0 = time.perf_counter()
                self._take_referee_again()
                reload_s = time.perf_counter() - t0
                again = ledger.admit(id(self), self.hold, free, used, bound, self.cancel,
                                     on_wait=self._on_memory_wait, since=got.since)
                self.out.warnings.append(
                    f"let its referee go ({got.regain / 2**30:.1f} GB) for an evaluation of another process whose "
                    f"wait for device memory began first (each held what the other waited for), and loaded it "
                    f"again once there was room ({reload_s:.1f} s)")
                got = replace(again, waited_s=got.waited_s + again.waited_s, timed_out=got.timed_out or again.timed_out,
                              holders_waited_for=got.holders_waited_for + again.holders_waited_for,
                              reserved=max(got.reserved, again.reserved))
        except memory.AdmitCancelled:
            raise Stop(V.CANCELLED, "cancelled", "load") from None
        self.admitted = True
        if self.turn is not None:  # admitted: the next evaluation may take its referee and wait for its memory
            self.turn.end()
        self.free_at_start = got.free
        if never:
            self.out.warnings.append(f"this task needs about {self.hold.need / 2**30:.1f} GB of device memory, more "
                                     f"than the device's {total / 2**30:.1f} GB: tried without waiting for memory")
        waited = got.waited_s - asking[0]
        if waited > 0.5:
            why = (f"{got.holders_waited_for} evaluation(s) of this process held it" if got.holders_waited_for
                   else f"other processes held it or had yet to take {got.reserved / 2**30:.1f} GB of it for "
                        "evaluations they admitted" if got.reserved else "other processes held it")
            self.out.warnings.append(f"waited {waited:.1f} s for device memory before loading ({why}; "
                                     f"{self._memory_note()})")

    def _on_memory_wait(self, waiting: memory.Waiting) -> None:
        """The task's memory is not free: this process's idle referees go first (else the wait would end only at
        the bound, with their memory still held), and the user is told what it waits for."""
        if self.shed_referees is not None:
            self.shed_referees()
        self.on_stage("compile", f"waiting for device memory ({waiting.describe()})")

    def _give_way(self) -> int:
        """Another process's evaluation began waiting for device memory before this one, and each may hold what the
        other waits for (`processes/memory.py`): this evaluation's referee goes, if it is this evaluation's alone
        and free memory can be read without it (NVML). Returns the bytes it gave back (0: it stays)."""
        if self.let_referee_go is None or self.take_referee is None or self._nvml_free() is None:
            return 0
        gave = self.let_referee_go(self.ref)
        if gave > 0:
            self.ref_held = False
            self.on_stage("compile", "waiting for device memory (its referee let go for another process's "
                                     "evaluation that waited first)")
        return gave

    def _take_referee_again(self) -> None:
        assert self.take_referee is not None
        self.on_stage("compile", "loading the reference again")
        try:
            self.ref = self.take_referee()
        except WorkerError as e:
            if e.kind == "cancelled":
                raise Stop(V.CANCELLED, "cancelled", "load") from None
            raise Stop(V.INFRA_ERROR, f"the referee failed (loading the reference again): {e.message}", "load",
                       log=e.log_tail) from None
        except EvaluatorClosed:
            raise Stop(V.CANCELLED, "cancelled", "load") from None
        except EvaluatorError as e:  # it loaded before: whatever fails now is not the candidate's
            raise Stop(V.INFRA_ERROR, f"the referee failed (loading the reference again): {e}"[:600], "load") \
                from None
        self.ref_held = True
        if self.race is not None:  # timed beside the candidates of the reference's referee now
            self.race = self.ref.race

    def _release_memory(self) -> None:
        if self.admitted:
            memory.ledger(self.device).release(id(self))
            self.admitted = False

    def _memory_note(self) -> str:
        free = self.free_at_start or 0
        return f"{free / 2**30:.1f} GB free, {self._need_bytes() / 2**30:.1f} GB needed"


def arena_slots(slots_max: int, set_bytes: int, total_bytes: int, gpu: bool) -> int:
    """Input sets (and output slots) in one candidate's arena: at most what the referee allows (`slots_max`) and at
    least two (a cache keyed by an address meets fresh values there). Of several side by side, each takes a share:
    on a GPU a sixteenth of the device, at most 8 GB (8 GB on an H200, 1 GB on 16 GB), so candidates side by side
    fit; a task whose sets are so big that the share holds fewer than TIMED_SETS gets up to that many within an
    eighth of the device (and within the referee's `slots_max`, 16 GB at most), so that a fast call on big inputs is
    timed in requests long enough that the clock's fixed costs' jitter is small beside their work (memory admission
    makes candidates side by side wait for it). `total_bytes`: the device's memory (0: unknown; unused on the CPU)."""
    if slots_max <= 1:
        return 1
    per = max(1, set_bytes)
    share = ARENA_SHARE[gpu]
    if gpu and total_bytes:
        share = max(256 << 20, min(8 << 30, total_bytes // 16))
        if share // per < TIMED_SETS:
            share = max(share, min(TIMED_SETS * per, total_bytes // 8))
    return max(2, min(slots_max, share // per))
