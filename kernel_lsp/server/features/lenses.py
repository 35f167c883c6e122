"""Code lenses above each module: start a job, see a running one (click to cancel), accept the best result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from .. import results
from ..workspace_state import MAX_ANALYSED_BYTES
from .accept import ACCEPT, ADD_INPUTS
from .commands import CANCEL, JOB_COMMANDS

if TYPE_CHECKING:
    from ..server import KernelLanguageServer


def _lens(line: int, title: str, command: str, arg: dict) -> types.CodeLens:
    rng = types.Range(types.Position(line, 0), types.Position(line, 0))
    return types.CodeLens(range=rng, command=types.Command(title=title, command=command, arguments=[arg]))


def lenses(ls: KernelLanguageServer, uri: str) -> list[types.CodeLens]:
    doc = ls.docs.get(uri)
    if doc is None:
        return []
    if doc.skipped:  # say why there is nothing to click (the title alone: no command to run)
        return [_lens(0, f"kernel-lsp: {doc.skipped}, over the {MAX_ANALYSED_BYTES >> 20} MB limit: not analysed",
                      "", {})]
    a = doc.analysis
    out: list[types.CodeLens] = []
    history = ls.services.history_if_exists()
    has_model_new = a.model_new is not None
    for m in a.references:
        line = m.name_span.line
        arg = {"uri": uri, "module": m.name}
        if not a.has_inputs:
            out.append(_lens(line, "kernel-lsp: add get_inputs() / get_init_inputs()", ADD_INPUTS, arg))
            continue
        key = ls.docs.task_key(uri, m.name)
        active = ls.jobs.active(key)
        if active:
            job = active[0]
            pct = f" {job.percentage}%" if job.percentage is not None else ""
            more = f" (+{len(active) - 1} queued)" if len(active) > 1 else ""
            out.append(_lens(line, f"$(sync~spin) {job.kind}: {job.message}{pct}{more} — cancel", CANCEL,
                             {"jobId": job.id}))
        else:
            out.append(_lens(line, "⚡ Generate kernel", JOB_COMMANDS["generate"], arg))
            out.append(_lens(line, f"Best of {ls.settings.samples}", JOB_COMMANDS["bestOfN"], arg))
            if has_model_new:
                out.append(_lens(line, "Verify ModelNew", JOB_COMMANDS["verify"], arg))
                out.append(_lens(line, "Refine ModelNew", JOB_COMMANDS["refine"], arg))
            out.append(_lens(line, "Profile", JOB_COMMANDS["profile"], arg))
        best = results.load(history, key, ls.docs.fingerprint(doc, m.name), ls.results_cache).best
        if best is not None:
            out.append(_lens(line, f"Accept candidate {best.number} ({results.fmt_x(best.speedup_eager)})", ACCEPT,
                             {**arg, "candidate": best.number}))
    return out


def register(server: KernelLanguageServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(params: types.CodeLensParams) -> list[types.CodeLens]:
        await server.docs.ready(params.text_document.uri)
        return lenses(server, params.text_document.uri)
