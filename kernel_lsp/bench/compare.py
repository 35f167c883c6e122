"""`kernel-lsp bench --compare A,B,...`: several regimes over the same tasks and model, side by side.

Each regime is one ordinary sweep (`main.sweep_once`: the same ledger, so an interrupted comparison resumes where
it stopped, locally or on Ray), with the same model and samples; the rounds setting applies to the regimes that
refine (zero-shot stays one round, else it would be refinement by another name). The comparison is a row per
regime and level, computed by `metrics` from the sweeps' results: correct %, the share of the correct kernels of
their own faster than eager, fast_1 and fast_1.2 (own code), fast_1 of the library-only results apart, the
geometric-mean speedup of the own-code ones and the tasks solved; with
several sample counts (`--samples 1,2,4,8`) also correct % and fast_1 against n, the unbiased pass@k estimate from
the samples drawn (n = the largest count).
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import verdicts
from ..config import Settings
from ..tasks import Task
from .metrics import TaskResult, pass_at_k_share, summarise
from .run import EXIT_FAIL, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, _err, _Run, run_spec, sweep_once
from .selection import BenchError

if TYPE_CHECKING:
    from ..generation import Backend
    from .baselines import LiveBaselines

COMPARE_MD, COMPARE_CSV, COMPARE_JSON, COMPARE_FIGURE = "compare.md", "compare.csv", "compare.json", "compare.png"
COMPARE_PS = (0.0, 1.0, 1.2)
STUDY_LEVELS, STUDY_TASKS_PER_LEVEL = [1, 2, 3], 10


def parse_strategies(text: str) -> list[str]:
    """ "zero-shot,refine" -> ["zero-shot", "refine"]: each a strategy the engine knows (or several joined with
    '+'); raises BenchError naming the bad one."""
    from ..generation import GenerationError, make_plan

    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part or part in out:
            continue
        try:
            make_plan(part, settings_samples=1, settings_rounds=1)
        except GenerationError as e:
            raise BenchError(f"--compare: {e}") from None
        out.append(part)
    if not out:
        raise BenchError("--compare: expected strategies like zero-shot,profile-guided,refine,agent")
    return out


def regime_settings(settings: Settings, strategy: str, samples: int) -> Settings:
    """A regime's settings: the same model and samples for every regime; the rounds setting where it refines."""
    from ..generation import make_plan

    plan = make_plan(strategy, settings_samples=samples, settings_rounds=settings.rounds, samples=samples)
    return replace(settings, strategy=strategy, samples=samples, rounds=plan.rounds)


