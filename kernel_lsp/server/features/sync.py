"""Document sync: open / change (debounced) / save / close. Re-analysis is lazy (see documents/store.py); this
module decides when diagnostics are re-published and starts the verify job on save."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING
from urllib.parse import unquote

from lsprotocol import types

from .commands import verify_on_save

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.3


def _text(ls: KernelLanguageServer, uri: str) -> str | None:
    """The text pygls holds for an open document (None for a document the client did not open)."""
    doc = ls.workspace.text_documents.get(unquote(uri))
    return doc.source if doc is not None else None


def register(server: KernelLanguageServer) -> None:
    timers: dict[str, asyncio.TimerHandle] = {}

    def later(uri: str) -> None:
        if (old := timers.pop(uri, None)) is not None:
            old.cancel()
        server.bind_loop()
        assert server.loop is not None

        def fire() -> None:
            timers.pop(uri, None)
            server.document_changed(uri)

        timers[uri] = server.loop.call_later(DEBOUNCE_S, fire)

    def now(uri: str) -> None:
        if (old := timers.pop(uri, None)) is not None:
            old.cancel()
        server.document_changed(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        server.bind_loop()
        td = params.text_document
        server.docs.set_text(td.uri, td.text, td.version, is_open=True)
        now(td.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        td = params.text_document
        text = _text(server, td.uri)
        if text is None:
            return
        server.docs.set_text(td.uri, text, td.version, is_open=True)
        later(td.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.TextDocumentSaveRegistrationOptions(include_text=True))
    def did_save(params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = server.docs.known(uri)
        text = params.text if params.text is not None else _text(server, uri)
        if text is None:
            log.info("didSave for %s, which the client never opened: ignored", uri)
            return
        server.docs.set_text(uri, text, doc.version if doc else None, is_open=doc.open if doc else None)
        now(uri)
        verify_on_save(server, uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if (old := timers.pop(uri, None)) is not None:
            old.cancel()
        server.docs.close(uri)
        server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
