"""The one rule for the best candidate and for a win (kernel_lsp/history/ranking.py, issue 27 items 1-2): the best is
the correct candidate with the lowest median time of its own, whatever the eager measurement beside it says
(docs/REWARDS.md); it is offered only when it is correct and shown faster than eager, its interval included."""

from __future__ import annotations

from pathlib import Path

from evaluator.verdict import CORRECT, INCORRECT, Correctness, Timing, TimingStats, Verdict
from kernel_lsp import verdicts
from kernel_lsp.history import History, best, is_win, offered, rank_key, shown_faster


def timing(ms: float, speedup: float | None, *, ci: float | None = None, uncertain: bool = False) -> Timing:
    eager = TimingStats(ms * speedup, 0.01) if speedup else None
    return Timing(candidate=TimingStats(ms, 0.01), eager=eager, speedup_eager=speedup, speedup_ci_pct=ci,
                  uncertain=uncertain)


def verdict(status: str, t: Timing | None) -> Verdict:
    return Verdict(status, correctness=Correctness(trials=5, passed=5 if status == CORRECT else 0), timing=t)


def test_the_rule_of_a_win_takes_the_interval() -> None:
    assert shown_faster(timing(0.2, 1.84))
    assert shown_faster(timing(0.2, 2.1, ci=25.0, uncertain=True))  # 2.1 × 0.75 > 1: faster even so
    assert not shown_faster(timing(0.2, 1.02, ci=8.0, uncertain=True))  # the interval reaches 1
    assert not shown_faster(timing(0.2, 1.02, ci=2.5))  # a narrow interval that still reaches 1
    assert shown_faster(timing(0.2, 1.05, ci=2.5))
    assert not shown_faster(timing(0.2, 1.3, uncertain=True))  # uncertain and no interval: not shown
    assert not shown_faster(timing(0.2, 1 / 1.4))
    assert not shown_faster(timing(0.2, 1.0))
    assert not shown_faster(timing(0.2, None)) and not shown_faster(None)


def test_the_best_is_the_lowest_time_and_the_eager_beside_it_does_not_reorder(tmp_path: Path) -> None:
    with History(tmp_path) as h:
        # issue 27: candidate 1 measured against a slow eager run reads 9×, candidate 2 only 1.2×; 2 is faster
        c1 = h.add_candidate("t", "fp", "a", verdict=verdict(CORRECT, timing(0.238, 9.0)))
        c2 = h.add_candidate("t", "fp", "b", verdict=verdict(CORRECT, timing(0.22, 1.2)))
        c3 = h.add_candidate("t", "fp", "c", verdict=verdict(INCORRECT, timing(0.01, 50.0)))
        c4 = h.add_candidate("t", "fp", "d", verdict=verdict(CORRECT, None))  # correct, not timed
        c5 = h.add_candidate("t", "fp", "e", verdict=verdict(CORRECT, timing(0.22, 1.1)))  # a tie: the older first
        cands = [c1, c2, c3, c4, c5]
        assert [c.number for c in sorted(cands, key=rank_key)] == [2, 5, 1, 4, 3]
        assert best(cands) == c2 and offered(cands) == c2 and h.best("t", "fp") == c2
        assert is_win(c1) and not is_win(c3) and not is_win(c4)
        assert best([c3]) is None and offered([]) is None and best([c4]) == c4 and offered([c4]) is None


def test_a_slower_best_is_not_offered_even_beside_a_win(tmp_path: Path) -> None:
    with History(tmp_path) as h:
        slow = h.add_candidate("t", "fp", "a", verdict=verdict(CORRECT, timing(0.20, 1 / 1.4)))
        win = h.add_candidate("t", "fp", "b", verdict=verdict(CORRECT, timing(0.30, 1.5)))
        assert best([slow, win]) == slow and offered([slow, win]) is None  # ★ never contradicts the times
        assert is_win(win) and not is_win(slow)
        unsure = h.add_candidate("t", "fp", "c", verdict=verdict(CORRECT, timing(0.1, 1.02, ci=8.0, uncertain=True)))
        assert best([slow, unsure]) == unsure and offered([slow, unsure]) is None


def test_the_words_of_a_kernel_that_is_not_a_win() -> None:
    assert verdicts.not_faster(timing(0.31, 1 / 1.4)) == "1.40× slower than eager"
    assert verdicts.not_faster(timing(0.31, 1 / 1.4), ms=True) == "1.40× slower than eager (0.31 ms vs 0.22 ms)"
    assert verdicts.not_faster(timing(0.31, 1 / 1.4, ci=20.0, uncertain=True)) == \
        "1.40× ± 20 % slower than eager, uncertain"
    assert verdicts.not_faster(timing(0.31, 1.02, ci=8.0, uncertain=True)) == \
        "1.02× ± 8 % faster than eager, not shown faster"
    assert verdicts.not_faster(timing(0.31, 1.02, ci=2.4)) == "1.02× ± 2 % faster than eager, not shown faster"
    assert verdicts.not_faster(timing(0.31, 1.3, uncertain=True)) == \
        "1.30× faster than eager, uncertain, not shown faster"
    assert verdicts.not_faster(None) == "not timed"
    assert verdicts.no_win(2, timing(0.31, 1 / 1.4)) == ("no kernel faster than eager: the fastest correct one, "
                                                         "candidate 2, is 1.40× slower than eager (0.31 ms vs 0.22 ms)")
    assert verdicts.no_win(2, timing(0.31, 1.02, ci=8.0, uncertain=True)).startswith(
        "no kernel shown faster than eager: the fastest correct one, candidate 2, is 1.02× ± 8 % faster")
    assert verdicts.no_win(4, None) == ("no kernel shown faster than eager: the fastest correct one, candidate 4, "
                                        "was not timed")
