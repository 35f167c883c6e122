"""JSON-RPC over stdio that answers noise with the error JSON-RPC prescribes, and never with a pop-up.

pygls reads a message, parses it with an object hook and hands any failure to the server's error reporter, which
shows the user a `window/showMessage` Error and sends no reply. Here every body goes through :func:`receive`:

- bytes that are not UTF-8, or text that is not JSON: error -32700 (parse error), id null;
- JSON that is not one message object (an array, a number, an object without `method` and without
  `result`/`error`, a wrong `jsonrpc`): error -32600 (invalid request), with the request's id when it has one;
- a request whose params do not fit its method (a hover without `position`, a codeLens with `null` params):
  error -32602 (invalid params) with its id, so every request is answered; a notification like that is logged;
- a change to a document the client never opened: logged and ignored.

Nothing of this reaches the user as a message box: it is logged (the client's output channel shows stderr).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.io_ import StdinAsyncReader
from pygls.protocol import LanguageServerProtocol, lsp_method

log = logging.getLogger(__name__)

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
_CONTENT_LENGTH = re.compile(rb"^Content-Length:\s*(\d+)\s*$", re.IGNORECASE)


def _valid_id(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


class KernelProtocol(LanguageServerProtocol):
    def reply_error(self, msg_id: Any, code: int, message: str) -> None:
        """A JSON-RPC error response (`id` null when the request's id could not be read)."""
        self._send_data({"jsonrpc": "2.0", "id": msg_id if _valid_id(msg_id) else None,
                         "error": {"code": code, "message": message}})

    def receive(self, body: bytes) -> None:
        """One message body off the wire: check it, answer what is malformed, hand the rest to pygls."""
        try:
            data = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as e:
            log.warning("dropped a message that is not UTF-8: %s", e)
            self.reply_error(None, PARSE_ERROR, f"Parse error: the message is not UTF-8 ({e.reason} at byte {e.start})")
            return
        except ValueError as e:
            log.warning("dropped a message that is not JSON: %s", e)
            self.reply_error(None, PARSE_ERROR, f"Parse error: {e}")
            return
        if not isinstance(data, dict):
            log.warning("dropped a message that is not a JSON object: %.200s", body)
            self.reply_error(None, INVALID_REQUEST, "Invalid Request: a message must be one JSON object")
            return
        msg_id, method = data.get("id"), data.get("method")
        is_response = method is None and ("result" in data or "error" in data)
        if data.get("jsonrpc") != "2.0" or not (isinstance(method, str) or is_response) \
                or ("id" in data and not _valid_id(msg_id) and msg_id is not None):
            log.warning("dropped an invalid message: %.200s", body)
            self.reply_error(msg_id, INVALID_REQUEST,
                             "Invalid Request: expected jsonrpc \"2.0\" and a method (or a result / an error)")
            return
        is_request = isinstance(method, str) and _valid_id(msg_id)
        try:
            message = self.structure_message(data)
        except Exception as e:  # noqa: BLE001 - pygls wraps cattrs' errors in its own
            cause = e.__cause__ or e
            detail = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
            if is_request:
                log.warning("request %r %s has invalid params: %s", msg_id, method, detail)
                self.reply_error(msg_id, INVALID_PARAMS, f"Invalid params for {method}: {detail}")
            else:
                log.warning("dropped %s with invalid params: %s", method or "a response", detail)
            return
        self.handle_message(message)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        """pygls's, for documents the client opened; a change to any other document is ignored (and logged)."""
        uri = params.text_document.uri
        if unquote(uri) not in self.workspace.text_documents:
            log.warning("didChange for %s, which the client never opened: ignored", uri)
            return
        yield from super().lsp_text_document__did_change(params)


async def read_messages(stop: threading.Event, reader: StdinAsyncReader, protocol: KernelProtocol) -> None:
    """The framing loop (headers, then `Content-Length` bytes of body) feeding :meth:`KernelProtocol.receive`."""
    while not stop.is_set():
        length: int | None = None
        while True:  # the headers, up to the empty line
            line = await reader.readline()
            if not line:
                return  # end of input: the client is gone
            if not line.strip():
                break
            m = _CONTENT_LENGTH.match(line.strip())
            if m:
                length = int(m.group(1))
        if length is None:
            log.warning("a message without Content-Length: skipped")
            continue
        body = await reader.readexactly(length)
        if len(body) < length:
            return
        try:
            protocol.receive(body)
        except Exception:  # never let one message end the loop
            log.exception("handling a message failed")


def run(stop: threading.Event, reader: StdinAsyncReader, protocol: KernelProtocol) -> None:
    asyncio.run(read_messages(stop, reader, protocol))
