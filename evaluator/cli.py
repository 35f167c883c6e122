"""`kernel-lsp eval REF CAND [--json] [--profile]`: the verdict on stdout, progress on stderr.

Exit status: 0 when the candidate is correct, 1 when it is not, 2 when the reference does not run (checked first,
before the candidate is compiled; other bad usage is kernel_lsp.cli's).
Also runnable alone: `python -m evaluator.cli REF CAND [--json] [--profile] [--device cpu]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from .settings import EvalSettings
from .verdict import Verdict

try:
    from rich.text import Text
except ImportError:  # pragma: no cover
    Text = str  # type: ignore[assignment,misc]


MIN_WIDTH = 80


def terminal_width(stream: Any = None) -> int:
    """The width to print at: the terminal's when `stream` (stdout by default) is one, else COLUMNS, else 80;
    never under 80."""
    stream = sys.stdout if stream is None else stream
    width = 0
    try:
        if stream.isatty():
            width = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        width = 0
    if not width:
        try:
            width = int(os.environ.get("COLUMNS", ""))
        except ValueError:
            width = 0
    return max(MIN_WIDTH, width)


def plain_console(file: Any, width: int) -> Any:
    from rich.console import Console

    return Console(file=file, width=width, force_terminal=False, color_system=None, soft_wrap=False)


def _fmt_s(x: float) -> str:
    return f"{x:.2f} s" if x >= 0.01 else f"{x * 1e3:.1f} ms"


def render(v: Verdict, width: int | None = None) -> str:
    """A plain-text verdict (rich tables when rich is importable), `width` columns wide (default: the terminal's,
    see `terminal_width`). Each thing is said once: a failed stage whose note is the verdict's message points to
    it instead of repeating it."""
    try:
        from rich.table import Table
    except ImportError:  # pragma: no cover
        return _render_plain(v)
    import io

    buf = io.StringIO()
    con = plain_console(buf, width or terminal_width())
    con.print(f"verdict: {v.status.upper()}  {v.message}", markup=False)
    if v.device:
        con.print(f"device: {v.device}   source: {v.source_hash}   wall: {_fmt_s(v.seconds)}", markup=False)
    t = Table(title="stages", show_lines=False)
    for col in ("stage", "result", "time", "note"):
        t.add_column(col, overflow="fold" if col == "note" else "ellipsis", no_wrap=col != "note")
    for s in v.stages:
        note = "the verdict above" if not s.ok and s.message and s.message == v.message else s.message
        t.add_row(s.name, "skipped" if s.skipped else ("ok" if s.ok else "FAILED"), _fmt_s(s.seconds),
                  Text(note))
    con.print(t)
    if v.correctness:
        con.print(correctness_line(v.correctness), markup=False)
    if v.timing and v.timing.candidate:
        tt = Table(title=f"timing ({v.timing.method})")
        for col in ("what", "median ms", "IQR ms", "min ms", "calls", "speedup"):
            tt.add_column(col)
        for name, st, sp in (("candidate", v.timing.candidate, None), ("eager", v.timing.eager, v.timing.speedup_eager),
                             ("torch.compile", v.timing.compiled, v.timing.speedup_compiled)):
            if st:
                tt.add_row(name, f"{st.median_ms:.4g}", f"{st.iqr_ms:.3g}", f"{st.min_ms:.4g}", str(st.calls),
                           f"{sp:.2f}x" if sp else "")
        con.print(tt)
        if v.timing.pct_of_limit:
            con.print(f"roofline: {v.timing.roofline_ms:.4g} ms lower bound, candidate at "
                      f"{v.timing.pct_of_limit:.1f}% of the hardware limit")
    if v.profile:
        _render_profile(con, v.profile, "profile")
    for f in v.findings:
        con.print(f"{f.severity}: line {f.line}: [{f.rule}] {f.message}", markup=False)
    for w in v.warnings:
        con.print(f"warning: {w}", markup=False)
    if v.compiler_log:
        con.print("compiler log (first errors):", markup=False)
        con.print(v.compiler_log, markup=False)
    if v.detail:
        con.print(v.detail, markup=False)
    if v.log:
        con.print("worker output (tail):", markup=False)
        con.print(v.log, markup=False)
    if v.not_checked:
        con.print(f"checked: {', '.join(v.checked) or '-'}; not checked: {', '.join(v.not_checked)}", markup=False)
    return buf.getvalue()


def correctness_line(c: Any) -> str:
    """The trials in one line: which trial of how many failed, or how many passed; the settings' tolerances; the
    figures there are (none is printed as 'None')."""
    planned = c.planned or c.trials
    if c.failed_trial is not None:
        before = c.passed
        head = (f"correctness: trial {c.failed_trial + 1} of {planned} failed"
                + (f" ({before} passed before it)" if before else ""))
    else:
        head = f"correctness: {c.passed} trial{'s' if c.passed != 1 else ''} passed"
    figures = []
    if c.max_abs_err is not None:
        figures.append(f"max abs err {c.max_abs_err:.3g}" + (f" at {c.where}" if c.where else ""))
    if c.max_rel_err is not None and c.failed_trial is None:
        figures.append(f"max rel err {c.max_rel_err:.3g}")
    figures.append(f"settings atol={c.atol:g} rtol={c.rtol:g}")
    skipped = [f"skipped: {x}" for x in c.skipped or []]
    return "; ".join([head, *figures, *skipped])


def _render_profile(con, p, title: str) -> None:
    from rich.table import Table

    t = Table(title=f"{title}: {p.device}, total {p.total_ms:.4g} ms")
    for col in ("op", "ms", "share", "calls", "shapes"):
        t.add_column(col)
    for op in p.ops:
        t.add_row(op.name, f"{op.device_ms:.4g}", f"{op.share * 100:.1f}%", str(op.calls), op.shapes[:60])
    con.print(t)
    if p.roofline_ms:
        con.print(f"roofline: {p.roofline_ms:.4g} ms ({p.bound}-bound; {p.bytes_moved or 0:.3g} bytes, "
                  f"{p.flops or 0:.3g} FLOPs)")


def _render_plain(v: Verdict) -> str:  # pragma: no cover
    lines = [f"verdict: {v.status.upper()}  {v.message}"]
    lines += [f"  {s.name:8} {'ok' if s.ok else 'FAILED':7} {_fmt_s(s.seconds):>9}  {s.message}" for s in v.stages]
    return "\n".join(lines) + "\n"


def run_eval(ref: Path, cand: Path, settings: EvalSettings, as_json: bool, profile: bool,
             sources: tuple[str, str] | None = None, render_verdict: Any = None) -> int:
    """`sources`: the two texts, already read and checked by the caller (else read here, as UTF-8);
    `render_verdict`: the verdict in words for people (kernel-lsp's own wording; else this module's). Raises
    ReferenceFailed, before any candidate is compiled, when the reference does not run."""
    from .api import Evaluator, EvaluatorError

    ref_src, cand_src = sources or (Path(ref).read_text(encoding="utf-8"), Path(cand).read_text(encoding="utf-8"))

    def progress(stage: str, message: str) -> None:
        if not as_json:
            print(f"[{stage}] {message}", file=sys.stderr, flush=True)

    with Evaluator(settings) as ev:
        # ReferenceFailed (the caller's input) before the candidate is compiled; on a terminal a transient line
        # meanwhile, so that a failure is the one line the caller prints.
        live = not as_json and sys.stderr.isatty()
        if live:
            print("[reference] running the reference once", end="", file=sys.stderr, flush=True)
        try:
            ev.check_reference(ref_src)
        finally:
            if live:
                print("\r\033[K", end="", file=sys.stderr, flush=True)
        v = ev.evaluate(ref_src, cand_src, on_stage=progress)
        ref_profile = None
        if profile:
            try:
                ref_profile = ev.profile(ref_src)
            except EvaluatorError as e:
                print(f"kernel-lsp: profile of the reference failed: {e}", file=sys.stderr)
    if as_json:
        d = v.to_dict()
        if ref_profile is not None:
            d["reference_profile"] = dataclasses.asdict(ref_profile)
        import json

        print(json.dumps(d, indent=2))
    else:
        width = terminal_width(sys.stdout)
        sys.stdout.write((render_verdict or render)(v, width=width))
        if ref_profile is not None:
            _render_profile(plain_console(sys.stdout, width), ref_profile, "reference profile")
    return 0 if v.ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluator.cli")
    p.add_argument("reference")
    p.add_argument("candidate")
    p.add_argument("--json", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--device", default="auto")
    p.add_argument("--no-compiled", action="store_true", help="skip timing torch.compile of the reference")
    a = p.parse_args(argv)
    for f in (a.reference, a.candidate):
        if not Path(f).is_file():
            print(f"evaluator: no such file: {f}", file=sys.stderr)
            return 2
    s = EvalSettings(device=a.device, time_compiled=not a.no_compiled)
    from .api import ReferenceFailed

    try:
        return run_eval(Path(a.reference), Path(a.candidate), s, a.json, a.profile)
    except ReferenceFailed as e:
        print(f"evaluator: reference {a.reference}: {e.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
