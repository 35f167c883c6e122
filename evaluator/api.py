"""The public API: `Evaluator` turns (reference, candidate) sources into `Verdict`s. This module never imports
torch, and no candidate code ever runs in the caller's process.

Processes (pools: processes/pool.py; one worker: processes/handle.py; started by processes/startup.py), per evaluator:

- **referee** (trusted; one per reference, reused across its candidates: processes/referees.py): the reference,
  every input, the comparison, the reference's timings. It never imports candidate code.
- **recorder** (sandboxed, single use, no GPU): imports the candidate so its `load_inline` calls are known.
- **builder** (sandboxed, single use, no GPU, one per core): compiles one extension; only the evaluator moves
  the result into the build cache (stages/compile.py).
- **runner** (sandboxed, single use): the candidate's forward on the device, fed through shared memory
  (stages/device/).

parse and screen run in this process (static, nothing executed). Compiles run in parallel; the device stage runs one
candidate at a time per evaluator.
"""

from __future__ import annotations

import atexit
import os
import threading
import time as _time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import replace
from typing import Any

from . import assembly
from . import messages as M
from . import verdict as V
from .assembly import OnStage, Run, notify
from .batch import evaluate_many
from .errors import EvaluatorClosed, EvaluatorError, ReferenceFailed
from .processes import bytecode, devmon, lease, memory, sandbox, startup
from .processes.gate import DeviceGate
from .processes.handle import Worker, WorkerError, WorkerFailed
from .processes.pool import Pool
from .processes.prober import Prober
from .processes.referees import RefereeHandle, Referees
from .processes.startup import RUNNERS_AT_ONCE
from .settings import EvalSettings
from .stages.compile import BuildCache, CompileRecord, CompileStage, Recordings
from .stages.device.session import Outcome
from .stages.device.stage import DeviceStage
from .stages.parse import ParseFailure, check_reference
from .verdict import Profile, Verdict, profile_from_dict

BYTECODE_WAIT_S = 30.0  # the longest the runner pools wait for the bytecode cache being made (once per install)

_live: weakref.WeakSet[Evaluator] = weakref.WeakSet()


class _StartCancelled(Exception):
    """The caller's cancel event was set while it waited for the evaluator to start."""


@atexit.register
def _close_all() -> None:  # pragma: no cover - interpreter exit
    for ev in list(_live):
        ev.close()


