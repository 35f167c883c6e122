"""`kernel-lsp optimize FILE`: the whole loop headless. Progress goes to stderr (rich), the result table (or JSON
with --json) to stdout; --out writes the result: the best correct ModelNew, when it is shown faster than eager.

Exit status: 0 a kernel was found that is correct and shown faster than eager (history.ranking.is_win), 1 none
was (none correct, only correct ones no faster than eager, or the job failed), 2 usage errors (a bad model path,
an unknown strategy), 3 the evaluator is not installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table
from rich.text import Text

from evaluator.cli import terminal_width
from kernel_lsp import verdicts
from kernel_lsp.config import Settings, find_pyproject, state_dir_problem, state_path
from kernel_lsp.history import CandidateRecord, History
from kernel_lsp.logs import command_log
from kernel_lsp.services import Unavailable, WorkspaceServices
from kernel_lsp.tasks import Task

from ..generation.backends import open_backend
from ..generation.engine import Engine, EngineEvent, RunResult
from ..generation.errors import GenerationError, OracleFailed, ReferenceFailed
from ..generation.strategies import make_plan

EXIT_OK, EXIT_NONE, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


def workspace_of(path: str | Path) -> Path:
    """The folder of the nearest pyproject.toml above the file, else the file's folder."""
    p = Path(path).resolve()
    pp = find_pyproject(p)
    return pp.parent if pp is not None else (p.parent if p.is_file() or p.suffix else p)


def _where(task: Task) -> str:
    """The task's file as the command line names it ('file x.py', as `eval` says 'reference x.py')."""
    return f"file {task.path}" if task.path else task.name


def _err(msg: str) -> None:
    print(f"kernel-lsp: {msg}", file=sys.stderr)


def run_optimize(task: Task, settings: Settings, args: argparse.Namespace) -> int:
    workspace = workspace_of(task.path or ".")
    as_json = bool(getattr(args, "json", False))
    out_file = getattr(args, "out", None)
    problem = state_dir_problem(state_path(settings, workspace))
    if problem:  # before the model or the evaluator starts: a folder the history cannot go in is a usage error
        _err(f"error: {problem}")
        return EXIT_USAGE
    try:
        make_plan(settings.strategy, settings_samples=settings.samples, settings_rounds=settings.rounds)
        backend = open_backend(settings)
    except GenerationError as e:
        _err(f"error: {e}")
        return EXIT_USAGE
    with WorkspaceServices(settings, workspace) as services:
        log_path = command_log(settings, services.state_dir(), workspace)
        try:
            engine = services.engine(backend)
        except Unavailable as e:
            _err(str(e))
            return EXIT_UNAVAILABLE
        try:
            engine.check_reference(task)  # before any progress is drawn: a module that does not run is a usage error
        except ReferenceFailed as e:
            engine.close()
            _err(f"error: {_where(task)}: {e}")
            return EXIT_USAGE
        except OracleFailed as e:  # the evaluator's failure, not the module's
            engine.close()
            _err(f"error: {e}")
            return EXIT_UNAVAILABLE
        try:
            result = _run_with_progress(engine, task, quiet=as_json)
        finally:
            engine.close()
        if result.reference_failed:
            _err(f"error: {_where(task)}: {result.message}")
            return EXIT_USAGE
        history = services.history()
        out_path = _write_best(result.offered, out_file)
        failed = no_kernel_attempts(history, result.job_id)
        if as_json:
            print(json.dumps(result_json(task, result, out_path, failed), indent=2))
        else:
            # the terminal's width (COLUMNS when stdout is not one; 80 at least), sentences wrapped between words
            out = Console(file=sys.stdout, width=terminal_width(sys.stdout))
            out.print(result_table(task, result, failed, said=result.message))
            out.print(result.message if result.state == "done" else f"{result.state}: {result.message}",
                      markup=False, highlight=False)
            if out_path:
                out.print(f"wrote the best correct ModelNew to {out_path}", markup=False, highlight=False)
            elif result.best is not None:  # correct, not faster: where it is, for whoever wants it anyway
                out.print(f"candidate {result.best.number}'s source: {result.best.source_path}", markup=False,
                          highlight=False, overflow="ignore", crop=False)
        if out_file and not out_path:
            why = "no candidate faster than eager" if result.best is not None else "no correct candidate"
            _err(f"{why}: {out_file} was not written")
        if log_path is not None:
            _err(f"log: {log_path}")
        return EXIT_OK if result.offered is not None else EXIT_NONE


