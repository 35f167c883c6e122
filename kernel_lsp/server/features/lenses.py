"""Code lenses above each module: start a job, see a running one (click to cancel), accept the result (the best
candidate when it is correct and shown faster than eager), else insert the fastest correct one anyway."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lsprotocol import types

from ...config import Settings
from ...generation.errors import GenerationError
from ...generation.strategies import make_plan
from ...jobs.runners import STRATEGY_OF_KIND, quick_generate
from ...models import EMBEDDED_TOKENS_PER_S, is_embedded
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


def expectation(settings: Settings, kind: str) -> str:
    """' (embedded model: up to 7 min)': how long the model may write for a job of `kind`, for the embedded demo
    model (its samples x rounds x max_tokens at its speed on a CPU; checking each kernel comes on top); '' for
    any other model, whose speed the server does not know. Shown on the lenses of the long jobs (Best of n,
    Refine): *Generate kernel* with the embedded model is one sample (runners.quick_generate)."""
    if not is_embedded(settings.model, settings.endpoint):
        return ""
    samples, rounds = (1, 1) if quick_generate(settings, kind) else (None, None)
    if kind == "bestOfN":
        samples = settings.samples
    try:
        plan = make_plan(STRATEGY_OF_KIND.get(kind) or settings.strategy, settings_samples=settings.samples,
                         settings_rounds=settings.rounds, samples=samples, rounds=rounds)
    except GenerationError:
        return ""
    seconds = plan.samples * plan.rounds * settings.max_tokens / EMBEDDED_TOKENS_PER_S
    return f" (embedded model: up to {max(1, math.ceil(seconds / 60))} min)"


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
            s = ls.settings
            out.append(_lens(line, "⚡ Generate kernel", JOB_COMMANDS["generate"], arg))  # quick_generate: short
            if s.samples > 1:  # best of 1 is what Generate does
                out.append(_lens(line, f"Best of {s.samples}" + expectation(s, "bestOfN"), JOB_COMMANDS["bestOfN"],
                                 arg))
            if has_model_new:
                out.append(_lens(line, "Verify ModelNew", JOB_COMMANDS["verify"], arg))
                out.append(_lens(line, "Refine ModelNew" + expectation(s, "refine"), JOB_COMMANDS["refine"], arg))
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