class Evaluator:
    """Worker pools that turn (reference, candidate) sources into verdicts. Thread-safe."""

    def __init__(self, settings: EvalSettings | None = None) -> None:
        self.settings = settings or EvalSettings()
        self._lock = threading.Lock()
        # verification side by side, timing alone (gate.py): as many candidates verify at once as there are
        # runners at once, and runners at once are bounded by the device's memory and the cores
        self._gate = DeviceGate(shared=RUNNERS_AT_ONCE)
        self._closed = False
        self._device: str | None = None
        self._unwatch: Callable[[], None] | None = None  # stops the memory watch (GPU)
        self._device_label = ""
        self._public_info: dict[str, Any] = {}
        self._monitor: devmon.DeviceMonitor = devmon.DeviceMonitor("not a GPU")
        self._limits: dict[str, Any] = {}
        self._runners: Pool | None = None
        self._recorders: Pool | None = None
        self._recordings = Recordings()
        self._prebuilds: dict[str, threading.Event] = {}  # sources being built by `prebuild`: set when done
        self._prebuilds_lock = threading.Lock()
        self._builders: Pool | None = None
        self._referees = Referees(self.settings, self._lock)  # the kept ones, by reference
        self._start_error: str | None = None
        self._torch: tuple[str | None, str | None] = (None, None)
        self._starter: threading.Thread | None = None
        self._started = threading.Event()
        self._extra_workers: set[Worker] = set()
        self._prober: Prober | None = None  # the device-idle probe of timed requests (GPU): a process of its own
        self.pch_status: dict[str, Any] = {}  # the background build of torch's precompiled header
        self.cache = BuildCache(self.settings.cache_dir)
        _live.add(self)

    # -- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self) -> Evaluator:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill every worker (and their compilers); idempotent."""
        with self._lock:
            self._closed = True
            pools = [p for p in (self._referees.pool, self._runners, self._recorders, self._builders)
                     if p is not None]
            handles = self._referees.close()
            extra = list(self._extra_workers)
            unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()
        for h in handles:
            h.worker.kill()
        for w in extra:
            w.kill()
        for p in pools:
            p.close()

    def worker_pids(self) -> list[int]:
        pools = (self._referees.pool, self._runners, self._recorders, self._builders)
        pids = [pid for p in pools if p is not None for pid in p.pids()]
        pids += self._referees.pids()
        pids += [w.pid for w in list(self._extra_workers) if not w.dead]
        return pids

    def start_background(self) -> None:
        """Begin starting (device probe, spare workers, torch's precompiled header) and return at once: a caller
        that opens an evaluator long before its first candidate (the language server at start-up) pays nothing
        later. Idempotent; a start that fails is reported to the first evaluation."""
        with self._lock:
            if self._closed or self._runners is not None or self._start_error or self._starter is not None:
                return
            self._started.clear()
            self._starter = threading.Thread(target=self._start_now, name="klsp-evaluator-start", daemon=True)
            self._starter.start()

    def _start(self, cancel: threading.Event | None = None) -> None:
        """Start once (a referee probes the device); a caller whose `cancel` is set stops waiting within 0.1 s."""
        with self._lock:
            if self._closed:
                raise EvaluatorClosed()
            if self._runners is not None:
                return
            if self._start_error:
                raise EvaluatorError(self._start_error)
            if self._starter is None:
                self._started.clear()
                self._starter = threading.Thread(target=self._start_now, name="klsp-evaluator-start", daemon=True)
                self._starter.start()
        while not self._started.wait(0.1):
            if cancel is not None and cancel.is_set():
                raise _StartCancelled()
        with self._lock:
            if self._start_error:
                raise EvaluatorError(self._start_error)
            if self._runners is None:
                raise EvaluatorClosed()

    def _publish_referees(self, pool: Pool) -> None:
        with self._lock:
            self._referees.pool = pool

    def _start_now(self) -> None:
        s = self.settings
        env = startup.requested_env(s)
        primer = bytecode.Primer(s.cache_dir, env)  # where the installation has no bytecode: made while the probe runs
        if primer.prefix:
            env["PYTHONPYCACHEPREFIX"] = primer.prefix
        pools: list[Pool] = []
        try:
            try:
                referees, ready, info = startup.probe(s, env, self._publish_referees)
            except (WorkerError, EvaluatorError) as e:
                with self._lock:
                    self._start_error = ("the evaluator was closed while starting" if self._closed else
                                         f"could not start a device worker: {getattr(e, 'message', e)}")
                return
            pools = [referees]
            device = ready.device or "cpu"
            gpu = device.startswith("cuda")
            prefix = primer.wait(BYTECODE_WAIT_S)  # a runner starts seconds sooner with it: worth a short wait
            if prefix:
                env["PYTHONPYCACHEPREFIX"] = prefix
            runners, recorders, builders, cpu_env = startup.worker_pools(s, env, ready)
            pools += [runners, recorders, builders]
            with self._lock:
                if self._closed:
                    for p in pools:
                        p.close()
                    return
                self._device = device
                self._referees.device = device
                # whether verdicts wait for torch.compile, decided once: where nobody compiles ahead, each stage does
                self._referees.compiled_wait = s.compiled_wait or not self._ahead()
                self._device_label = (f"{device} ({ready.device_name})" if gpu else "cpu")
                self._torch = (ready.torch, ready.torch_cuda)
                self._public_info, self._limits = info.public, info.limits
                if gpu:  # whose work is on the device, and one timing at a time on it across this host's processes
                    uuid = str(info.public.get("uuid") or "")
                    self._monitor = devmon.open_monitor(uuid, None if uuid else startup.device_index(device))
                    self._referees.monitor = self._monitor
                    self._referees.our_pids = self._worker_pids
                    self._gate.lease = lease.for_device(f"cuda:{uuid or device}")
                    # another process waiting for memory on this device gets what our idle referees hold
                    ledger = memory.ledger(device)
                    ledger.board = self._gate.lease
                    self._unwatch = ledger.watch(self._referees.shed)
                    self._prober = Prober(referees, self._adopt)
                self._runners, self._recorders, self._builders = runners, recorders, builders
                self._gate.add_pool(runners)
                if not gpu:  # on the CPU, compiles and workers starting up take the cores a timed call runs on
                    self._gate.add_pool(recorders)
                    self._gate.add_pool(builders)
                self._env = env
            for p in (runners, recorders, builders, referees):
                p.refill_async()
            if s.warm_pch:
                threading.Thread(target=self._build_pch, args=(cpu_env,), name="klsp-pch", daemon=True).start()
        except Exception as e:  # noqa: BLE001  (a bug here must not leave callers waiting forever)
            for p in pools:
                p.close()
            with self._lock:
                self._start_error = f"could not start the evaluator: {e}"
        finally:
            with self._lock:
                self._starter = None
            self._started.set()

    def _adopt(self, w: Worker) -> None:
        """A worker outside the pools (the prober): killed when the evaluator closes, and one of its own processes."""
        with self._lock:
            if self._closed:
                w.kill()
                raise WorkerError("cancelled", "the evaluator is closed")
            self._extra_workers.add(w)

    def _build_pch(self, env: dict[str, str]) -> None:
        """torch's precompiled header, built by a trusted worker in the background (builders only read it)."""
        w = Worker(startup.spec(self.settings, "pch", env))
        with self._lock:
            if self._closed:
                w.kill()
                return
            self._extra_workers.add(w)
        t0 = _time.perf_counter()
        try:
            res, _ = w.ask(M.PchOps.pch, M.Empty(), timeout=900.0)
            self.pch_status = {"ok": res.ok, "built": res.built, "seconds": res.seconds, "note": res.note}
        except WorkerError as e:
            self.pch_status = {"ok": False, "note": e.message}
        except WorkerFailed as e:
            self.pch_status = {"ok": False, "note": e.failed.error}
        finally:
            self.pch_status["wall_s"] = round(_time.perf_counter() - t0, 2)
            w.kill()
            with self._lock:
                self._extra_workers.discard(w)

    @property
    def device(self) -> str:
        self._start()
        return self._device or ""

    def device_turn(self, cancel: threading.Event | None = None) -> Any:
        """A turn on this evaluator's GPU for work that must never overlap its timing (a local model's next token in
        the same process): waits while a kernel is timed there by any evaluator of this host. A no-op on the CPU or
        before the evaluator has started."""
        lease_ = self._gate.lease
        return lease_.turn(cancel) if lease_ is not None else nullcontext()

    def device_info(self) -> dict[str, Any]:
        """name, capability, memory, measured bandwidth/peak on a GPU; {"name": "cpu"} otherwise."""
        self._start()
        return dict(self._public_info)

    def sandbox_report(self) -> tuple[list[str], list[str]]:
        """What the sandbox enforces on this machine (for a verdict's checked / not_checked)."""
        return sandbox.describe(sandbox.capabilities(), policy_gpu=bool(self._device and
                                                                          self._device.startswith("cuda")))

    # -- evaluation ----------------------------------------------------------------------------------------
    def _worker_pids(self) -> set[int]:
        """Every process of this evaluator's workers (referees and the candidates' whole sandboxes): its gate orders
        their work on the device, so none of it is another process's contention."""
        pids = set(self.worker_pids())
        for w in self._runners.live_workers() if self._runners is not None else []:
            with suppress(OSError):
                pids.update(w.processes())
        return pids

    def evaluate(self, reference_src: str, candidate_src: str, *, cancel: threading.Event | None = None,
                 on_stage: OnStage | None = None, profile: bool = False, time: bool = True) -> Verdict:
        with self._referees.on_its_way(reference_src):
            return self._evaluate(reference_src, candidate_src, cancel, on_stage, profile, time)

    def _evaluate(self, reference_src: str, candidate_src: str, cancel: threading.Event | None,
                  on_stage: OnStage | None, profile: bool, time: bool) -> Verdict:
        run = Run(candidate_src)
        v = run.v
        ended = assembly.static_stages(run, reference_src, candidate_src, self.settings.screen_rejects, on_stage)
        if ended is not None:
            return ended
        # start
        notify(on_stage, "compile", "starting the evaluator")
        try:
            self._start(cancel)
        except _StartCancelled:
            return run.done(V.CANCELLED, "cancelled")
        except EvaluatorError as e:
            return run.done(V.CANCELLED if self._closed else V.INFRA_ERROR, str(e))
        yes, no = self.sandbox_report()
        v.checked += yes
        v.not_checked += no
        if time:
            self._compile_reference_ahead(reference_src, load=True)
        # compile
        comp = self._compile(run, candidate_src, cancel, on_stage)
        if comp is None:
            return v
        if self._device == "cpu" and comp.cuda:
            return assembly.no_device(run, comp)
        if comp.status == "exec_error":
            v.warnings.append(f"the module failed at import in the compile stage ({comp.error[:200]}); "
                              "retried on the device")
        return self._device_stage(run, reference_src, candidate_src, comp, cancel, on_stage, profile, time)

    def _compile(self, run: Run, candidate_src: str, cancel: threading.Event | None,
                 on_stage: OnStage | None, join_early: bool = True) -> CompileRecord | None:
        s = self.settings
        assert self._recorders is not None and self._builders is not None
        t0 = _time.perf_counter()
        salt = {"v": ""}

        def stage_cb(st: str, msg: str) -> None:
            notify(on_stage, st, msg)

        stage = CompileStage(self._recorders, self._builders, self.cache, "", self._device == "cpu",
                             s.compile_timeout, self._recordings)
        with self._prebuilds_lock:
            early = self._prebuilds.get(candidate_src) if join_early else None
        if early is not None:  # the same source is being built ahead of this evaluation: its recording follows,
            notify(on_stage, "compile", "waiting for its build started early")  # no recorder of our own needed
            end = _time.monotonic() + s.compile_timeout
            while not early.wait(0.1) and _time.monotonic() < end:
                if cancel is not None and cancel.is_set():
                    break
        try:
            w_salt = self._salt(cancel)
            stage.salt = salt["v"] = w_salt
            res = stage.run(candidate_src, cancel, stage_cb)
        except WorkerError as e:
            assembly.compile_failed(run, e, _time.perf_counter() - t0, s.compile_timeout)
            return None
        secs = _time.perf_counter() - t0
        res = replace(res, wall_s=secs, salt=salt["v"])
        return assembly.compiled(run, res, secs, s.compile_timeout, self._device == "cpu")

    def _salt(self, cancel: threading.Event | None) -> str:
        """What changes a binary besides its sources (startup.salt), asked once."""
        if getattr(self, "_salt_value", ""):
            return self._salt_value
        assert self._recorders is not None
        self._salt_value = startup.salt(self._recorders, cancel)
        return self._salt_value

    def _device_stage(self, run: Run, reference_src: str, candidate_src: str, comp: CompileRecord,
                      cancel: threading.Event | None, on_stage: OnStage | None, profile: bool,
                      time: bool) -> Verdict:
        """The candidate on the device. One that ran out of device memory while other processes held what its task
        needed (the evaluator's own reading, its processes killed first: `DeviceSession._memory_held_by_others`)
        is evaluated again from the start, once: other work's memory makes the oracle wait (its admission waits
        for the task's memory), never a refusal. A second such run stays `infra_error`, never the candidate's."""
        first = ""
        while True:
            got = self._device_stage_once(run, reference_src, candidate_src, comp, cancel, on_stage, profile, time)
            if isinstance(got, Verdict):
                return got
            out, queued = got
            if out.others_memory and not first and not (cancel is not None and cancel.is_set()):
                first = out.message
                notify(on_stage, "compile", "evaluating again (other processes' memory ran it out of memory)")
                continue
            if first:
                out.warnings.insert(0, f"evaluated a second time: the first run ended with {first[:300]}")
            return assembly.device_verdict(run, comp, out, queued, self._device_label)

    def _device_stage_once(self, run: Run, reference_src: str, candidate_src: str, comp: CompileRecord,
                           cancel: threading.Event | None, on_stage: OnStage | None, profile: bool,
                           time: bool) -> Verdict | tuple[Outcome, float]:
        s = self.settings
        assert self._runners is not None
        t_wait = _time.perf_counter()
        queued = 0.0
        turn: memory.Turn | None = None
        try:
            turn = self._turn(cancel)  # the referee and the candidate's memory admission, in turns (GPU)
            ref = self._referees.get(reference_src, cancel, use=True)
        except (ReferenceFailed, WorkerError, EvaluatorError) as e:
            if turn is not None:
                turn.end()
            return assembly.no_referee(run, comp, e)
        stage = DeviceStage(s, ref, self._runners, self._device or "cpu", comp.salt, cancel,
                            lambda st, msg: notify(on_stage, st, msg), profile, time)
        stage.candidate_src = candidate_src
        stage.compiled_wait = self._referees.compiled_wait
        stage.cache_dir = s.cache_dir
        stage.device_label = self._device_label
        stage.limits = dict(self._limits)
        stage.monitor = self._monitor
        stage.our_pids = self._worker_pids
        stage.prober = self._prober.idle if self._prober is not None else None
        stage.shed_referees = lambda: self._referees.shed(ref.key)
        stage.own_kernels = {k for c in comp.calls for k in c.kernels}
        stage.libraries = [c.path for c in comp.calls if c.path]
        stage.extension_names = {c.name for c in comp.calls if c.ok}
        stage.turn = turn
        stage.let_referee_go = self._referees.let_go
        stage.take_referee = lambda: self._referees.get(reference_src, cancel, use=True)
        queued = _time.perf_counter() - t_wait
        try:
            out = stage.run(self._gate, ref.race)
        finally:
            if turn is not None:
                turn.end()
            if stage.ref_held:
                self._referees.done_with(stage.ref)
        return out, queued

    def _turn(self, cancel: threading.Event | None) -> memory.Turn | None:
        """On a GPU, this evaluation's turn to take its referee and its memory admission (processes/memory.py):
        evaluations side by side never each hold a referee while they all wait for memory."""
        if not (self._device or "").startswith("cuda"):
            return None
        try:
            return memory.ledger(self._device).take_turn(cancel)
        except memory.AdmitCancelled:
            raise WorkerError("cancelled", "cancelled") from None

    def _referee(self, reference_src: str, cancel: threading.Event | None, use: bool = False) -> RefereeHandle:
        """A referee for this reference outside an evaluation (checking or profiling the reference), in turns with
        the evaluations' (GPU). `use`: the caller holds it (never evicted for another reference) until it calls
        `done_with`."""
        turn = self._turn(cancel)
        try:
            return self._referees.get(reference_src, cancel, use=use)
        finally:
            if turn is not None:
                turn.end()

    def evaluate_many(self, reference_src: str, candidate_srcs: list[str], *,
                      cancel: threading.Event | None = None, on_stage: OnStage | None = None,
                      profile: bool = False, time: bool = True) -> list[Verdict]:
        """Compile all candidates in parallel; verify/time them on the device one at a time (their runners
        started at once: `candidates_coming`)."""
        with self.candidates_coming(reference_src, len(candidate_srcs)):
            return evaluate_many(self.evaluate, reference_src, candidate_srcs, cancel=cancel, on_stage=on_stage,
                                 profile=profile, time=time)

    def prebuild(self, reference_src: str, candidate_src: str, *, cancel: threading.Event | None = None) -> str:
        """Build a candidate's extensions into the build cache ahead of its evaluation (its author is still
        writing the rest of the answer): the static stages and the compile stage only, sandboxed as always;
        nothing runs on the device and no verdict is made. Its evaluation then finds the build in the cache.
        Returns what the compile stage found ("ok", "compile_error", ...), or why it stopped before it."""
        with self._referees.on_its_way(reference_src):
            return self._prebuild(reference_src, candidate_src, cancel)

    def _prebuild(self, reference_src: str, candidate_src: str, cancel: threading.Event | None) -> str:
        run = Run(candidate_src)
        ended = assembly.static_stages(run, reference_src, candidate_src, self.settings.screen_rejects, None)
        if ended is not None:
            return ended.status
        try:
            self._start(cancel)
        except (_StartCancelled, EvaluatorError):
            return V.CANCELLED
        self._compile_reference_ahead(reference_src, load=True)
        with self._prebuilds_lock:
            if candidate_src in self._prebuilds:
                return "under way"
            done = self._prebuilds[candidate_src] = threading.Event()
        try:
            comp = self._compile(run, candidate_src, cancel, None, join_early=False)
        finally:
            with self._prebuilds_lock:
                del self._prebuilds[candidate_src]
            done.set()
        return run.v.status if comp is None else comp.status

    def check_reference(self, reference_src: str, *, cancel: threading.Event | None = None) -> None:
        """Load the reference in its referee, which runs it once on its own inputs, before any candidate is
        compiled: a reference that does not parse, import or run raises ReferenceFailed. The referee is kept for
        the candidates that follow (checking first costs nothing more)."""
        try:
            check_reference(reference_src)
        except ParseFailure as e:
            raise ReferenceFailed(e.message) from None
        try:
            self._start(cancel)
        except _StartCancelled:
            raise EvaluatorError("cancelled") from None
        try:
            self._referee(reference_src, cancel)
        except WorkerError as e:
            raise EvaluatorError("cancelled" if e.kind == "cancelled" else f"the referee failed: {e.message}") \
                from None

    def prepare_reference(self, reference_src: str, *, cancel: threading.Event | None = None) -> None:
        """Make a reference ready for its first candidate before anyone asks for one (the editor does it once a
        document is quiet): its referee loaded, and its torch.compile begun where the compiled reference is timed.
        Raises like `check_reference`."""
        self.check_reference(reference_src, cancel=cancel)
        self._compile_reference_ahead(reference_src)

    def profile(self, reference_src: str, *, cancel: threading.Event | None = None,
                on_stage: OnStage | None = None) -> Profile:
        """torch.profiler top operators and the roofline of the reference (for profile-guided prompts). Raises
        ReferenceFailed when the reference does not parse, import or run; EvaluatorError when the evaluator could not
        do it (nothing the reference did)."""
        try:
            check_reference(reference_src)
        except ParseFailure as e:
            raise ReferenceFailed(e.message) from None
        try:
            self._start(cancel)
        except _StartCancelled:
            raise EvaluatorError("cancelled") from None
        notify(on_stage, "profile", "profiling the reference")
        try:  # held until its profile is taken: while it waits for the device, another reference's load (two
            # tasks profiled at once) must not evict it
            ref = self._referee(reference_src, cancel, use=True)
        except ReferenceFailed:
            raise
        except WorkerError as e:
            raise EvaluatorError(f"profiling the reference: {e.message}") from None
        try:
            res = self._referees.profile(ref, reference_src, self._gate, cancel)
        finally:
            self._referees.done_with(ref)
        if res.status != "ok":
            raise EvaluatorError("profiling failed")
        self._compile_reference_ahead(reference_src)  # while the model writes its candidates
        return profile_from_dict(res.profile)

    def _compile_reference_ahead(self, reference_src: str, load: bool = False) -> None:
        """torch.compile of a kept reference, begun in the background before its first candidate is timed against
        it (`Referees.compile_ahead`); nothing when the compiled reference is not timed. `load`: a reference no
        referee holds yet is loaded first, in the background too (a caller that kept its profile from an earlier
        run has not loaded it: on an H200 its compile then took 12-18 s of the first candidate's time stage)."""
        if not self._ahead() or self._closed:
            return
        limits = dict(self._limits) or None  # the device's, once the evaluator has started (else: its candidates ask)
        if self._referees.compile_ahead(reference_src, self._gate, limits) or not load or \
                self._referees.holds(reference_src):
            return

        def load_then_compile() -> None:
            try:
                self._referee(reference_src, self._referees.stop)
            except Exception:  # noqa: BLE001  (its evaluation loads it again, and says what failed)
                return
            self._referees.compile_ahead(reference_src, self._gate, limits)

        threading.Thread(target=load_then_compile, name="klsp-reference-load", daemon=True).start()

    @contextmanager
    def candidates_coming(self, reference_src: str, n: int = 0) -> Iterator[None]:
        """Candidates of this reference are coming (a job's first round, from its start; `n` of them): their
        runners start now (`Pool.expect`), so the last of n does not wait for a start; with `compiled_wait` off, the
        reference's torch.compile ahead waits until they have their verdicts, which then come without its figure
        instead of after it (one under way goes on until the first of them arrives)."""
        runners = self._runners
        with self._referees.on_its_way(reference_src, arrived=False), \
                (runners.expect(n) if runners is not None and n > 1 else nullcontext()):
            yield

    def superseded(self, reference_src: str, by: Sequence[str] = ()) -> None:
        """No candidate of this reference is expected any more (the editor: its document now holds the references
        `by`): its torch.compile ahead under way stops unless a candidate of it is on its way or one of `by` runs the
        same code, so it does not hold the device through the newer version's preparation and first verdicts. A
        candidate of it that comes later asks for the compile again."""
        self._referees.superseded(reference_src, by)

    def _ahead(self) -> bool:
        """Whether references are compiled ahead of their candidates' timing (`compile_reference_ahead`)."""
        ahead = self.settings.compile_reference_ahead
        if ahead is None:
            ahead = (self._device or "").startswith("cuda") or (os.cpu_count() or 1) >= 8
        return bool(ahead and self.settings.time_compiled)


__all__ = ["Evaluator", "EvaluatorError", "ReferenceFailed"]