@dataclass(frozen=True)
class Row:
    regime: str
    label: str  # the sweep's label (strategy, n, rounds)
    level: int | str | None  # a level, None (tasks without one) or "all"
    tasks: int
    correct: int
    correct_pct: float
    faster_pct: float | None  # of the own-code correct kernels, the share faster than eager; None without any
    fast_1: float  # own code (metrics.TaskResult.own)
    fast_1_2: float
    geomean: float | None  # speedup over eager, geometric mean over the own-code correct kernels
    solved: list[str]  # tasks with a correct kernel
    pass_at_k: dict[int, dict[str, float | None]] = field(default_factory=dict)  # k -> correct_pct, fast_1
    fast_1_library_only: float = 0.0  # correct, PyTorch's operators doing the work, more than 1x faster than eager

    def to_dict(self) -> dict[str, Any]:
        return {"regime": self.regime, "label": self.label, "level": self.level, "tasks": self.tasks,
                "correct": self.correct, "correct_pct": self.correct_pct, "faster_than_eager_pct": self.faster_pct,
                "fast_1": self.fast_1, "fast_1.2": self.fast_1_2, "fast_1_library_only": self.fast_1_library_only,
                "geomean_speedup_eager": self.geomean,
                "solved": self.solved, "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()}}


def make_row(regime: str, label: str, level: int | str | None, names: Sequence[str], results: list[TaskResult],
             ks: Sequence[int]) -> Row:
    s = summarise(level if isinstance(level, int) else None, label, "", names, results, ps=COMPARE_PS)
    mine = {r.task: r for r in results if r.task in set(names)}
    fast = s.fast_p_eager[1.0] * s.tasks
    pk: dict[int, dict[str, float | None]] = {}
    for k in ks:
        c, f = pass_at_k_share(mine.values(), names, k, "correct"), pass_at_k_share(mine.values(), names, k, "fast_1")
        pk[k] = {"correct_pct": None if c is None else 100.0 * c, "fast_1": f}
    own = s.correct - s.library_only
    return Row(regime=regime, label=label, level=level, tasks=s.tasks, correct=s.correct,
               correct_pct=s.correct_pct, faster_pct=100.0 * fast / own if own else None,
               fast_1=s.fast_p_eager[1.0], fast_1_2=s.fast_p_eager[1.2], geomean=s.geomean_eager,
               solved=[n for n in names if n in mine and mine[n].correct], pass_at_k=pk,
               fast_1_library_only=s.fast_p_library_only[1.0])


def comparison_rows(tasks_by_level: dict[int | None, list[str]], runs: list[tuple[str, str, list[TaskResult]]],
                    ks: Sequence[int]) -> list[Row]:
    """Rows per regime (in the order given) per level, then one over all levels when there are several."""
    rows = []
    everything = [n for names in tasks_by_level.values() for n in names]
    for regime, label, results in runs:
        for level in sorted(tasks_by_level, key=lambda lv: (lv is None, lv or 0)):
            rows.append(make_row(regime, label, level, tasks_by_level[level], results, ks))
        if len(tasks_by_level) > 1:
            rows.append(make_row(regime, label, "all", everything, results, ks))
    return rows


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def _level(level: int | str | None) -> str:
    return "—" if level is None else str(level)


def to_markdown(meta: dict[str, Any], rows: list[Row], ks: Sequence[int]) -> str:
    lines = [f"# kernel-lsp bench --compare — {meta.get('device', '?')}", "",
             f"Model {meta.get('model', '?')}; {meta.get('tasks', 0)} task(s); {meta.get('samples', 1)} sample(s) per "
             f"round; rounds: " + ", ".join(f"{r} {n}" for r, n in meta.get("rounds", {}).items()) + "."
             + (f" Not run (interrupted or stopped): {', '.join(meta['not_run'])}." if meta.get("not_run") else ""),
             "", "correct %, fast_1, fast_1.2: of all selected tasks (missing and failed count as failures); "
             "fast_1, fast_1.2, faster % and geomean count kernels of the candidates' own code (and correct ones "
             "whose own code could not be checked, which cannot be told apart); fast_1 library-only: correct and "
             "faster than eager with PyTorch's operators doing the work; faster %: of the own-code correct kernels, "
             "the share faster than eager; geomean: speedup over eager of the own-code correct ones.", ""]
    header = ["regime", "level", "tasks", "correct %", "faster %", "fast_1", "fast_1.2", "fast_1 library-only",
              "geomean", "solved"]
    lines += _table(header, ([r.regime, _level(r.level), str(r.tasks), _pct(r.correct_pct), _pct(r.faster_pct),
                              f"{r.fast_1:.2f}", f"{r.fast_1_2:.2f}", f"{r.fast_1_library_only:.2f}",
                              verdicts.speed(r.geomean, short=True),
                              f"{len(r.solved)}" + (": " + ", ".join(_short(n) for n in r.solved) if r.solved
                                                   and r.level != "all" else "")] for r in rows))
    if len(ks) > 1:
        lines += ["", f"## Against n (pass@k from the {max(ks)} samples drawn per task)", "",
                  "The unbiased estimate 1 - C(n-c,k)/C(n,k) per task (c: samples with a correct kernel, or a "
                  "correct one faster than eager), averaged over the tasks.", ""]
        header = ["regime", "level", *[f"correct % n={k}" for k in ks], *[f"fast_1 n={k}" for k in ks]]
        lines += _table(header, ([r.regime, _level(r.level), *[_pct(r.pass_at_k[k]["correct_pct"]) for k in ks],
                                  *[_f2(r.pass_at_k[k]["fast_1"]) for k in ks]] for r in rows))
    if meta.get("figure"):
        lines += ["", f"![the regimes compared]({meta['figure']})"]
    return "\n".join(lines) + "\n"


def _f2(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _short(task: str) -> str:
    return task.rsplit("/", 1)[-1]


def _table(header: list[str], rows: Any) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]


CSV_COLUMNS = ["regime", "label", "level", "tasks", "correct", "correct_pct", "faster_than_eager_pct", "fast_1",
               "fast_1.2", "fast_1_library_only", "geomean_speedup_eager", "solved"]


def write_csv(path: Path, rows: list[Row], ks: Sequence[int]) -> None:
    pk_cols = [f"correct_pct_n{k}" for k in ks] + [f"fast_1_n{k}" for k in ks] if len(ks) > 1 else []
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS + pk_cols)
        for r in rows:
            d = r.to_dict()
            cells = ["" if d[c] is None else ";".join(d[c]) if c == "solved" else d[c] for c in CSV_COLUMNS]
            if pk_cols:
                cells += [_num(r.pass_at_k[k]["correct_pct"]) for k in ks] + [_num(r.pass_at_k[k]["fast_1"]) for k in ks]
            w.writerow(cells)


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.6g}"


