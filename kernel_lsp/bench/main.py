"""`kernel-lsp bench`: select tasks, sweep them (skipping finished work), write and print the tables.

Exit status: 0 when every selected unit finished (whatever the candidates' verdicts), 1 when some could not be
finished (evaluator trouble; a rerun retries them), 2 for a bad invocation, 3 when a needed part is missing.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluator.settings import EvalSettings

from ..config import Settings, state_dir_problem, state_path
from ..history import History
from ..logs import command_log
from ..oracle import Oracle
from ..services import Unavailable, WorkspaceServices
from ..tasks import Task
from .baselines import LiveBaselines, ReferenceBaselines, torch_version
from .ledger import Ledger, RunSpec
from .metrics import TaskResult, summarise_all
from .plot import FIGURE, plot_speedups
from .report import Report, TaskRow, to_markdown, write_all
from .run import EXIT_FAIL, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, _err, _Run, run_spec, sweep_once
from .selection import BenchError, parse_ranges, select_tasks
from .sweep import SweepStats

if TYPE_CHECKING:
    from ..generation import Backend


def make_evaluator(settings: EvalSettings, ray_address: str | None) -> Oracle:
    """The sweep's evaluator: on a Ray cluster (`--ray`), else the local one."""
    if ray_address:
        from .distributed import RayEvaluator

        return RayEvaluator(ray_address, settings)
    from evaluator import Evaluator

    return Evaluator(settings)


def build_report(tasks: list[Task], spec: RunSpec, stats: SweepStats, history: History,
                 baselines: LiveBaselines, refs: ReferenceBaselines, meta: dict[str, Any]) -> Report:
    # this run's results (finished, skipped, missing, unfinished) and other runs' finished ones on this device
    fingerprints = {t.name: t.fingerprint for t in tasks}
    others = [r for r in Ledger(history).results(fingerprints, spec.device)
              if (r.strategy, r.model) != (spec.label, spec.model)]
    mine = {r.task: r for r in stats.results}
    for t in tasks:  # units never reached (an interrupted sweep) are missing
        mine.setdefault(t.name, TaskResult(task=t.name, level=t.level, strategy=spec.label, model=spec.model))
    results = others + [mine[t.name] for t in tasks]
    by_level: dict[int | None, list[str]] = defaultdict(list)
    for t in tasks:
        by_level[t.level].append(t.name)
    summaries = summarise_all(by_level, results)
    order = {t.name: i for i, t in enumerate(tasks)}
    rows = []
    task_of = {t.name: t for t in tasks}
    for r in sorted(results, key=lambda r: (order.get(r.task, 0), r.strategy, r.model)):
        t = task_of[r.task]
        live = baselines.get(t) or {}
        rows.append(TaskRow(result=r, live_eager_ms=(live.get("eager") or {}).get("median_ms"),
                            live_compiled_ms=(live.get("compiled") or {}).get("median_ms"),
                            ref_eager_ms=refs.ms(t, "eager"), ref_compiled_ms=refs.ms(t, "compiled")))
    return Report(meta=meta, summaries=summaries, rows=rows)


def run_bench(settings: Settings, args: argparse.Namespace) -> int:
    source = getattr(args, "kernelbench", None) or settings.kernelbench_dir
    if not source:
        return _err("no tasks: pass --kernelbench DIR (a KernelBench data folder with level{N}.jsonl, or a folder "
                    "of task files) or set kernelbench_dir", EXIT_USAGE)
    if args.candidates and not Path(args.candidates).is_dir():
        return _err(f"--candidates {args.candidates}: no such folder", EXIT_USAGE)
    if args.ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            return _err("--ray needs Ray, which is not installed: pip install 'kernel-lsp[ray]'", EXIT_USAGE)
    try:
        tasks = _select(source, args)
    except BenchError as e:
        return _err(str(e), EXIT_USAGE)
    if not args.candidates:
        try:
            from ..generation import Engine  # noqa: F401
        except ImportError:
            return _err("bench without --candidates needs the generation engine, which this build lacks",
                        EXIT_UNAVAILABLE)
    try:
        _check_compare(args)
    except BenchError as e:
        return _err(str(e), EXIT_USAGE)
    if args.candidates and not any(Path(args.candidates).rglob("*.py")):
        return _err(f"--candidates {args.candidates}: no candidate files (*.py) in the folder", EXIT_USAGE)
    # The history lives in the state folder of --out, else of the current folder (where the tables go too).
    root = Path(args.out) if args.out else Path.cwd()
    problem = state_dir_problem(state_path(settings, root))
    if problem:  # the history goes there: before the evaluator or a model starts
        return _err(problem, EXIT_USAGE)
    services = WorkspaceServices(settings, root, make_evaluator=lambda es: make_evaluator(es, args.ray))
    out = Path(args.out) if args.out else services.state_dir() / "bench"
    command_log(settings, services.state_dir(), root)
    try:
        ev = services.evaluator()
    except (ImportError, Unavailable) as e:
        services.close()
        return _err(f"the evaluator is not available ({e})", EXIT_UNAVAILABLE)
    except BenchError as e:
        services.close()
        return _err(str(e), EXIT_USAGE)
    backend = None
    try:
        if not args.candidates:
            backend = open_generation(settings, getattr(args, "compare_list", None))
        return _sweep_and_report(_Run(settings, args, tasks, ev, services, out, str(source)), backend)
    except BenchError as e:
        return _err(str(e), EXIT_USAGE)
    finally:
        services.close()


