"""`kernel-lsp eval REF CAND`: the oracle's verdict as text, its speeds in the words used everywhere
(kernel_lsp/verdicts.py): "1.58× slower than eager", and an uncertain speedup with its ± figure and why, never
as a plain number. The evaluator's own renderer (`python -m evaluator.cli`) draws the stages, correctness, profile,
findings and logs; the headline and the timing table are written here. `--json` prints the verdict as it is.
"""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

from evaluator.cli import plain_console, render, terminal_width
from evaluator.settings import EvalSettings
from evaluator.verdict import Timing, Verdict

from .. import verdicts


def render_verdict(v: Verdict, width: int | None = None) -> str:
    """The verdict for people, `width` columns wide (default: the terminal's). Why a speedup is uncertain is said
    once: in the headline when it is there, else under the timing table; the stage notes and table cells only
    mark the figure uncertain."""
    from rich.table import Table

    width = width or terminal_width()
    t = v.timing
    message = verdicts.describe(v) if v.ok else v.message
    stages = [dataclasses.replace(s, message=_worded(s.message, t)) if s.name == "time" else s for s in v.stages]
    text = render(dataclasses.replace(v, timing=None, message=message, stages=stages), width=width)
    if t is None or t.candidate is None:
        return text
    buf = io.StringIO()
    con = plain_console(buf, width)
    table = Table(title=f"timing ({t.method})")
    for col in ("what", "median ms", "IQR ms", "min ms", "calls", "candidate vs it"):
        table.add_column(col)
    rows = (("candidate", t.candidate, ""), ("eager", t.eager, verdicts.timing_speed(t, "eager", short=True)),
            ("torch.compile", t.compiled, verdicts.timing_speed(t, "compiled", short=True)))
    for name, st, speed in rows:
        if st is not None:
            table.add_row(name, f"{st.median_ms:.4g}", f"{st.iqr_ms:.3g}", f"{st.min_ms:.4g}", str(st.calls),
                          "" if speed == "—" else speed)
    con.print(table)
    note = verdicts.uncertain_note(t)
    if note and not (t.noise and t.noise in message):
        con.print(f"speedup {note}: not a figure to quote", markup=False)
    if t.pct_of_limit:
        con.print(f"roofline: {t.roofline_ms:.4g} ms lower bound, candidate at {t.pct_of_limit:.1f}% of the "
                  "hardware limit")
    return text + buf.getvalue()


_PLAIN_SPEED = re.compile(r"\b\d+(?:\.\d+)?x (eager|torch\.compile)\b(?: ± \d+(?:\.\d+)? %)?")


def _worded(note: str, t: Timing | None) -> str:
    """The oracle's stage note with its plain '0.44x eager' written as everywhere else ('(uncertain)' without the
    reason: the headline or the note under the table gives it)."""
    if t is None:
        return note
    return _PLAIN_SPEED.sub(lambda m: verdicts.timing_speed(t, "eager" if m.group(1) == "eager" else "compiled",
                                                            why=False), note)


class EvalInputError(Exception):
    """An input the evaluation cannot use (the reference does not run): the shell prints it as one line."""


def run_eval(ref: Path, cand: Path, settings: EvalSettings, *, as_json: bool, profile: bool,
             sources: tuple[str, str]) -> int:
    """Exit status 0 when the candidate is correct, 1 when it is not (the evaluator's own run, in kernel-lsp's
    words); a reference that does not run is an EvalInputError (one line, exit 2), found before anything is
    compiled."""
    from evaluator.api import ReferenceFailed
    from evaluator.cli import run_eval as evaluator_run_eval

    from ..tasks import reference_failure

    try:
        return evaluator_run_eval(ref, cand, settings, as_json, profile, sources=sources,
                                  render_verdict=render_verdict)
    except ReferenceFailed as e:  # the reference is checked first: nothing was compiled
        raise EvalInputError(f"reference {ref}: {reference_failure('Model', e.message)}") from None
