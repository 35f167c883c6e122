"""The words for verdicts: one place that turns the oracle's `Verdict` into text for people (job messages,
diagnostics, hovers, the CLI's tables). No LSP types here.

The oracle may grow new statuses: every function below has a generic wording for a status it does not know
(its name with spaces), so an unknown status reads plainly instead of failing.
"""

from __future__ import annotations

import re

from evaluator.verdict import CORRECT, INCORRECT, Timing, Verdict

# Short labels for tables and parentheses ("candidate 3 failed (compile error)"). `not_a_kernel`: older records.
_LABELS = {"parse_error": "parse error", "compile_error": "compile error", "compile_timeout": "compile timeout",
           "runtime_error": "runtime error", "not_a_kernel": "not a kernel"}
# What a status means, where its label alone does not say it.
_MEANINGS = {
    "tampered": "the candidate changed the oracle's or torch's state",
    "not_a_kernel": "no custom kernel does the work",
    "rejected": "the static screen refused it",
    "crashed": "the worker running it crashed",
    "timeout": "it ran past its time limit",
    "compile_timeout": "its build ran past the compile timeout",
    "infra_error": "the oracle could not check it (not the candidate's fault)",
}
_TRIAL_PREFIX = re.compile(r"^trial (\d+)(?: of (\d+))?(?: \((.*?)\))?: ")


def label(status: str) -> str:
    """'compile error', 'not a kernel', ...; any status the oracle adds later reads as its name with spaces."""
    return _LABELS.get(status, status.replace("_", " "))


# A correct candidate whose library operators do every class of the reference's work (kernel finding library_only).
LIBRARY_ONLY = "uses PyTorch operators only"


def library_only(v: Verdict | None) -> bool:
    """Correct, with PyTorch (library) operators doing the reference's work rather than its own code."""
    return v is not None and v.library_only


def status_label(status: str, v: Verdict | None = None) -> str:
    """`label`, and for a library-only correct candidate what its kernel finding says: 'correct (uses PyTorch
    operators only)'."""
    return label(status) + (f" ({LIBRARY_ONLY})" if status == CORRECT and library_only(v) else "")


def _ms(x: float) -> str:
    return f"{x:.2f}" if x >= 0.1 else f"{x:.3g}"


# --- speeds: one way to write them everywhere (lens, diagnostic, hover, tables, job messages) ------------------
_AGAINST = {"eager": "eager", "compiled": "torch.compile"}


def factor(x: float) -> str:
    """'1.84×', '12.3×', '140×': a speed factor, always at least 1 (the word says which way)."""
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×" if x < 100 else f"{x:.0f}×"


def speed(speedup: float | None, against: str = "eager", *, ci_pct: float | None = None, uncertain: bool = False,
          noise: str = "", short: bool = False) -> str:
    """How fast a candidate is against a baseline ("eager" or "compiled"), in words:

    - '1.84× faster than eager', '1.07× slower than torch.compile';
    - uncertain (its interval is wider than the target): '2.10× ± 25 % faster than eager (uncertain: the machine
      was busy)', never a plain number;
    - `short` (a table cell, whose column names the baseline): '1.07× slower', '2.10× ± 25 % faster (uncertain)';
    - no figure: '—'."""
    if speedup is None or speedup <= 0:
        return "—"
    word = "faster" if speedup >= 1 else "slower"
    x = speedup if speedup >= 1 else 1 / speedup
    pm = f" ± {ci_pct:.0f} %" if uncertain and ci_pct is not None else ""
    text = f"{factor(x)}{pm} {word}" + ("" if short else f" than {_AGAINST.get(against, against)}")
    if uncertain:
        text += " (uncertain)" if short or not noise else f" (uncertain: {noise})"
    return text


def timing_speed(t: Timing | None, against: str = "eager", *, short: bool = False, why: bool = True) -> str:
    """`speed` of a verdict's timing. The interval is the eager speedup's; the torch.compile figure of an
    uncertain timing is marked uncertain too (same run, same noise), without a ± figure of its own. `why=False`:
    '(uncertain)' without the reason (a lens title, where the hover and the diagnostic give it)."""
    if t is None:
        return "—"
    value = t.speedup_eager if against == "eager" else t.speedup_compiled
    if against != "eager" and value is None and t.compiled_pending:
        return "not timed (not compiled yet)" if short else \
            "not timed against torch.compile (the reference was not compiled yet)"
    return speed(value, against, ci_pct=t.speedup_ci_pct if against == "eager" else None, uncertain=t.uncertain,
                 noise=t.noise if why else "", short=short)


def not_faster(t: Timing | None, *, ms: bool = False) -> str:
    """The speed of a correct candidate that is not shown faster than eager (`history.ranking.shown_faster` says
    which), worded so that it never reads as a win: '1.40× slower than eager', '1.40× ± 20 % slower than eager,
    uncertain', '1.02× ± 8 % faster than eager, not shown faster' (its interval reaches 1), 'not timed'. `ms`: the
    two times after the factor ('1.40× slower than eager (0.31 ms vs 0.22 ms)')."""
    if t is None or not t.speedup_eager or t.speedup_eager <= 0:
        return "not timed"
    sp = t.speedup_eager
    x, word = (sp, "faster") if sp >= 1 else (1 / sp, "slower")
    pm = f" ± {t.speedup_ci_pct:.0f} %" if t.speedup_ci_pct is not None and (t.uncertain or sp >= 1) else ""
    times = f" ({_ms(t.candidate.median_ms)} ms vs {_ms(t.eager.median_ms)} ms)" if ms and t.candidate and t.eager \
        else ""
    tail = (", uncertain" if t.uncertain and not pm else "") + ", not shown faster" if sp >= 1 \
        else ", uncertain" if t.uncertain else ""
    return f"{factor(x)}{pm} {word} than eager{times}{tail}"