_FIXED_WIDTH = 10 + 8 + 4 + 7 + 4  # the stage, the bar, the percentage, the time and the spaces between
LOG_TOKENS_S = 2.0  # not a terminal: a line with the tokens so far at most this often while the model writes


def _run_with_progress(engine: Engine, task: Task, *, quiet: bool) -> RunResult:
    """Run the engine in a worker thread so Ctrl-C cancels it cleanly; the bar is drawn on stderr: the stage, a
    short bar, the percentage and the time elapsed keep their width, and the status (everything in flight: the
    tokens the model wrote so far, the candidates being checked) takes the rest of the line, cut with "…".
    Not a terminal: one line per round, verdict and end, and the tokens so far every couple of seconds."""
    cancel = threading.Event()
    box: dict[str, Any] = {}
    console = Console(file=sys.stderr, log_path=False, width=terminal_width(sys.stderr))
    fixed = {"no_wrap": True, "overflow": "crop"}
    with Progress(TextColumn("[bold]{task.fields[stage]}", table_column=Column(width=10, **fixed)),
                  BarColumn(bar_width=8, table_column=Column(width=8, **fixed)),
                  TaskProgressColumn(table_column=Column(width=4, **fixed)),
                  TimeElapsedColumn(table_column=Column(min_width=7, **fixed)),
                  TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
                  console=console, transient=False, disable=not console.is_terminal and quiet) as progress:
        bar = progress.add_task(fit(task.name, max(20, console.width - _FIXED_WIDTH)), total=100, stage="starting")
        logged = [0.0]

        def on_event(ev: EngineEvent) -> None:
            status = ev.status or ev.message
            room = max(20, console.width - _FIXED_WIDTH)  # a long status is cut here: the columns before it stay
            status = fit(status, room)
            progress.update(bar, completed=ev.percentage, stage=ev.stage.split()[0], description=status)
            if console.is_terminal:
                if ev.verdict:
                    progress.console.log(fit(ev.message, 300), markup=False)
                return
            now = time.monotonic()
            if ev.stage in ("round", "done") or ev.verdict:
                progress.console.log(fit(ev.message, 300), markup=False)
            elif ev.tokens is not None and now - logged[0] >= LOG_TOKENS_S:
                logged[0] = now
                progress.console.log(fit(ev.message, 300), markup=False)

        def work() -> None:
            box["result"] = engine.run(task, cancel=cancel, on_event=on_event)

        t = threading.Thread(target=work, name="kernel-lsp-optimize", daemon=True)
        t.start()
        try:
            while t.is_alive():
                t.join(0.2)
        except KeyboardInterrupt:
            cancel.set()
            _err("cancelling ...")
            t.join()
    return box["result"]