def _select(source: str | Path, args: argparse.Namespace) -> list[Task]:
    """The selected tasks. A comparison defaults to the study's selection: levels 1-3 of a KernelBench data
    folder (every level of a folder of task files) and the first 10 tasks of each level."""
    ids = parse_ranges(args.tasks)
    if not getattr(args, "compare", None):
        return select_tasks(source, args.level, ids)
    from .compare import STUDY_LEVELS, first_per_level

    levels = args.level
    if levels is None and any(Path(source).expanduser().glob("level*.jsonl")):
        levels = [lv for lv in STUDY_LEVELS if (Path(source).expanduser() / f"level{lv}.jsonl").is_file()] or None
    tasks = select_tasks(source, levels, ids)
    return tasks if ids is not None else first_per_level(tasks)


def _check_compare(args: argparse.Namespace) -> None:
    """--compare's strategies into args.compare_list and the sample counts into args.sample_points; a list of
    sample counts only means something in a comparison."""
    points = sorted(set(args.samples)) if isinstance(args.samples, list) else [args.samples] if args.samples else []
    if any(k < 1 for k in points):
        raise BenchError(f"--samples {','.join(map(str, points))}: counts must be at least 1")
    if not getattr(args, "compare", None):
        if len(points) > 1:
            raise BenchError("--samples with several counts (pass@k against n) needs --compare")
        return
    if args.candidates:
        raise BenchError("--compare runs the model under each strategy: it cannot take --candidates")
    from .compare import parse_strategies

    args.compare_list = parse_strategies(args.compare)
    args.sample_points = points


def open_generation(settings: Settings, strategies: list[str] | None = None) -> Backend:
    """Check the strategies and open the model once, before the sweep (a bad model is a usage error, not 90
    failed tasks). Returns the backend, or raises BenchError."""
    from ..generation import GenerationError, make_plan, open_backend

    try:
        for strategy in strategies or [settings.strategy]:
            make_plan(strategy, settings_samples=settings.samples, settings_rounds=settings.rounds)
        return open_backend(settings)
    except GenerationError as e:
        raise BenchError(str(e)) from None


def open_device(run: _Run) -> tuple[str, LiveBaselines]:
    """The evaluator's device and its baselines cache; raises BenchUnavailable when the evaluator cannot start."""
    try:
        info = run.ev.device_info() or {}
    except Exception as e:  # no device, a worker that cannot start, a Ray cluster without room
        raise BenchUnavailable(f"the evaluator could not start: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    device = str(info.get("name") or info.get("device") or "unknown device")
    return device, LiveBaselines(run.history, device, str(info.get("torch") or torch_version()))


class BenchUnavailable(RuntimeError):
    """A needed part cannot start (exit status 3); the message is for users."""


def _sweep_and_report(run: _Run, backend: Backend | None = None) -> int:
    try:
        device, baselines = open_device(run)
    except BenchUnavailable as e:
        return _err(str(e), EXIT_UNAVAILABLE)
    if getattr(run.args, "compare", None):
        from .compare import compare

        return compare(run, device, baselines, backend)
    spec = run_spec(run.settings, run.args, device, baselines.torch)
    code, stats = sweep_once(run, run.settings, spec, baselines, backend)
    if stats.ran + stats.skipped + stats.errors == 0:  # every task without a candidate, or stopped before any
        what = f"none of the {len(run.tasks)} selected tasks has a candidate in {run.args.candidates}" \
            if stats.missing else "no task ran"
        _err(f"{what}: no tables written", EXIT_USAGE if code != 130 else code)
        return EXIT_USAGE if code == EXIT_OK else code
    if code == EXIT_OK and stats.errors:
        code = EXIT_FAIL
    _report(run, spec, baselines, stats, interrupted=code == 130)
    print(f"kernel-lsp: tables and figure in {run.out}", file=sys.stderr)
    return code


def _report(run: _Run, spec: RunSpec, baselines: LiveBaselines, stats: SweepStats, interrupted: bool,
            out: Path | None = None, echo: bool = True) -> Report:
    """The single sweep's tables and figure into `out` (default: run.out), printed unless `echo` is false."""
    out = out or run.out
    refs = ReferenceBaselines(run.source)
    meta = {"device": spec.device, "torch": baselines.torch, "run": spec.to_dict(), "tasks": len(run.tasks),
            "ran": stats.ran, "skipped": stats.skipped, "missing": stats.missing, "errors": stats.errors,
            "evaluations": stats.evaluations, "history": str(run.history.path), "source": str(run.source),
            "reference_baselines": refs.hardware, "ray": run.args.ray or "", "figure": FIGURE,
            "interrupted": interrupted, "time_compiled": run.settings.time_compiled}
    rep = build_report(run.tasks, spec, stats, run.history, baselines, refs, meta)
    out.mkdir(parents=True, exist_ok=True)
    try:
        plot_speedups([r.result for r in rep.rows], rep.summaries, out)
    except ImportError:
        meta["figure"] = ""
        if echo:
            print("kernel-lsp: no figure: matplotlib is not installed (pip install 'kernel-lsp[bench]')",
                  file=sys.stderr)
    write_all(rep, out)
    if echo:
        sys.stdout.write(to_markdown(rep))
        sys.stdout.flush()
    return rep
