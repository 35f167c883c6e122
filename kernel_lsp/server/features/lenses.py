"""Code lenses above each module: start a job, see a running one (click to cancel), accept the result (the best
candidate when it is correct and shown faster than eager), else insert the fastest correct one anyway."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from .. import edits, results
from ..workspace_state import MAX_ANALYSED_BYTES
from .accept import ACCEPT, ADD_INPUTS
from .commands import CANCEL, JOB_COMMANDS

if TYPE_CHECKING:
    from ...jobs import JobSnapshot
    from ..server import KernelLanguageServer


def _lens(line: int, title: str, command: str, arg: dict) -> types.CodeLens:
    rng = types.Range(types.Position(line, 0), types.Position(line, 0))
    return types.CodeLens(range=rng, command=types.Command(title=title, command=command, arguments=[arg]))


KIND_WORDS = {"bestOfN": "best-of-n"}


def job_lens_title(job: JobSnapshot, active: int = 1) -> str:
    """'$(sync~spin) generate: round 1/3: profile-guided prompt (812 prompt tokens) 12% — cancel': the running
    job's live step (the server asks the editor to refresh lenses while it changes)."""
    pct = f" {job.percentage}%" if job.percentage is not None else ""
    more = f" (+{active - 1} queued)" if active > 1 else ""
    return f"$(sync~spin) {KIND_WORDS.get(job.kind, job.kind)}: {job.message}{pct}{more} — cancel"


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
            out.append(_lens(line, job_lens_title(job, len(active)), CANCEL, {"jobId": job.id}))
        else:
            out.append(_lens(line, "⚡ Generate kernel", JOB_COMMANDS["generate"], arg))
            if ls.settings.samples > 1:  # best of 1 is what Generate does
                out.append(_lens(line, f"Best of {ls.settings.samples}", JOB_COMMANDS["bestOfN"], arg))
            if has_model_new:
                out.append(_lens(line, "Verify ModelNew", JOB_COMMANDS["verify"], arg))
                out.append(_lens(line, "Refine ModelNew", JOB_COMMANDS["refine"], arg))
            out.append(_lens(line, "Profile", JOB_COMMANDS["profile"], arg))
        best = results.load(history, key, ls.docs.fingerprint(doc, m.name), ls.results_cache).best
        if best is not None and not edits.holds_candidate(doc.text, best.source, best.number, m.name):
            # "Accept candidate 3 (…faster…)" for a win, "Insert candidate 2 anyway (…slower…)" for the rest
            out.append(_lens(line, results.accept_title(best), ACCEPT, {**arg, "candidate": best.number}))
    return out


def register(server: KernelLanguageServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(params: types.CodeLensParams) -> list[types.CodeLens]:
        await server.docs.ready(params.text_document.uri)
        return lenses(server, params.text_document.uri)
