"""One sweep of a bench run, shared by the single sweep (`main.py`) and the comparison of regimes (`compare.py`):
the run's parts, what identifies it, the sweep itself, and the command's exit statuses."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Settings
from ..history import History
from ..oracle import Oracle
from ..services import WorkspaceServices
from ..tasks import Task
from .baselines import LiveBaselines
from .ledger import RunSpec
from .progress import BenchProgress
from .selection import find_candidate
from .sweep import Aborted, Sweep, SweepStats, WorkItem

if TYPE_CHECKING:
    from ..generation import Backend, Engine

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


def _err(msg: str, code: int) -> int:
    print(f"kernel-lsp: error: {msg}" if code == EXIT_USAGE else f"kernel-lsp: {msg}", file=sys.stderr)
    return code


def run_spec(settings: Settings, args: argparse.Namespace, device: str, torch: str = "") -> RunSpec:
    """What identifies a run: results of another device, torch, tolerance or model are not reused."""
    oracle = {"atol": settings.atol, "rtol": settings.rtol, "trials": settings.trials, "seed": settings.seed,
              "torch": torch}
    if args.candidates:
        return RunSpec(label="candidates", strategy="candidates", model=Path(args.candidates).resolve().name,
                       device=device, config=oracle)
    model = (f"{settings.endpoint_model or 'default'}@{settings.endpoint}" if settings.endpoint
             else settings.model)
    cfg = {**oracle, "samples": settings.samples, "rounds": settings.rounds, "max_tokens": settings.max_tokens,
           "temperature": settings.temperature}
    return RunSpec(label=f"{settings.strategy} n={settings.samples} r={settings.rounds}",
                   strategy=settings.strategy, model=model, device=device, config=cfg)


def work_items(tasks: list[Task], candidates: str | None) -> list[WorkItem]:
    if not candidates:
        return [WorkItem(task=t, generate=True) for t in tasks]
    folder = Path(candidates)
    items = []
    for t in tasks:
        p = find_candidate(folder, t)
        src = p.read_text(encoding="utf-8", errors="replace") if p else None
        items.append(WorkItem(task=t, source=src, source_path=str(p or "")))
    return items


@dataclass
class _Run:
    settings: Settings
    args: argparse.Namespace
    tasks: list[Task]
    ev: Oracle
    services: WorkspaceServices
    out: Path
    source: str

    @property
    def history(self) -> History:
        return self.services.history()


GENERATE_AT_ONCE = 4  # tasks generated at once with an endpoint


def sweep_once(run: _Run, settings: Settings, spec: RunSpec, baselines: LiveBaselines,
               backend: Backend | None = None) -> tuple[int, SweepStats]:
    """One sweep of `run.tasks` under `spec` (finished units are skipped). Returns the exit status so far (OK,
    UNAVAILABLE when the sweep had to stop, 130 when interrupted) and the sweep's stats."""
    engines: list[Engine] = []

    def engine_factory() -> Engine:
        engines.append(run.services.engine(backend))
        return engines[-1]

    workers = getattr(run.ev, "parallelism", None) or settings.compile_workers or min(8, os.cpu_count() or 1)
    # an endpoint serves several requests at once; a model in this process writes one answer at a time, so two
    # tasks at once keep it busy while the other's candidates are judged
    generate = min(max(2, workers), GENERATE_AT_ONCE) if settings.endpoint else 2
    sweep = Sweep(run.history, run.ev, spec, baselines, workers=max(2, workers),
                  engine_factory=None if run.args.candidates else engine_factory, generate_workers=generate)
    code = EXIT_OK
    interrupted = threading.Event()
    with BenchProgress(len(run.tasks), f"bench {spec.label}") as progress, _first_ctrl_c_cancels(sweep, interrupted):
        progress.note(f"{len(run.tasks)} tasks on {spec.device} (torch {baselines.torch}); "
                      f"history: {run.history.path}")
        sweep.on_done = lambda it, r, how: progress.done(r, how)
        try:
            sweep.run(work_items(run.tasks, run.args.candidates))
        except Aborted as e:
            progress.note(f"kernel-lsp: sweep stopped: {e}")
            code = EXIT_UNAVAILABLE
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the main thread's handler
            interrupted.set()
        finally:
            for eng in engines:
                eng.close()
        if interrupted.is_set():
            progress.note("kernel-lsp: interrupted; finished tasks are kept, run the same command to resume")
            code = 130
    return code, sweep.stats


@contextlib.contextmanager
def _first_ctrl_c_cancels(sweep: Sweep, interrupted: threading.Event) -> Any:
    """While sweeping, the first Ctrl-C (SIGINT) only cancels: running units stop, the partial table is written.
    A KeyboardInterrupt raised at an arbitrary point could leave a lock held (the progress display's, say) and
    hang the exit. A second Ctrl-C raises KeyboardInterrupt as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        sweep.cancel.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
