"""The figure: distribution of speedups over eager (correct tasks) per strategy, plus fast_p curves."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .metrics import Summary, TaskResult

FIGURE = "speedups.png"


def plot_speedups(results: list[TaskResult], summaries: list[Summary], out: Path) -> Path:
    """Left: speedup vs eager of each correct task, one strip + box per strategy (log scale; failures are
    counted in the label). Right: fast_p against p per strategy and level. Written as PNG (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    by_run: dict[str, list[TaskResult]] = defaultdict(list)
    for r in results:
        by_run[r.strategy + (f" ({r.model})" if r.model else "")].append(r)
    names = sorted(by_run) or ["(no results)"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [1.3, 1]})
    data, labels = [], []
    for name in names:
        rs = by_run.get(name, [])
        sp = [r.speedup_eager for r in rs if r.correct and r.speedup_eager and r.speedup_eager > 0]
        data.append(sp)
        labels.append(f"{name}\n{len(sp)} correct & timed of {len(rs)}")
    positions = list(range(1, len(names) + 1))
    nonempty = [(p, d) for p, d in zip(positions, data) if d]
    if nonempty:
        ax.boxplot([d for _, d in nonempty], positions=[p for p, _ in nonempty], widths=0.5, showfliers=False)
        for p, d in nonempty:
            jitter = [p + 0.15 * ((i % 7) - 3) / 3 for i in range(len(d))]
            ax.scatter(jitter, d, s=14, alpha=0.6, zorder=3)
        ax.set_yscale("log")
        fmt = FuncFormatter(lambda v, _: f"{v:g}×")
        ax.yaxis.set_major_formatter(fmt)
        ax.yaxis.set_minor_formatter(fmt)
        ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(positions, labels, fontsize=8)
    ax.set_xlim(0.5, len(names) + 0.5)
    ax.set_ylabel("speedup over eager PyTorch (×, log)")
    ax.set_title("Speedup of correct kernels per strategy")
    for s in summaries:
        ps = sorted(s.fast_p_eager)
        lvl = "all" if s.level is None else f"L{s.level}"
        ax2.plot(ps, [s.fast_p_eager[p] for p in ps], marker="o", label=f"{lvl} {s.strategy}")
    ax2.set_xlabel("p (speedup threshold over eager)")
    ax2.set_ylabel("fast_p (share of all tasks)")
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_title("fast_p")
    if summaries:
        ax2.legend(fontsize=8)
    fig.tight_layout()
    path = out / FIGURE
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
