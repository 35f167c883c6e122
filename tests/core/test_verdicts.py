"""The words for verdicts: every status reads as a sentence, including ones the oracle adds later."""

from __future__ import annotations

from evaluator.verdict import Correctness, Stage, Timing, TimingStats, Verdict
from kernel_lsp import verdicts


def test_new_oracle_statuses_read_as_sentences() -> None:
    v = Verdict(status="tampered", message="torch.backends.cudnn.allow_tf32 was changed by the candidate")
    assert verdicts.describe(v) == ("the candidate changed the oracle's or torch's state: "
                                    "torch.backends.cudnn.allow_tf32 was changed by the candidate")
    v = Verdict(status="not_a_kernel", message="forward() calls torch.relu on the inputs")  # older records
    assert verdicts.describe(v) == "no custom kernel does the work: forward() calls torch.relu on the inputs"
    assert verdicts.label("not_a_kernel") == "not a kernel"


def test_a_library_only_correct_candidate_says_so() -> None:
    from evaluator.verdict import KernelCheck

    t = Timing(candidate=TimingStats(0.41, 0.01), eager=TimingStats(0.82, 0.01), speedup_eager=2.0)
    c = Correctness(trials=5, passed=5)
    lib = Verdict(status="correct", timing=t, correctness=c, kernel=KernelCheck(finding="library_only"))
    own = Verdict(status="correct", timing=t, correctness=c, kernel=KernelCheck(finding="own_code"))
    assert verdicts.describe(lib) == ("2.00× faster than eager (0.41 ms vs 0.82 ms), correct on 5 trials, "
                                      "uses PyTorch operators only")
    assert verdicts.describe(own) == "2.00× faster than eager (0.41 ms vs 0.82 ms), correct on 5 trials"
    assert verdicts.status_label("correct", lib) == "correct (uses PyTorch operators only)"
    assert verdicts.status_label("correct", own) == verdicts.status_label("correct") == "correct"


def test_a_status_nobody_knows_yet_gets_a_generic_wording() -> None:
    v = Verdict(status="quantum_flux", message="the flux capacitor disagreed",
                stages=[Stage("verify", False, 0.1, "the flux capacitor disagreed")])
    assert verdicts.label(v.status) == "quantum flux"
    assert verdicts.describe(v) == "quantum flux: the flux capacitor disagreed"
    assert verdicts.failure(v) == "the flux capacitor disagreed"
    assert verdicts.describe(Verdict(status="quantum_flux")) == "quantum flux"


def test_a_mismatch_names_its_trial_once_counted_from_one() -> None:
    c = Correctness(trials=5, passed=0, atol=1e-4, rtol=1e-4, max_abs_err=1.0, max_rel_err=0.5, failed_trial=0,
                    where="output[0][3, 1]", message="trial 0 (ramped inputs): 12 of 16384 elements differ")
    line = verdicts.describe(Verdict(status="incorrect", correctness=c))
    assert line == ("disagrees with Model: max abs error 1 (rel 0.5) at output[0][3, 1], trial 1 of 5 "
                    "(ramped inputs) — 12 of 16384 elements differ")
    assert "trial 0" not in line
    # The oracle's own form: "trial 1 of 5 (inputs: ...): ..." while only one trial has run when it fails.
    c1 = Correctness(trials=1, passed=0, max_abs_err=4.5, failed_trial=0, where="output[17, 177]",
                     message="trial 1 of 5 (inputs: the task's get_inputs()): 3 of 96 elements outside atol")
    line = verdicts.describe(Verdict(status="incorrect", correctness=c1))
    assert line == ("disagrees with Model: max abs error 4.5 at output[17, 177], trial 1 of 5 (inputs: the task's "
                    "get_inputs()) — 3 of 96 elements outside atol")
    # A message in another form is kept as it is.
    c2 = Correctness(trials=3, failed_trial=2, max_abs_err=2.0, message="shape (4,) vs (4, 1)")
    assert verdicts.mismatch(Verdict(status="incorrect", correctness=c2)).endswith("trial 3 of 3 — shape (4,) vs (4, 1)")


def test_a_correct_verdict_says_how_fast_and_on_how_many_trials() -> None:
    t = Timing(candidate=TimingStats(0.41, 0.01), eager=TimingStats(0.76, 0.02), speedup_eager=0.76 / 0.41)
    v = Verdict(status="correct", correctness=Correctness(trials=5, passed=5), timing=t)
    assert verdicts.describe(v) == "1.85× faster than eager (0.41 ms vs 0.76 ms), correct on 5 trials"
    slow = Timing(candidate=TimingStats(14.7, 0.1), eager=TimingStats(1.0, 0.01), speedup_eager=1 / 14.7)
    assert verdicts.describe(Verdict(status="correct", timing=slow)).startswith("14.7× slower than eager")


def test_one_way_to_write_a_speed() -> None:
    assert verdicts.speed(1.84) == "1.84× faster than eager"
    assert verdicts.speed(1 / 1.07) == "1.07× slower than eager"  # never "0.93×"
    assert verdicts.speed(2.3, "compiled") == "2.30× faster than torch.compile"  # says which way
    assert verdicts.speed(0.5, "compiled", short=True) == "2.00× slower"
    assert verdicts.speed(None) == "—" and verdicts.speed(0.0) == "—"
    assert verdicts.speed(140.0) == "140× faster than eager"