def plot_comparison(rows: list[Row], ks: Sequence[int], out: Path) -> Path:
    """Left: correct % and fast_1 (as %) per regime and level, as bars. Right, with several sample counts:
    correct % and fast_1 against n over all selected tasks, one curve per regime."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    regimes = list(dict.fromkeys(r.regime for r in rows))
    levels = list(dict.fromkeys(r.level for r in rows))
    curves = len(ks) > 1
    fig, axes = plt.subplots(1, 2 if curves else 1, figsize=(13 if curves else 8, 4.8), squeeze=False)
    ax = axes[0][0]
    width = 0.8 / max(1, len(regimes))
    for i, regime in enumerate(regimes):
        mine = {r.level: r for r in rows if r.regime == regime}
        xs = [j + (i - (len(regimes) - 1) / 2) * width for j in range(len(levels))]
        bars = ax.bar(xs, [mine[lv].correct_pct for lv in levels], width, label=f"{regime} correct", alpha=0.45)
        ax.bar(xs, [100.0 * mine[lv].fast_1 for lv in levels], width * 0.6, color=bars.patches[0].get_facecolor(),
               alpha=1.0, label=f"{regime} fast_1")
    ax.set_xticks(range(len(levels)), [f"level {_level(lv)}" if lv != "all" else "all" for lv in levels])
    ax.set_ylabel("% of the selected tasks")
    ax.set_ylim(0, 125)
    ax.set_yticks(range(0, 101, 20))
    ax.set_title("Correct (wide bars) and faster than eager (narrow)")
    ax.legend(fontsize=7, ncol=min(4, 2 * len(regimes)), loc="upper center")
    if curves:
        ax2 = axes[0][1]
        pooled = "all" if "all" in levels else levels[0]
        for regime in regimes:
            r = next(x for x in rows if x.regime == regime and x.level == pooled)
            line = ax2.plot(ks, [r.pass_at_k[k]["correct_pct"] or 0.0 for k in ks], marker="o",
                            label=f"{regime} correct %")
            ax2.plot(ks, [100.0 * (r.pass_at_k[k]["fast_1"] or 0.0) for k in ks], marker="s", linestyle="--",
                     color=line[0].get_color(), label=f"{regime} fast_1 (%)")
        ax2.set_xscale("log", base=2)
        ax2.set_xticks(list(ks), [str(k) for k in ks])
        ax2.set_xlabel("samples n (pass@n estimate)")
        ax2.set_ylabel("% of the selected tasks")
        ax2.set_ylim(-2, 102)
        ax2.set_title(f"Against n ({'all levels' if pooled == 'all' else f'level {_level(pooled)}'})")
        ax2.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / COMPARE_FIGURE
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_comparison(out: Path, meta: dict[str, Any], rows: list[Row], ks: Sequence[int],
                     task_results: list[TaskResult]) -> str:
    """compare.md, compare.csv, compare.json and (with matplotlib) compare.png in `out`; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "figure": COMPARE_FIGURE}
    try:
        plot_comparison(rows, ks, out)
    except ImportError:
        meta["figure"] = ""
        print("kernel-lsp: no figure: matplotlib is not installed (pip install 'kernel-lsp[bench]')", file=sys.stderr)
    md = to_markdown(meta, rows, ks)
    (out / COMPARE_MD).write_text(md, encoding="utf-8")
    write_csv(out / COMPARE_CSV, rows, ks)
    doc = {"meta": meta, "samples": list(ks), "rows": [r.to_dict() for r in rows],
           "tasks": [{k: v for k, v in r.to_dict().items() if k != "message"} for r in task_results]}
    (out / COMPARE_JSON).write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return md


