"""Document sync: open / change (debounced) / save / close. Re-analysis is lazy (see workspace_state); this
module decides when diagnostics are re-published and starts the verify job on save."""

from __future__ import annotations

import asyncio
import logging

from lsprotocol import types

from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.3


def _text(ls: KernelLanguageServer, uri: str) -> str:
    try:
        return ls.workspace.get_text_document(uri).source
    except Exception:  # noqa: BLE001 - a document pygls does not know (unknown URI, unreadable file)
        return ""


def register(server: KernelLanguageServer) -> None:
    timers: dict[str, asyncio.TimerHandle] = {}

    def later(ls: KernelLanguageServer, uri: str) -> None:
        if (old := timers.pop(uri, None)) is not None:
            old.cancel()
        ls.bind_loop()
        assert ls.loop is not None

        def fire() -> None:
            timers.pop(uri, None)
            ls.document_changed(uri)

        timers[uri] = ls.loop.call_later(DEBOUNCE_S, fire)

    def now(ls: KernelLanguageServer, uri: str) -> None:
        if (old := timers.pop(uri, None)) is not None:
            old.cancel()
        ls.document_changed(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: KernelLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.bind_loop()
        td = params.text_document
        ls.docs.set_text(td.uri, td.text, td.version, is_open=True)
        now(ls, td.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: KernelLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        td = params.text_document
        ls.docs.set_text(td.uri, _text(ls, td.uri), td.version, is_open=True)
        later(ls, td.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.TextDocumentSaveRegistrationOptions(include_text=True))
    def did_save(ls: KernelLanguageServer, params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.docs.known(uri)
        text = params.text if params.text is not None else _text(ls, uri)
        ls.docs.set_text(uri, text, doc.version if doc else None, is_open=doc.open if doc else None)
        now(ls, uri)
        from .commands import verify_on_save

        verify_on_save(ls, uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: KernelLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if (old := timers.pop(uri, None)) is not None:
            old.cancel()
        ls.docs.close(uri)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