def test_an_uncertain_speedup_carries_its_interval_and_why() -> None:
    t = Timing(candidate=TimingStats(0.41, 0.01), eager=TimingStats(0.86, 0.02), speedup_eager=2.1,
               speedup_compiled=1.3, speedup_ci_pct=25.0, uncertain=True, noise="the machine was busy")
    v = Verdict.from_dict(Verdict(status="correct", correctness=Correctness(trials=5, passed=5), timing=t).to_dict())
    assert verdicts.timing_speed(v.timing) == "2.10× ± 25 % faster than eager (uncertain: the machine was busy)"
    assert verdicts.timing_speed(v.timing, short=True) == "2.10× ± 25 % faster (uncertain)"
    assert verdicts.timing_speed(v.timing, "compiled") == "1.30× faster than torch.compile (uncertain: the machine was busy)"
    assert verdicts.uncertain_note(v.timing) == "uncertain: ± 25 % (the machine was busy)"
    # the figures first, why last (a Problems row cuts long lines)
    assert verdicts.describe(v) == ("2.10× ± 25 % faster than eager (0.41 ms vs 0.86 ms, uncertain), 1.30× faster "
                                    "than torch.compile (uncertain), correct on 5 trials — uncertain because the "
                                    "machine was busy")
    # uncertain without a figure or a reason still says so; a sure one with an interval is a plain number
    bare = Timing(speedup_eager=2.1, uncertain=True)
    assert verdicts.timing_speed(bare) == "2.10× faster than eager (uncertain)"
    assert verdicts.uncertain_note(bare) == "uncertain: interval wider than the target"
    sure = Timing(speedup_eager=2.1, speedup_ci_pct=0.5)
    assert verdicts.timing_speed(sure) == "2.10× faster than eager" and verdicts.uncertain_note(sure) == ""


def test_a_speedup_against_a_compile_not_ended_says_so_and_not_a_dash() -> None:
    t = Timing(candidate=TimingStats(0.41, 0.01), eager=TimingStats(0.86, 0.02), speedup_eager=2.1, compiled_pending=True)
    v = Verdict.from_dict(Verdict(status="correct", correctness=Correctness(trials=5, passed=5), timing=t).to_dict())
    assert v.timing is not None and v.timing.compiled_pending
    assert verdicts.timing_speed(v.timing, "compiled", short=True) == "not timed (not compiled yet)"
    assert verdicts.timing_speed(v.timing, "compiled") == \
        "not timed against torch.compile (the reference was not compiled yet)"
    assert verdicts.timing_speed(Timing(speedup_eager=2.1), "compiled") == "—"
    assert verdicts.describe(v) == "2.10× faster than eager (0.41 ms vs 0.86 ms), correct on 5 trials"


def test_plain_text_has_no_markdown() -> None:
    assert verdicts.plain("try more `samples`, or **a stronger model**: one ```python block") == \
        "try more 'samples', or a stronger model: one python block"


def test_the_eval_table_writes_speeds_in_words() -> None:
    """`kernel-lsp eval`'s text: the headline and the timing table say how fast in words; an uncertain speedup
    keeps its ± figure and its reason; the rest is the evaluator's own rendering."""
    from evaluator.verdict import Stage
    from kernel_lsp.cli.eval import render_verdict

    t = Timing(method="perf-counter", candidate=TimingStats(0.41, 0.01, min_ms=0.4, calls=30),
               eager=TimingStats(0.86, 0.02, min_ms=0.8, calls=30), compiled=TimingStats(0.5, 0.02, calls=30),
               speedup_eager=2.1, speedup_compiled=0.5 / 0.41, speedup_ci_pct=25.0, uncertain=True,
               noise="the machine was busy")
    v = Verdict(status="correct", message="correct (5/5 trials), 0.41 ms, 2.10x eager",
                stages=[Stage("parse", True, 0.01, "ModelNew found"),
                        Stage("time", True, 1.0, "median 0.41 ms over 30 calls (9 checked); 2.10x eager ± 25 %, "
                              "1.22x torch.compile")],
                correctness=Correctness(trials=5, passed=5, max_abs_err=0.0), timing=t)
    text = render_verdict(Verdict.from_dict(v.to_dict()), width=120)
    assert "verdict: CORRECT  2.10× ± 25 % faster than eager (0.41 ms vs 0.86 ms, uncertain)" in text, text
    assert "2.10x" not in text  # the evaluator's plain figure is not shown, in the headline or the stage note
    stages = text.split("stages")[1].split("correctness")[0]
    assert "2.10× ± 25 %" in stages and "25 % ±" not in stages and "± 25 % ±" not in stages, text
    assert "1.22x" not in text
    table = text.split("timing (")[1]
    assert "│ 2.10× ± 25 % faster (uncertain) " in table and "│ 1.22× faster (uncertain) " in table, table
    assert "not a figure to quote" not in table  # why it is uncertain: said once, in the headline
    assert " ".join(text.split()).count("the machine was busy") == 1, text
    assert "parse" in text and "correctness: 5 trials passed" in text


def test_how_a_trial_was_decided_survives_the_verdicts_round_trip() -> None:
    from evaluator.verdict import Correctness, Verdict

    v = Verdict(status="correct", correctness=Correctness(trials=7, passed=7, decided_by="float64"))
    assert Verdict.from_json(v.to_json()).correctness.decided_by == "float64"
    assert Verdict.from_dict({"status": "correct", "correctness": {"trials": 1}}).correctness.decided_by == ""
