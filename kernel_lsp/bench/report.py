"""The sweep's tables: Markdown (printed and written), CSV and JSON, all from one `Report`."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import verdicts
from .metrics import P_VALUES, Summary, TaskResult

MARKDOWN, SUMMARY_CSV, TASKS_CSV, JSON_FILE = "bench.md", "summary.csv", "tasks.csv", "bench.json"


@dataclass(frozen=True)
class TaskRow:
    result: TaskResult
    live_eager_ms: float | None = None  # cached live baseline on this device
    live_compiled_ms: float | None = None
    ref_eager_ms: float | None = None  # the shared H100 numbers: for comparison only
    ref_compiled_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.result.to_dict(), "live_eager_ms": self.live_eager_ms,
                "live_compiled_ms": self.live_compiled_ms, "h100_eager_ms": self.ref_eager_ms,
                "h100_compiled_ms": self.ref_compiled_ms}


@dataclass
class Report:
    meta: dict[str, Any]
    summaries: list[Summary]
    rows: list[TaskRow] = field(default_factory=list)


def _f(v: float | None, fmt: str = ".2f", suffix: str = "") -> str:
    return "—" if v is None else f"{v:{fmt}}{suffix}"


def _level(level: int | None) -> str:
    return "—" if level is None else str(level)


def _md_table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def to_markdown(rep: Report) -> str:
    m = rep.meta
    lines = [f"# kernel-lsp bench — {m.get('device', '?')}", ""]
    measured = "eager and torch.compile" if m.get("time_compiled", True) else "eager only: torch.compile timing was off"
    lines.append(f"torch {m.get('torch', '?')}; baselines measured live on this device ({measured}); "
                 f"{m.get('tasks', 0)} tasks selected; this sweep: {m.get('ran', 0)} run, "
                 f"{m.get('skipped', 0)} already done, {m.get('missing', 0)} without a candidate, "
                 f"{m.get('errors', 0)} unfinished."
                 + (" INTERRUPTED: tasks not reached count as missing; run the same command to resume."
                    if m.get("interrupted") else ""))
    lines += ["", ("fast_p: share of all selected tasks (missing and failed count as failures) that are correct with "
                   "a kernel of their own and more than p× faster than eager PyTorch (a correct one whose own code "
                   "could not be checked counts too: it cannot be told apart); fast_1 library-only: correct and more "
                   "than 1× faster with PyTorch's operators doing the work, counted apart; correct % counts both; "
                   "geomean over the own-code correct tasks."), ""]
    header = ["level", "strategy", "model", "tasks", "correct %"] + [f"fast_{p:g}" for p in P_VALUES] + \
             ["fast_1 library-only", "geomean vs eager", "geomean vs torch.compile"]
    lines += _md_table(header, ([
        _level(s.level), s.strategy, s.model or "—", str(s.tasks), f"{s.correct_pct:.1f}",
        *[f"{s.fast_p_eager[p]:.2f}" for p in P_VALUES], f"{s.fast_p_library_only.get(1.0, 0.0):.2f}",
        verdicts.speed(s.geomean_eager, short=True), verdicts.speed(s.geomean_compiled, short=True),
    ] for s in rep.summaries))
    ref = m.get("reference_baselines") or ""
    lines += ["", "## Tasks", "", "eager / compile ms: the reference measured live on this device."
              + (f" {ref}: the shared KernelBench timings, for comparison only (another GPU and torch; never used "
                 "for speedups)." if ref else ""), ""]
    header = ["task", "strategy", "status", "vs eager", "vs torch.compile", "ms", "eager ms", "compile ms"]
    header += [f"{ref} eager ms", f"{ref} compile ms"] if ref else []
    lines += _md_table(header, ([
        r.result.task, r.result.strategy, r.result.status + (" (library only)" if r.result.correct
                                                             and r.result.library_only else ""),
        r.result.speed(short=True),
        r.result.speed("compiled", short=True), _f(r.result.candidate_ms, ".3g"), _f(r.live_eager_ms, ".3g"),
        _f(r.live_compiled_ms, ".3g"),
        *([_f(r.ref_eager_ms, ".3g"), _f(r.ref_compiled_ms, ".3g")] if ref else []),
    ] for r in rep.rows))
    unsure = [r.result for r in rep.rows if r.result.uncertain and r.result.speedup_eager]
    if unsure:
        lines += ["", "Uncertain speedups (their 95 % interval is wider than the target; not quotable): " + "; ".join(
            f"{u.task} [{u.strategy}] {u.speed()}" for u in unsure) + "."]
    if m.get("figure"):
        lines += ["", f"![speedup distribution]({m['figure']})"]
    return "\n".join(lines) + "\n"


def to_json(rep: Report) -> dict[str, Any]:
    return {"meta": rep.meta, "p_values": list(P_VALUES), "summaries": [s.to_dict() for s in rep.summaries],
            "tasks": [r.to_dict() for r in rep.rows]}


def write_all(rep: Report, out: Path) -> dict[str, Path]:
    """Write bench.md, summary.csv, tasks.csv and bench.json into `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / MARKDOWN, "summary_csv": out / SUMMARY_CSV, "tasks_csv": out / TASKS_CSV,
             "json": out / JSON_FILE}
    paths["markdown"].write_text(to_markdown(rep), encoding="utf-8")
    paths["json"].write_text(json.dumps(to_json(rep), indent=2), encoding="utf-8")
    with paths["summary_csv"].open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["level", "strategy", "model", "tasks", "attempted", "correct", "correct_pct",
                    *[f"fast_{p:g}" for p in P_VALUES], *[f"fast_{p:g}_compile" for p in P_VALUES],
                    "geomean_speedup_eager", "geomean_speedup_compiled", "library_only", "fast_1_library_only"])
        for s in rep.summaries:
            w.writerow([s.level if s.level is not None else "", s.strategy, s.model, s.tasks, s.attempted,
                        s.correct, f"{s.correct_pct:.4f}", *[f"{s.fast_p_eager[p]:.6f}" for p in P_VALUES],
                        *[f"{s.fast_p_compiled[p]:.6f}" for p in P_VALUES],
                        "" if s.geomean_eager is None else f"{s.geomean_eager:.6f}",
                        "" if s.geomean_compiled is None else f"{s.geomean_compiled:.6f}", s.library_only,
                        f"{s.fast_p_library_only.get(1.0, 0.0):.6f}"])
    with paths["tasks_csv"].open("w", newline="", encoding="utf-8") as f:
        cols = ["task", "level", "strategy", "model", "status", "speedup_eager", "speedup_compiled",
                "candidate_ms", "eager_ms", "compiled_ms", "live_eager_ms", "live_compiled_ms", "h100_eager_ms",
                "h100_compiled_ms", "speedup_ci_pct", "uncertain", "noise", "kernel", "message"]
        dw = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        dw.writeheader()
        for r in rep.rows:
            dw.writerow({k: ("" if v is None else v) for k, v in r.to_dict().items()})
    return paths
