"""Hover on a module's name: every candidate in a Markdown table (★ on the one offered: the fastest correct one, when
it is shown faster than eager), the profile's top operators, the device."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ... import verdicts
from ...documents.analysis import HARNESS
from ...history import results, verify

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

TOP_OPS = 8


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}%"


def _err(x: float | None) -> str:
    return "—" if x is None else f"{x:.2g}"


def markdown(ls: KernelLanguageServer, uri: str, module: str) -> str:
    doc = ls.docs.get(uri)
    assert doc is not None
    history = ls.services.history_if_exists()
    key = ls.docs.task_key(uri, module)
    fp = ls.docs.fingerprint(doc, module)
    res = results.load(history, key, fp, ls.results_cache)
    lines = [f"**kernel-lsp — {module}**", ""]
    devices: set[str] = set()
    if res.candidates:
        lines += ["| # | round | strategy | status | max err | ms | vs eager | vs torch.compile | % of limit |",
                  "|---:|---:|---|---|---:|---:|---:|---:|---:|"]
        notes: list[str] = []
        offered, best = res.offered, res.best
        for c in res.candidates:
            v = c.verdict
            t = v.timing if v else None
            if t and t.device:
                devices.add(t.device)
            status = verdicts.status_label(c.status, v) + (" (stale)" if res.stale(c) else "")
            star = " ★" if offered is not None and c.id == offered.id else ""
            lines.append(f"| {c.number}{star} | {c.round} | {c.strategy or '—'} | {status} | "
                         f"{_err(v.correctness.max_abs_err if v and v.correctness else None)} | "
                         f"{results.fmt_ms(c.ms)} | {results.speed(c, short=True)} | "
                         f"{results.speed(c, 'compiled', short=True)} | {_pct(t.pct_of_limit if t else None)} |")
            if c.speedup_eager and verdicts.uncertain_note(t):
                notes.append(f"candidate {c.number} {verdicts.uncertain_note(t)}")
            if c.correct and verdicts.library_only(v):
                notes.append(f"candidate {c.number} {verdicts.LIBRARY_ONLY}: its speed is PyTorch's, not a kernel "
                             "of its own")
        if notes:
            lines += ["", "_" + "; ".join(notes) + "._"]
        if offered is None and best is not None:  # a finding, not a result: said as such, and how to take it
            text = verdicts.no_win(best.number, best.verdict.timing if best.verdict else None)
            lines += ["", f"**{text[0].upper()}{text[1:]}**: not offered as the result "
                      f"(*Insert candidate {best.number} anyway* puts it in the file)."]
        stale = sum(1 for c in res.candidates if res.stale(c))
        if stale:
            lines += ["", f"_{stale} stale: made for an earlier version of {module}, not current._"]
    own = _own_model_new(ls, doc, key, history, devices)
    if own:
        lines += ([""] if res.candidates else []) + own
    failed = res.failed_jobs()
    for job in failed:
        what, why = results.failed_job(job)
        lines += ([""] if lines[-1] else []) + [f"**Last {what}**: {why}"]
    if not res.candidates and not own and not failed:
        lines.append(_nothing_yet(doc.analysis, module))
    prof = history.profile(key, fp) if history is not None else None
    if prof is not None and prof.ops:
        lines += ["", f"**Profile** ({prof.total_ms:.3g} ms total"
                  + (f", {prof.bound}-bound" if prof.bound else "")
                  + (f", roofline {prof.roofline_ms:.3g} ms" if prof.roofline_ms else "") + ")", "",
                  "| operator | device ms | share | calls | shapes |", "|---|---:|---:|---:|---|"]
        for op in prof.ops[:TOP_OPS]:
            lines.append(f"| `{op.name}` | {op.device_ms:.3g} | {op.share * 100:.0f}% | {op.calls} | "
                         f"{op.shapes.replace('|', '/') or '—'} |")
    gpu = prof.gpu if prof is not None else {}
    if gpu:
        lines += ["", device_line(gpu)]
    elif devices or (prof is not None and prof.device):
        lines += ["", "**Device**: " + ", ".join(sorted(devices | ({prof.device} if prof and prof.device else set())))]
    return "\n".join(lines)


def _nothing_yet(analysis, module: str) -> str:
    """What to do first: Generate, or, in a file without the functions that make the inputs, what is missing (the
    Generate lens is not there then)."""
    missing = [f"`{name}()`" for name in HARNESS if name not in analysis.functions]
    if not missing:
        return "No candidates yet: use *Generate kernel* above the class."
    return (f"No candidates yet: {module} cannot be run without {' and '.join(missing)}, which this file does not "
            f"define (they make {module}'s inputs and constructor arguments). Use *kernel-lsp: add get_inputs() / "
            "get_init_inputs()* above the class, then *Generate kernel*.")


def _figure(x: float, unit: str) -> str:
    return f"{x:.0f} {unit}" if x >= 10 else f"{x:.3g} {unit}"


def device_line(info: dict) -> str:
    """'**GPU**: NVIDIA H200, sm 9.0, 4020 GB/s, 826 TFLOP/s' or '**Device**: cpu, 17 GB/s, 0.31 TFLOP/s': a GPU
    only when it is one (it has a compute capability or a CUDA name), and no figure rounded to 0."""
    name = str(info.get("name") or "")
    is_gpu = bool(info.get("capability")) or name.lower().startswith(("cuda", "nvidia"))
    facts = [name]
    if info.get("capability"):
        facts.append(f"sm {info['capability']}")
    if info.get("bandwidth_gbs"):
        facts.append(_figure(float(info["bandwidth_gbs"]), "GB/s"))
    if info.get("peak_tflops"):
        facts.append(_figure(float(info["peak_tflops"]), "TFLOP/s"))
    return f"**{'GPU' if is_gpu else 'Device'}**: " + ", ".join(f for f in facts if f)


def _median(stats) -> str:
    return "—" if stats is None else f"{stats.median_ms:.3g}"


def _own_model_new(ls: KernelLanguageServer, doc, key: str, history, devices: set[str]) -> list[str]:
    """The last check of the file's own ModelNew (verify on save / *Verify ModelNew*), when the file holds one."""
    if doc.analysis.model_new is None:
        return []
    rec = verify.load(history, key)
    if rec is None:
        return ["**ModelNew in this file**: not checked yet (save the file, or run *Verify ModelNew*)."]
    v, current = rec.verdict, rec.current(doc.text_hash)
    t = v.timing
    if t and t.device:
        devices.add(t.device)
    row = [f"**ModelNew in this file**{'' if current else ' (stale: the file changed since)'}: "
           + verdicts.describe(v) + rec.accepted_note()]
    if t and t.candidate:
        row += ["", "| ModelNew ms | eager ms | torch.compile ms | IQR ms | calls |", "|---:|---:|---:|---:|---:|",
                f"| {_median(t.candidate)} | {_median(t.eager)} | {_median(t.compiled)} | {t.candidate.iqr_ms:.2g} | "
                f"{t.candidate.calls} |"]
    return row


def hover_at(ls: KernelLanguageServer, uri: str, pos: types.Position) -> types.Hover | None:
    doc = ls.docs.get(uri)
    if doc is None or doc.skipped:
        return None
    for m in doc.analysis.references:
        s = m.name_span
        if s.line == pos.line and s.col <= pos.character <= s.end_col:
            rng = types.Range(types.Position(s.line, s.col), types.Position(s.end_line, s.end_col))
            return types.Hover(types.MarkupContent(types.MarkupKind.Markdown, markdown(ls, uri, m.name)), rng)
    return None


def register(server: KernelLanguageServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(params: types.HoverParams) -> types.Hover | None:
        await server.docs.ready(params.text_document.uri)
        return hover_at(server, params.text_document.uri, params.position)
