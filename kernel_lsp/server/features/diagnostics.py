"""Diagnostics (source "kernel-lsp"), re-published whenever a document is re-analysed or a job on it ends.

- Information on a module: its best current candidate ("candidate 3: 1.84× faster than eager ...").
- Warning on a module: the latest candidate failed (first compiler error or the mismatch).
- On `ModelNew`: the check of the file's own ModelNew made on save (Error when it disagrees with Model),
  shown only while the file is the one that was checked.
- Hint on a module that has no get_inputs()/get_init_inputs() (a quick fix adds them).
Results for another version of the module (stale) are not shown here.
"""

from __future__ import annotations

import logging

from lsprotocol import types

from ... import verdicts
from .. import results
from ..server import KernelLanguageServer
from ..workspace_state import DocState

log = logging.getLogger(__name__)

SOURCE = "kernel-lsp"
MISSING_INPUTS = "missing-inputs"


def _range(span) -> types.Range:
    return types.Range(types.Position(span.line, span.col), types.Position(span.end_line, span.end_col))


def compute(ls: KernelLanguageServer, doc: DocState) -> list[types.Diagnostic]:
    out: list[types.Diagnostic] = []
    a = doc.analysis
    if doc.skipped or not a.modules:
        return out
    history = ls.services.history_if_exists()
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
            out.append(types.Diagnostic(_range(m.name_span), results.success_line(best),
                                        severity=types.DiagnosticSeverity.Information, source=SOURCE,
                                        code="candidate", data={"module": m.name, "candidate": best.number}))
        if latest is not None and not latest.correct and (best is None or latest.number > best.number):
            out.append(types.Diagnostic(_range(m.name_span), results.failure_line(latest),
                                        severity=types.DiagnosticSeverity.Warning, source=SOURCE,
                                        code="candidate-failed", data={"module": m.name, "candidate": latest.number}))
        mn = a.model_new
        rec = results.verify_record(history, key) if mn is not None else None
        if mn is not None and rec is not None and rec[0].get("document") == doc.text_hash:
            verdict = rec[1]
            ok = results.is_correct(verdict)
            out.append(types.Diagnostic(
                _range(mn.name_span), f"ModelNew: {verdicts.describe(verdict)}",
                severity=types.DiagnosticSeverity.Information if ok else types.DiagnosticSeverity.Error,
                source=SOURCE, code="verify", data={"module": m.name}))
    return out


def publish(ls: KernelLanguageServer, uri: str) -> None:
    doc = ls.docs.get(uri)
    if doc is None:
        return
    try:
        diags = compute(ls, doc)
    except Exception:
        log.exception("computing diagnostics for %s failed", uri)
        return
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diags,
                                                                        version=doc.version))


def register(server: KernelLanguageServer) -> None:
    def on_document(uri: str) -> None:
        doc = server.docs.known(uri)
        if doc is not None and (doc.open or uri in published):
            published.add(uri)
            publish(server, uri)

    published: set[str] = set()
    server.document_listeners.append(on_document)
