"""fast_p and geomean on hand-made results."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lsp.bench.metrics import P_VALUES, TaskResult, fast_p, geomean, summarise, summarise_all

STATUSES = ("correct", "incorrect", "compile_error", "runtime_error", "missing", "error")


def r(task: str, status: str = "correct", se: float | None = 1.0, sc: float | None = None,
      level: int | None = 1, strategy: str = "s", kernel: str = "") -> TaskResult:
    return TaskResult(task=task, level=level, strategy=strategy, status=status, speedup_eager=se,
                      speedup_compiled=sc, kernel=kernel)


def test_fast_p_counts_own_code_and_library_only_wins_apart() -> None:
    # 6 tasks: own code 3x, not checked 2x (cannot be told apart from own code), library-only 5x and 0.8x, an
    # older record's not_a_kernel 4x, one incorrect
    rs = [r("a", se=3.0, kernel="own_code"), r("b", se=2.0, kernel="not_checked"),
          r("c", se=5.0, kernel="library_only"), r("d", se=0.8, kernel="library_only"),
          r("e", "not_a_kernel", se=4.0), r("f", "incorrect", se=9.0)]
    s = summarise(1, "s", "", "abcdef", rs)
    assert s.correct == 4 and s.library_only == 3  # correct % counts the library-only ones; not_a_kernel is not correct
    assert s.fast_p_eager[1.0] == pytest.approx(2 / 6) and s.fast_p_eager[0.0] == pytest.approx(2 / 6)
    assert s.fast_p_library_only[1.0] == pytest.approx(2 / 6)  # c and the old e
    assert s.geomean_eager == pytest.approx((3.0 * 2.0) ** 0.5)  # own code only
    assert fast_p(rs, 6, 1.0, library_only=True) == pytest.approx(2 / 6)
    assert s.to_dict()["fast_p_library_only"]["1.0"] == pytest.approx(2 / 6)


def test_the_tables_show_library_only_wins_in_a_column_of_their_own() -> None:
    from kernel_lsp.bench.compare import make_row, to_markdown
    from kernel_lsp.bench.report import Report, TaskRow
    from kernel_lsp.bench.report import to_markdown as report_markdown

    rs = [r("a", se=3.0, kernel="own_code"), r("b", se=0.5, kernel="own_code"), r("c", se=5.0, kernel="library_only")]
    row = make_row("zero-shot", "zero-shot", 1, ["a", "b", "c"], rs, [1])
    assert row.correct == 3 and row.fast_1 == pytest.approx(1 / 3) and row.fast_1_library_only == pytest.approx(1 / 3)
    assert row.faster_pct == pytest.approx(50.0)  # of the own-code correct kernels
    md = to_markdown({"device": "cpu"}, [row], [1])
    assert "| fast_1 library-only |" in md and "| 50.0 | 0.33 | 0.33 | 0.33 |" in md, md
    rep = Report({"device": "cpu"}, summarise_all({1: ["a", "b", "c"]}, rs), [TaskRow(x) for x in rs])
    md = report_markdown(rep)
    assert "fast_1 library-only" in md and "| c | s | correct (library only) |" in md, md


def test_hand_made_table() -> None:
    # 5 tasks: 3 correct (0.5×, 1.2×, 3×), 1 incorrect (fast, but wrong), 1 without any result
    results = [r("a", se=0.5, sc=0.4), r("b", se=1.2, sc=0.9), r("c", se=3.0, sc=2.5),
               r("d", "incorrect", se=10.0)]
    s = summarise(1, "s", "", ["a", "b", "c", "d", "e"], results)
    assert s.tasks == 5 and s.correct == 3 and s.attempted == 4
    assert s.correct_pct == pytest.approx(60.0)
    assert s.fast_p_eager == {0.0: 0.6, 0.5: 0.4, 0.8: 0.4, 1.0: 0.4, 1.5: 0.2, 2.0: 0.2}
    assert s.fast_p_compiled[1.0] == pytest.approx(0.2)  # only c beats torch.compile
    assert s.geomean_eager == pytest.approx((0.5 * 1.2 * 3.0) ** (1 / 3))
    assert s.geomean_compiled == pytest.approx((0.4 * 0.9 * 2.5) ** (1 / 3))


def test_strictly_faster_and_unknown_speedup() -> None:
    rs = [r("a", se=1.0), r("b", se=None)]
    assert fast_p(rs, 2, 1.0) == 0.0  # speedup must exceed p
    assert fast_p(rs, 2, 0.0) == 1.0  # correct without a timing still counts for fast_0
    assert fast_p(rs, 2, 0.5) == 0.5


def test_results_outside_the_selection_are_ignored_and_last_wins() -> None:
    rs = [r("a", "incorrect"), r("a", se=2.0), r("zzz", se=5.0)]
    s = summarise(1, "s", "", ["a", "b"], rs)
    assert s.correct == 1 and s.fast_p_eager[1.5] == 0.5


def test_empty_selection_and_geomean_edges() -> None:
    assert fast_p([], 0, 1.0) == 0.0
    assert geomean([]) is None
    assert geomean([None, 0.0, -1.0, math.inf]) is None
    assert geomean([4.0, None, 1.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        fast_p([r("a"), r("b")], 1, 0.0)


def test_summarise_all_rows_per_level_and_strategy() -> None:
    rs = [r("l1a", se=2.0, strategy="x"), r("l2a", level=2, se=0.5, strategy="x"), r("l1a", "incorrect", strategy="y")]
    rows = summarise_all({2: ["l2a"], 1: ["l1a", "l1b"]}, rs)
    assert [(s.level, s.strategy) for s in rows] == [(1, "x"), (1, "y"), (2, "x"), (2, "y")]
    assert rows[0].fast_p_eager[1.0] == 0.5 and rows[1].correct == 0 and rows[3].attempted == 0


result_lists = st.lists(
    st.tuples(st.sampled_from(STATUSES),
              st.one_of(st.none(), st.floats(min_value=1e-3, max_value=1e3, allow_nan=False)),
              st.one_of(st.none(), st.floats(min_value=1e-3, max_value=1e3, allow_nan=False))),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(result_lists, st.integers(min_value=0, max_value=10))
def test_properties(rows: list, extra_missing: int) -> None:
    results = [r(f"t{i}", status, se, sc) for i, (status, se, sc) in enumerate(rows)]
    names = [x.task for x in results] + [f"missing{i}" for i in range(extra_missing)]
    s = summarise(1, "s", "", names, results)
    n = len(names)
    correct = sum(x.correct for x in results)
    # fast_0 is the correct fraction over ALL tasks; missing tasks count as failures
    assert s.fast_p_eager[0.0] == pytest.approx(correct / n if n else 0.0)
    assert s.correct_pct == pytest.approx(100 * correct / n if n else 0.0)
    for against in (s.fast_p_eager, s.fast_p_compiled):
        vals = [against[p] for p in P_VALUES]
        assert all(a >= b for a, b in pairwise(vals)), "fast_p must not increase with p"
        assert all(0.0 <= v <= 1.0 for v in vals)
    # adding missing tasks can only lower every figure
    bigger = summarise(1, "s", "", names + ["one_more"], results)
    assert all(bigger.fast_p_eager[p] <= s.fast_p_eager[p] for p in P_VALUES)
    # geomean over correct tasks lies between their smallest and largest speedup
    sp = [x.speedup_eager for x in results if x.correct and x.speedup_eager]
    if sp:
        assert min(sp) * (1 - 1e-9) <= s.geomean_eager <= max(sp) * (1 + 1e-9)
        assert math.log(s.geomean_eager) == pytest.approx(sum(map(math.log, sp)) / len(sp), abs=1e-9)
    else:
        assert s.geomean_eager is None
    # a task whose result is missing never counts, however fast its (absent) kernel
    assert fast_p([x for x in results if x.status != "missing"], n, 0.0) == s.fast_p_eager[0.0]


def test_uncertain_speedups_are_shown_with_their_interval() -> None:
    """issue 17: a speedup whose interval is wider than the target reads as uncertain in the bench's table and
    progress lines, never as a plain number (the CSV keeps the figures and the flag)."""
    import io

    from rich.console import Console

    from evaluator.verdict import Timing, TimingStats, Verdict
    from kernel_lsp.bench.ledger import RunSpec
    from kernel_lsp.bench.progress import BenchProgress
    from kernel_lsp.bench.report import Report, TaskRow, to_markdown
    from kernel_lsp.bench.sweep import result_from_verdict
    from kernel_lsp.tasks import Task

    t = Timing(candidate=TimingStats(1.0, 0.1), eager=TimingStats(2.1, 0.1), speedup_eager=2.1, speedup_compiled=0.8,
               speedup_ci_pct=30.0, uncertain=True, noise="the machine was busy")
    v = Verdict.from_dict(Verdict(status="correct", timing=t).to_dict())
    task = Task(name="level1/1_add", module="Model", reference_src="", fingerprint="f", level=1)
    res = result_from_verdict(task, RunSpec("candidates", "candidates"), v, None)
    assert (res.speedup_ci_pct, res.uncertain, res.noise) == (30.0, True, "the machine was busy")
    sure = TaskResult(task="level1/2_mul", level=1, strategy="candidates", status="correct", speedup_eager=0.5)
    md = to_markdown(Report({"device": "cpu"}, summarise_all({1: [res.task, sure.task]}, [res, sure]),
                            [TaskRow(res), TaskRow(sure)]))
    assert "| level1/1_add | candidates | correct | 2.10× ± 30 % faster (uncertain) | 1.25× slower (uncertain) |" in md
    assert "| level1/2_mul | candidates | correct | 2.00× slower | — |" in md
    assert "level1/1_add [candidates] 2.10× ± 30 % faster than eager (uncertain: the machine was busy)" in md
    buf = io.StringIO()
    progress = BenchProgress(1, "bench", Console(file=buf, width=200))
    progress.done(res, "ran")
    assert "level1/1_add [candidates]: correct 2.10× ± 30 % faster than eager (uncertain: the machine was busy)" \
        in buf.getvalue()