def fit(text: str, limit: int) -> str:
    """`text` on one line in at most `limit` characters, cut between words (with '…') when it is longer."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:—-") + "…"


def _write_best(best: CandidateRecord | None, out: str | None) -> str:
    if not out or best is None:
        return ""
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(best.source, encoding="utf-8")
    return str(p)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _max_err(c: CandidateRecord) -> float | None:
    corr = c.verdict.correctness if c.verdict else None
    return corr.max_abs_err if corr else None


def no_kernel_attempts(history: History, job_id: int) -> list[dict[str, Any]]:
    """Generation steps whose completion held no usable ModelNew (they have no candidate). `reason` is what the
    model was told, `problem` the same in a few words for the user."""
    job = history.job(job_id)
    return [{"round": s.round, "sample": s.sample, "strategy": job.strategy if job else "",
             "reason": s.extra.get("extraction_error", ""),
             "problem": s.extra.get("extraction_problem") or s.extra.get("extraction_error", "")}
            for s in history.steps(job_id) if s.role == "generate" and s.candidate_id is None]


def _why(c: CandidateRecord) -> str:
    """Why a candidate is not correct, in one short line (empty for a correct one), cut between words."""
    if c.verdict is None or c.correct:
        return ""
    return fit(verdicts.failure(c.verdict), 90)


# No "max err" column: within the tolerances for a correct candidate, and in the reason (the mismatch's figures)
# for a wrong one; --json has every figure.
_COLUMNS = ("#", "round", "strategy", "status", "ms", "vs eager", "vs torch.compile", "why")
_EMPTY = ("", "-")


def _uncertain_notes(uncertain: list[tuple[int, Any]], said: str) -> list[str]:
    """One line per cause: 'uncertain: candidate 1 ± 14 %, candidate 3 ± 20 % (the machine was busy)'. A cause
    already in `said` (the closing sentence) is not repeated."""
    by_cause: dict[str, list[str]] = {}
    for number, t in uncertain:
        pm = f" ± {t.speedup_ci_pct:.0f} %" if t.speedup_ci_pct is not None else ""
        by_cause.setdefault(t.noise or "", []).append(f"candidate {number}{pm}")
    return [f"uncertain: {', '.join(who)}" + (f" ({cause})" if cause and cause not in said else "")
            for cause, who in by_cause.items()]


def result_table(task: Task, result: RunResult, no_kernel: list[dict[str, Any]] | None = None, *,
                 said: str = "") -> Table:
    """One row per attempt, readable at 80 columns: a column with nothing in it is left out, a strategy that is
    the same on every row goes into the title, and when some rows have figures the reasons (`why`) are listed
    under the table instead of squeezed into a column. Speeds read as everywhere else ('1.07× slower'); an
    uncertain one says so, with its ± figure, and the caption says why. Nothing in a reason is read as markup."""
    rows: list[tuple[int, int, list[str]]] = []
    uncertain: list[tuple[int, Any]] = []
    for c in result.candidates:
        mark = " *" if result.offered is not None and c.id == result.offered.id else ""
        t = c.verdict.timing if c.verdict else None
        rows.append((c.round, c.sample, [f"{c.number}{mark}", str(c.round), c.strategy, verdicts.label(c.status),
                                         _fmt(c.ms, ".3f"), _speed(t, "eager"), _speed(t, "compiled"), _why(c)]))
        if c.speedup_eager and t is not None and t.uncertain:
            uncertain.append((c.number, t))
    for a in no_kernel or []:
        rows.append((a["round"], a["sample"], ["-", str(a["round"]), a["strategy"], "no kernel", "-", "-", "-",
                                               a["problem"]]))
    rows.sort(key=lambda r: (r[0], r[1]))
    strategies = {r[2][2] for r in rows}
    rounds = {r[2][1] for r in rows}
    figures = any(r[2][i] not in _EMPTY for r in rows for i in (4, 5, 6))
    keep = [i for i, name in enumerate(_COLUMNS)
            if name == "#" or (name == "strategy" and len(strategies) > 1) or (name == "round" and len(rounds) > 1)
            or (name == "why" and not figures and any(r[2][i] for r in rows))
            or (name not in ("strategy", "round", "why") and any(r[2][i] not in _EMPTY for r in rows))]
    title = f"{task.name}: job {result.job_id} {result.state}"
    same = [f"round {next(iter(rounds))}"] if len(rounds) == 1 and rows else []
    same += [next(iter(strategies))] if len(strategies) == 1 and next(iter(strategies)) else []
    if same:
        title += f" ({', '.join(same)})"
    notes = [f"{r[2][0].rstrip(' *')} ({r[2][3]}): {r[2][7]}" for r in rows if figures and r[2][7]]
    notes += _uncertain_notes(uncertain, said)
    # a Text, not a str: a reason may hold brackets ("output[0, 1]") that rich would read as markup
    t = Table(title=title, caption=Text("\n".join(notes), overflow="fold") if notes else None, caption_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for i in keep:
        name = _COLUMNS[i]
        if name == "why":
            t.add_column(name, justify="left", overflow="fold", ratio=1, min_width=20)
        elif name in ("vs eager", "vs torch.compile"):
            t.add_column(name, justify="right", min_width=19 if uncertain else 12)
        else:
            t.add_column(name, justify="left" if name in ("strategy", "status") else "right", no_wrap=True)
    for _, _, row in rows:
        t.add_row(*(row[i] for i in keep))
    return t


def _speed(t: Any, against: str) -> str:
    text = verdicts.timing_speed(t, against, short=True)
    return "-" if text == "—" else text


def result_json(task: Task, result: RunResult, out_path: str = "",
                no_kernel: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "task": task.name, "job_id": result.job_id, "state": result.state, "message": result.message,
        "best": result.offered.number if result.offered else None, "out": out_path or None,
        "fastest_correct": result.best.number if result.best else None,
        "prompt_tokens_per_round": result.prompt_tokens_per_round,
        "candidates": [{
            "number": c.number, "round": c.round, "sample": c.sample, "strategy": c.strategy, "status": c.status,
            "message": c.verdict.message if c.verdict else "", "max_abs_err": _max_err(c), "ms": c.ms,
            "speedup_eager": c.speedup_eager, "speedup_compiled": c.speedup_compiled,
            "source_path": c.source_path} for c in result.candidates],
        "no_kernel": no_kernel or [],
    }