def no_win(number: int, t: Timing | None) -> str:
    """Why no candidate is offered, and how close the best came: 'no kernel faster than eager: the fastest correct
    one, candidate 2, is 1.40× slower than eager (0.31 ms vs 0.22 ms)'; 'no kernel shown faster than eager: …
    candidate 2, is 1.02× ± 8 % faster than eager (0.41 ms vs 0.42 ms), not shown faster'."""
    sp = t.speedup_eager if t is not None else None
    shown = "shown " if not sp or sp >= 1 else ""
    what = not_faster(t, ms=True)
    return f"no kernel {shown}faster than eager: the fastest correct one, candidate {number}, " + \
        ("was not timed" if what == "not timed" else f"is {what}")


def uncertain_note(t: Timing | None) -> str:
    """'uncertain: ± 25 % (the machine was busy)' for a footnote under a table of short speeds; '' when sure."""
    if t is None or not t.uncertain:
        return ""
    pm = f"± {t.speedup_ci_pct:.0f} %" if t.speedup_ci_pct is not None else "interval wider than the target"
    return f"uncertain: {pm}" + (f" ({t.noise})" if t.noise else "")


def speed_and_trials(v: Verdict) -> str:
    """'1.84× faster than eager (0.41 ms vs 0.76 ms), 1.20× faster than torch.compile, correct on 5 trials' (a
    library-only candidate: ', uses PyTorch operators only' after the trials).
    Uncertain: the figures first, why last (a Problems row cuts long lines): '2.10× ± 25 % faster than eager
    (0.41 ms vs 0.86 ms, uncertain), 1.30× faster than torch.compile (uncertain), correct on 5 trials — uncertain
    because the machine was busy'."""
    t = v.timing
    parts: list[str] = []
    if t and t.speedup_eager:
        head = timing_speed(t, why=False)
        if t.candidate and t.eager:
            ms = f"{_ms(t.candidate.median_ms)} ms vs {_ms(t.eager.median_ms)} ms"
            head = head.replace(" (uncertain)", f" ({ms}, uncertain)") if t.uncertain else head + f" ({ms})"
        parts.append(head)
    if t and t.speedup_compiled:
        parts.append(timing_speed(t, "compiled", why=False))
    passed = v.correctness.passed if v.correctness else None
    parts.append(f"correct on {passed} trials" if passed else "correct")
    if library_only(v):
        parts.append(LIBRARY_ONLY)
    why = f" — uncertain because {t.noise}" if t and t.uncertain and t.noise and t.speedup_eager else ""
    return ", ".join(parts) + why


def mismatch(v: Verdict) -> str:
    """'disagrees with Model: max abs error 1 (rel 0.5) at output[0][3, 1], trial 1 of 5 (ramped inputs) — …'.

    The oracle's message starts "trial 1 of 5 (inputs: ...): "; that prefix is folded into ours (one trial number,
    counted from 1, out of the trials planned) instead of being repeated."""
    c = v.correctness
    if c is None:
        return "disagrees with Model"
    message = c.message.splitlines()[0] if c.message else ""
    how = ""
    m = _TRIAL_PREFIX.match(message)
    planned = c.trials
    if m:
        how = f" ({m.group(3)})" if m.group(3) else ""
        planned = int(m.group(2)) if m.group(2) else planned
        message = message[m.end():]
    trial = f", trial {c.failed_trial + 1} of {planned}{how}" if c.failed_trial is not None else how
    err = f"max abs error {c.max_abs_err:.3g}" if c.max_abs_err is not None else "outputs differ"
    rel = f" (rel {c.max_rel_err:.3g})" if c.max_rel_err is not None else ""
    where = f" at {c.where}" if c.where else ""
    return f"disagrees with Model: {err}{rel}{where}{trial}" + (f" — {message}" if message else "")


def first_error(v: Verdict) -> str:
    """The first compiler error, else the mismatch, else the verdict's message (one line)."""
    if v.compiler_log:
        for line in v.compiler_log.splitlines():
            if "error" in line.lower():
                return line.strip()[:300]
    if v.correctness and v.correctness.message:
        return v.correctness.message.splitlines()[0][:300]
    msg = v.message or next((s.message for s in v.stages if not s.ok and s.message), "")
    return msg.splitlines()[0][:300] if msg else ""


def describe(v: Verdict) -> str:
    """One line for a job message, a diagnostic or a hover: what the oracle found and why."""
    if v.status == CORRECT:
        return speed_and_trials(v)
    if v.status == INCORRECT:
        return mismatch(v)
    head = _MEANINGS.get(v.status, label(v.status))
    detail = first_error(v)
    return f"{head}: {detail}" if detail else head


def failure(v: Verdict) -> str:
    """Why a candidate failed, after its label: the mismatch, the meaning of the status, or its first error."""
    if v.status == INCORRECT:
        return mismatch(v)
    if v.status in _MEANINGS:
        return describe(v)
    return first_error(v)


_FENCE = re.compile(r"`{3,}")
_CODE = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"\*\*([^*\n]+)\*\*")


def plain(text: str) -> str:
    """The text without Markdown, for places that show text as it is (the Problems panel, a diagnostic, a
    message box): `samples` → 'samples', **x** → x, a ```python fence → python."""
    text = _FENCE.sub("", text)
    text = _CODE.sub(lambda m: f"'{m.group(1)}'", text)
    return _BOLD.sub(r"\1", text)

