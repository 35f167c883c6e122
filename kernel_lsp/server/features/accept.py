"""Accepting a candidate, and adding the inputs stub: the only ways the server changes a user's file.

- inline (setting `accept_target = "inline"`): `workspace/applyEdit` with a versioned TextDocumentEdit that
  inserts the candidate's kernel code and `ModelNew` (replacing an earlier accepted block or ModelNew);
- sibling (`accept_target = "sibling"`): the candidate's source is written to `<stem>_kernel.py` next to the file.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ...documents import edits
from ...documents.store import uri_to_path
from ...history import results
from ..arguments import AcceptArgs, ArgumentError, ModuleArgs, parse

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

ACCEPT = "kernel-lsp.accept"
ADD_INPUTS = "kernel-lsp.addInputs"


class AcceptError(ValueError):
    """The candidate cannot be accepted; the message is for users."""


def _workspace_edit(ls: KernelLanguageServer, uri: str, plain: list[edits.Edit]) -> types.WorkspaceEdit:
    doc = ls.docs.get(uri)
    version = doc.version if doc is not None and doc.open else None
    text_edits: list[types.TextEdit | types.AnnotatedTextEdit | types.SnippetTextEdit] = [
        types.TextEdit(types.Range(types.Position(a, b), types.Position(c, d)), text) for a, b, c, d, text in plain]
    return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=text_edits)])


def _candidate(ls: KernelLanguageServer, uri: str, module: str, number: int):
    doc = ls.docs.get(uri)
    if doc is None:
        raise AcceptError(f"{uri}: no such document")
    if doc.analysis.module(module) is None:
        raise AcceptError(f"{ls.docs.label(uri)}: no module {module!r}")
    history = ls.services.history_if_exists()
    key = ls.docs.task_key(uri, module)
    cand = history.candidate(key, number) if history is not None else None
    if cand is None:
        raise AcceptError(f"{module} has no candidate {number}")
    if cand.fingerprint != ls.docs.fingerprint(doc, module):
        raise AcceptError(f"candidate {number} was made for an earlier version of {module} (stale): run it again")
    return doc, cand


def accept_edit(ls: KernelLanguageServer, uri: str, module: str, number: int) -> types.WorkspaceEdit:
    doc, cand = _candidate(ls, uri, module, number)
    try:
        plain = edits.accept_edits(doc.text, doc.analysis, cand.source, cand.number, module)
    except ValueError as e:
        raise AcceptError(str(e)) from None
    return _workspace_edit(ls, uri, plain)


def sibling_path(uri: str) -> Path:
    path = uri_to_path(uri)
    if path is None:
        raise AcceptError("a sibling file needs a saved file (this document has no path): use accept_target=inline")
    return path.with_name(f"{path.stem}_kernel.py")


def write_sibling(ls: KernelLanguageServer, uri: str, module: str, number: int) -> Path:
    _, cand = _candidate(ls, uri, module, number)
    target = sibling_path(uri)
    header = f"# kernel-lsp: candidate {cand.number} of {module} ({results.speed(cand)})\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(header + cand.source)
        os.replace(tmp, target)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise AcceptError(f"cannot write {target}: {e.strerror or e}") from None
    return target


def inputs_edit(ls: KernelLanguageServer, uri: str, module: str) -> types.WorkspaceEdit | None:
    doc = ls.docs.get(uri)
    m = doc.analysis.module(module) if doc is not None else None
    if doc is None or m is None:
        return None
    plain = edits.inputs_stub(doc.analysis, m, doc.text)
    return _workspace_edit(ls, uri, plain) if plain else None


async def _apply(ls: KernelLanguageServer, edit: types.WorkspaceEdit, label: str) -> dict[str, Any]:
    res = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=label))
    if not res.applied:
        reason = res.failure_reason or "the editor refused the edit (was the file changed meanwhile?)"
        ls.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"kernel-lsp: {label}: {reason}"))
    return {"applied": bool(res.applied), "failureReason": res.failure_reason}


def register(server: KernelLanguageServer) -> None:
    @server.command(ACCEPT)
    async def accept(*args: Any) -> dict[str, Any]:
        try:
            arg = parse(AcceptArgs, args)
            await server.docs.ready(arg.uri)
            if server.settings.accept_target == "sibling":
                path = write_sibling(server, arg.uri, arg.module, arg.candidate)
                return {"applied": True, "path": str(path)}
            return await _apply(server, accept_edit(server, arg.uri, arg.module, arg.candidate),
                                f"Accept candidate {arg.candidate}")
        except (ArgumentError, AcceptError) as e:
            server.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"kernel-lsp: {e}"))
            return {"applied": False, "failureReason": str(e)}

    @server.command(ADD_INPUTS)
    async def add_inputs(*args: Any) -> dict[str, Any]:
        try:
            arg = parse(ModuleArgs, args)
        except ArgumentError as e:
            return {"applied": False, "failureReason": str(e)}
        await server.docs.ready(arg.uri)
        edit = inputs_edit(server, arg.uri, arg.module)
        if edit is None:
            return {"applied": False, "failureReason": "nothing to add"}
        return await _apply(server, edit, "Add get_inputs() / get_init_inputs()")
