"""`kernel-lsp optimize`'s result table at 80 columns (issue 18 item 7): no column wrapped one word per line, no
column with nothing in it; speeds in words, an uncertain one with its ± figure and why."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console

from evaluator.verdict import Correctness, Timing, TimingStats, Verdict
from kernel_lsp.cli.optimize import result_table
from kernel_lsp.generation.engine import RunResult
from kernel_lsp.history.store import CandidateRecord

TASK = SimpleNamespace(name="relu.py::Model")
WHY = "main.cpp:3:1: error: expected ';' before 'return' [bold] (and further compiler output follows here)"
NO_KERNEL = [{"round": 1, "sample": 4, "strategy": "profile-guided", "reason": "x",
              "problem": "your reply held no Python code block with ModelNew inside"}]


def _cand(n: int, verdict: Verdict, strategy: str = "profile-guided", round: int = 1) -> CandidateRecord:
    v = Verdict.from_dict(verdict.to_dict())
    return CandidateRecord(n, "k", n, "fp", 1, round, n, strategy, "", "", v.status, v, 0.0)


def _correct(speedup: float, **timing) -> Verdict:
    t = Timing(candidate=TimingStats(0.41, 0.01), eager=TimingStats(0.41 * speedup, 0.01), speedup_eager=speedup,
               **timing)
    return Verdict("correct", correctness=Correctness(trials=5, passed=5, max_abs_err=1e-7), timing=t)


def _render(result: RunResult, no_kernel=None, said: str = "") -> list[str]:
    con = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    con.print(result_table(TASK, result, no_kernel, said=said))
    return con.export_text().splitlines()


def _words_per_line(lines: list[str], text: str) -> list[int]:
    """How many words of `text` each line that holds some of it carries."""
    words = set(text.split())
    split = [[w.rstrip("…") for w in line.split()] for line in lines]  # 'output…': a reason cut after a word
    return [sum(1 for w in line if w in words) for line in split if any(w in words for w in line)]


def test_a_run_without_a_correct_candidate_reads_at_80_columns() -> None:
    bad = Verdict("compile_error", compiler_log=WHY)
    lines = _render(RunResult(3, "failed", "m", [_cand(1, bad)]), NO_KERNEL)
    assert max(len(line) for line in lines) <= 80
    header = next(line for line in lines if "status" in line)
    assert header.split() == ["#", "status", "why"], header  # times, speeds, round, strategy: nothing in them
    assert "(round 1, profile-guided)" in lines[0]  # shared by every row: said once, in the title
    assert min(_words_per_line(lines, WHY)) >= 3, lines  # never one word per line


def test_figures_speeds_and_reasons_at_80_columns() -> None:
    rows = [_cand(1, Verdict("compile_error", compiler_log=WHY)), _cand(2, _correct(1 / 1.08, speedup_compiled=0.2)),
            _cand(3, _correct(2.1, speedup_ci_pct=25.0, uncertain=True, noise="the machine was busy"), round=2)]
    lines = _render(RunResult(3, "done", "m", rows, rows[2]), NO_KERNEL)
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= 80, text
    header = next(line for line in lines if "status" in line)
    assert "round" in header and "vs eager" in header and "why" not in header, header
    assert "1.08× slower" in text and "5.00× slower" in text  # never 0.93×, and torch.compile's says which way
    assert "2.10× ± 25 % faster" in text and "(uncertain)" in text
    assert "uncertain: candidate 3 ± 25 % (the machine was busy)" in text
    assert "1 (compile error): main.cpp:3:1: error: expected ';'" in text  # the reason, under the table
    assert "[bold]" in text and "further" in text  # as it is: not read as markup, no word cut
    assert min(_words_per_line(lines, WHY)) >= 3, text


def test_why_speeds_are_uncertain_is_said_once() -> None:
    """Two uncertain candidates for the same cause: one line names both with their ± figures and the cause once;
    a cause the closing sentence gives already is not repeated under the table."""
    busy = "the machine was busy (load 3.1 on 2 cores)"
    rows = [_cand(1, _correct(2.1, speedup_ci_pct=25.0, uncertain=True, noise=busy)),
            _cand(2, _correct(1.9, speedup_ci_pct=30.0, uncertain=True, noise=busy))]
    text = "\n".join(_render(RunResult(3, "done", "m", rows, rows[0])))
    assert " ".join(text.split()).count("the machine was busy") == 1, text
    assert "uncertain: candidate 1 ± 25 %, candidate 2 ± 30 % (the machine was busy" in " ".join(text.split())
    said = f"best: candidate 1 (correct, 2.10× ± 25 % faster than eager (uncertain: {busy}))"
    text = "\n".join(_render(RunResult(3, "done", said, rows, rows[0]), said=said))
    assert "the machine was busy" not in text and "uncertain: candidate 1 ± 25 %, candidate 2 ± 30 %" in text