def compare(run: _Run, device: str, baselines: LiveBaselines, backend: Backend | None) -> int:
    """Sweep each regime in turn (finished units are skipped, as in a single sweep), then write the comparison."""
    strategies: list[str] = run.args.compare_list
    ks: list[int] = getattr(run.args, "sample_points", None) or [run.settings.samples]
    samples = max(ks)
    code = EXIT_OK
    runs: list[tuple[str, str, list[TaskResult]]] = []
    rounds: dict[str, int] = {}
    totals = defaultdict(int)
    model = ""
    for strategy in strategies:
        settings = regime_settings(run.settings, strategy, samples)
        spec = run_spec(settings, run.args, device, baselines.torch)
        model = spec.model
        rounds[strategy] = settings.rounds
        c, stats = sweep_once(run, settings, spec, baselines, backend)
        for k in ("ran", "skipped", "errors", "evaluations"):
            totals[k] += getattr(stats, k)
        got = {r.task: r for r in stats.results}
        results = [got.get(t.name) or TaskResult(task=t.name, level=t.level, strategy=spec.label, model=spec.model)
                   for t in run.tasks]
        runs.append((strategy, spec.label, results))
        if c != EXIT_OK:
            code = c
            break
        if stats.errors:
            code = EXIT_FAIL
    if totals["ran"] + totals["skipped"] + totals["errors"] == 0:
        _err("no task ran: no tables written", EXIT_USAGE)
        return code if code != EXIT_OK else EXIT_UNAVAILABLE
    by_level: dict[int | None, list[str]] = defaultdict(list)
    for t in run.tasks:
        by_level[t.level].append(t.name)
    rows = comparison_rows(dict(by_level), runs, ks)
    meta = {"device": device, "torch": baselines.torch, "model": model, "strategies": strategies,
            "not_run": [s for s in strategies if s not in rounds], "samples": samples, "rounds": rounds,
            "tasks": len(run.tasks), "levels": {str(lv): len(v) for lv, v in by_level.items()},
            "task_names": [t.name for t in run.tasks], "source": run.source, "history": str(run.history.path),
            "ray": run.args.ray or "", "interrupted": code == 130, **dict(totals)}
    md = write_comparison(run.out, meta, rows, ks, [r for _, _, rs in runs for r in rs])
    sys.stdout.write(md)
    sys.stdout.flush()
    print(f"kernel-lsp: comparison in {run.out}", file=sys.stderr)
    return code


def first_per_level(tasks: list[Task], count: int = STUDY_TASKS_PER_LEVEL) -> list[Task]:
    """The study's default selection: the first `count` tasks of each level (tasks come in level, id order)."""
    seen: dict[Any, int] = defaultdict(int)
    out = []
    for t in tasks:
        if seen[t.level] < count:
            out.append(t)
            seen[t.level] += 1
    return out
