"""Diagnostics (source "kernel-lsp"), re-published whenever a document is re-analysed or a job on it publishes a
result or ends.

- Information on a module: the candidate offered, the fastest correct current one when it is shown faster than
  eager ("candidate 3: 1.84× faster than eager ..."), else what the fastest correct one is ("no kernel faster than
  eager yet: the fastest correct one, candidate 2, is 1.40× slower than eager ...").
- Warning on a module: the latest candidate failed (first compiler error or the mismatch).
- Warning on a module: its last job failed — a generation without a correct candidate, a profile or a check that
  could not finish — with what happened and what to try.
- On `ModelNew`: the check of the file's own ModelNew made on save (Error when it disagrees with Model),
  shown only while the file is the one that was checked.
- Hint on a module that has no get_inputs()/get_init_inputs() (a quick fix adds them).
- Information on the first line of a file too large to analyse, saying so.
Results for another version of the module (stale) are not shown here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lsprotocol import types

from ... import verdicts
from ...documents.store import MAX_ANALYSED_BYTES, DocState
from ...history import results, verify

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

SOURCE = "kernel-lsp"
MISSING_INPUTS = "missing-inputs"
JOB_FAILED = "job-failed"
TOO_LARGE = "too-large"
NOT_FASTER = "candidate-not-faster"


def _range(span) -> types.Range:
    return types.Range(types.Position(span.line, span.col), types.Position(span.end_line, span.end_col))


def too_large_message(doc: DocState) -> str:
    return (f"kernel-lsp: {doc.skipped}, over the {MAX_ANALYSED_BYTES >> 20} MB limit: not analysed, so no kernels "
            "are offered for its modules (move the module to a smaller file)")


def compute(ls: KernelLanguageServer, doc: DocState) -> list[types.Diagnostic]:
    out: list[types.Diagnostic] = []
    a = doc.analysis
    if doc.skipped:
        return [types.Diagnostic(types.Range(types.Position(0, 0), types.Position(0, 0)), too_large_message(doc),
                                 severity=types.DiagnosticSeverity.Information, source=SOURCE, code=TOO_LARGE)]
    if not a.modules:
        return out
    history = ls.services.history_if_exists()
    mn = a.model_new
    for m in a.references:
        if not a.has_inputs:
            missing = " / ".join(f + "()" for f in ("get_inputs", "get_init_inputs") if f not in a.functions)
            out.append(types.Diagnostic(
                _range(m.name_span), f"{m.name} has no {missing}: add them to generate kernels for it (quick fix)",
                severity=types.DiagnosticSeverity.Hint, source=SOURCE, code=MISSING_INPUTS,
                data={"module": m.name}))
            continue
        key = ls.docs.task_key(doc.uri, m.name)
        res = results.load(history, key, ls.docs.fingerprint(doc, m.name), ls.results_cache)
        best, latest = res.best, res.latest
        if best is not None:
            win = res.offered is not None
            out.append(types.Diagnostic(_range(m.name_span),
                                        results.success_line(best) if win else results.no_win_line(best),
                                        severity=types.DiagnosticSeverity.Information, source=SOURCE,
                                        code="candidate" if win else NOT_FASTER,
                                        data={"module": m.name, "candidate": best.number}))
        if latest is not None and not latest.correct and (best is None or latest.number > best.number):
            out.append(types.Diagnostic(_range(m.name_span), results.failure_line(latest),
                                        severity=types.DiagnosticSeverity.Warning, source=SOURCE,
                                        code="candidate-failed", data={"module": m.name, "candidate": latest.number}))
        for job in res.failed_jobs():
            out.append(types.Diagnostic(_range(m.name_span), results.failed_job_line(job),
                                        severity=types.DiagnosticSeverity.Warning, source=SOURCE, code=JOB_FAILED,
                                        data={"module": m.name, "job": job.id}))
        rec = verify.load(history, key) if mn is not None else None
        if mn is not None and rec is not None and rec.current(doc.text_hash):
            verdict = rec.verdict
            ok = results.is_correct(verdict)
            out.append(types.Diagnostic(
                _range(mn.name_span), f"ModelNew: {verdicts.describe(verdict)}{rec.accepted_note()}",
                severity=types.DiagnosticSeverity.Information if ok else types.DiagnosticSeverity.Error,
                source=SOURCE, code="verify", data={"module": m.name}))
    return out


class Diagnostics:
    """Publishes a document's diagnostics: for open documents, and for others once they had some (so they can
    be cleared)."""

    def __init__(self, ls: KernelLanguageServer):
        self.ls = ls
        self._published: set[str] = set()

    def refresh(self, uri: str) -> None:
        doc = self.ls.docs.known(uri)
        if doc is not None and (doc.open or uri in self._published):
            self._published.add(uri)
            self.publish(uri)

    def publish(self, uri: str) -> None:
        doc = self.ls.docs.get(uri)
        if doc is None or doc.pending is not None:
            return  # a large document's analysis is under way: published when it is back (document_analysed)
        try:
            diags = compute(self.ls, doc)
        except Exception:
            log.exception("computing diagnostics for %s failed", uri)
            return
        for d in diags:  # shown as plain text (the Problems panel shows backticks as they are)
            d.message = verdicts.plain(d.message)
        self.ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diags,
                                                                                version=doc.version))


def register(server: KernelLanguageServer) -> None:
    """Published when the server says a document changed (its analysis, or results for it)."""
    server.events.document.append(Diagnostics(server).refresh)
