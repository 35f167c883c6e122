"""Code lenses above each module: start a job, see a running one (click to cancel), accept the result (the best
candidate when it is correct and shown faster than eager), else insert the fastest correct one anyway."""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

from lsprotocol import types

from ...config import Settings
from ...documents import edits
from ...documents.store import MAX_ANALYSED_BYTES
from ...generation.errors import GenerationError
from ...generation.strategies import make_plan
from ...history import results
from ...jobs.runners import STRATEGY_OF_KIND, quick_generate
from ...models import EMBEDDED_TOKENS_PER_S, is_embedded
from .accept import ACCEPT, ADD_INPUTS
from .commands import CANCEL, JOB_COMMANDS

if TYPE_CHECKING:
    from ...jobs import JobSnapshot
    from ..server import KernelLanguageServer

LENS_TICK_S = 1.0  # how often a running job's lens is looked at (refreshed only when its title changed)


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


class LensRefresher:
    """Asks the editor to refresh the code lenses (`workspace/codeLens/refresh`) when they may read differently,
    and about once a second while a job runs: the editor does not poll code lenses, so the spinning lens of a
    running job shows its live step only when the server asks. Asked again only when the title of some running
    job's lens changed since the last refresh; the ticker stops when no job runs."""

    def __init__(self, ls: KernelLanguageServer):
        self.ls = ls
        self._timer: asyncio.TimerHandle | None = None  # the live-step ticker, while a job runs
        self._shown: tuple[tuple[str, str], ...] = ()  # the running jobs' lens titles at the last refresh
        self._closed = False
        self.refreshes = 0  # workspace/codeLens/refresh requests sent (debugInfo)

    def _supported(self) -> bool:
        return self.ls.client_supports("workspace", "code_lens", "refresh_support")

    def refresh(self) -> None:
        if self._supported() and not self._closed:
            self._shown = self._titles()
            self.refreshes += 1
            self.ls.workspace_code_lens_refresh(None)
            if self._shown:
                self._ensure_ticker()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _ensure_ticker(self) -> None:
        loop = self.ls.loop
        if self._timer is None and loop is not None and not loop.is_closed() and self._supported():
            self._timer = loop.call_later(LENS_TICK_S, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self._closed or not self.ls.jobs.active():
            return
        if self._titles() != self._shown:
            self.refresh()
        self._ensure_ticker()

    def _titles(self) -> tuple[tuple[str, str], ...]:
        """(task key, lens title) of each module's running job, as `lenses()` writes them."""
        by_key: dict[str, list[JobSnapshot]] = {}
        for s in self.ls.jobs.active():
            by_key.setdefault(s.key, []).append(s)
        return tuple(sorted((k, job_lens_title(js[0], len(js))) for k, js in by_key.items()))


def register(server: KernelLanguageServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(params: types.CodeLensParams) -> list[types.CodeLens]:
        await server.docs.ready(params.text_document.uri)
        return lenses(server, params.text_document.uri)

    refresher = LensRefresher(server)
    server.events.lenses.append(refresher.refresh)
    server.events.closing.append(refresher.close)
    server.events.debug["lensRefreshes"] = lambda: refresher.refreshes
