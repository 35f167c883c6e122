"""Code actions on a module, resolved lazily (`codeAction/resolve`): the list is cheap, the edit or command is
computed only for the action the user picks.

Kinds: `refactor.kernelLsp.<job>` for jobs, `refactor.rewrite.kernelLsp.accept` for accepting a candidate,
`quickfix` for the inputs stub.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ...documents import edits
from ...history import results
from . import accept
from .commands import JOB_COMMANDS

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

JOB_KIND = "refactor.kernelLsp"
ACCEPT_KIND = "refactor.rewrite.kernelLsp.accept"
KINDS = [types.CodeActionKind.QuickFix, JOB_KIND, ACCEPT_KIND]
_TITLES = {"generate": "Generate a kernel for {m} ({strategy})", "bestOfN": "Best of {n} kernels for {m}",
           "refine": "Refine ModelNew of {m}", "verify": "Verify ModelNew against {m}",
           "profile": "Profile {m}"}
MAX_ACCEPT_ACTIONS = 3


def _wanted(only: list[str] | None, kind: str) -> bool:
    return not only or any(kind == o or kind.startswith(o + ".") for o in only)


def actions(ls: KernelLanguageServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    doc = ls.docs.get(uri)
    if doc is None or doc.skipped:
        return []
    m = ls.docs.module_at(uri, params.range.start.line)
    if m is None:
        return []
    only = list(params.context.only) if params.context and params.context.only else None
    base = {"uri": uri, "module": m.name}
    out: list[types.CodeAction] = []
    if not doc.analysis.has_inputs:
        if _wanted(only, types.CodeActionKind.QuickFix):
            diags = [d for d in params.context.diagnostics if d.code == "missing-inputs"] if params.context else []
            out.append(types.CodeAction(title=f"Add get_inputs() / get_init_inputs() for {m.name}",
                                        kind=types.CodeActionKind.QuickFix, diagnostics=diags or None,
                                        is_preferred=True, data={**base, "action": "addInputs"}))
        return out
    if _wanted(only, JOB_KIND):
        for kind, title in _TITLES.items():
            if kind in ("refine", "verify") and doc.analysis.model_new is None:
                continue
            if kind == "bestOfN" and ls.settings.samples < 2:
                continue  # best of 1 is what Generate does
            out.append(types.CodeAction(title=title.format(m=m.name, n=ls.settings.samples,
                                                           strategy=ls.settings.strategy),
                                        kind=f"{JOB_KIND}.{kind}", data={**base, "action": kind}))
    if _wanted(only, ACCEPT_KIND):
        res = results.load(ls.services.history_if_exists(), ls.docs.task_key(uri, m.name),
                           ls.docs.fingerprint(doc, m.name), ls.results_cache)
        offered = res.offered
        for c in res.ranked[:MAX_ACCEPT_ACTIONS]:
            if edits.holds_candidate(doc.text, c.source, c.number, m.name):
                continue  # already in the file, as accepting it would write it
            # Preferred (applied by "auto fix" / Ctrl+.) only for the offered one: the best, when it beats eager.
            # The others read "Accept …" when they are shown faster than eager, else "Insert … anyway".
            out.append(types.CodeAction(title=results.accept_title(c),
                                        kind=ACCEPT_KIND, is_preferred=(offered is not None and c.id == offered.id) or None,
                                        data={**base, "action": "accept", "candidate": c.number}))
    return out


def resolve(ls: KernelLanguageServer, action: types.CodeAction) -> types.CodeAction:
    data: dict[str, Any] = action.data if isinstance(action.data, dict) else {}
    what, uri, module = data.get("action"), data.get("uri"), data.get("module")
    if not isinstance(uri, str) or not isinstance(module, str):
        return action
    arg = {"uri": uri, "module": module}
    if what in JOB_COMMANDS:
        action.command = types.Command(title=action.title, command=JOB_COMMANDS[what], arguments=[arg])
    elif what == "addInputs":
        action.edit = accept.inputs_edit(ls, uri, module)
    elif what == "accept":
        number = data.get("candidate")
        if ls.settings.accept_target == "sibling":
            action.command = types.Command(title=action.title, command=accept.ACCEPT,
                                           arguments=[{**arg, "candidate": number}])
        else:
            try:
                action.edit = accept.accept_edit(ls, uri, module, number)
            except accept.AcceptError as e:
                action.disabled = types.CodeActionDisabled(reason=str(e))
    return action


def register(server: KernelLanguageServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=KINDS, resolve_provider=True))
    async def code_action(params: types.CodeActionParams) -> list[types.CodeAction]:
        await server.docs.ready(params.text_document.uri)
        return actions(server, params)

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def code_action_resolve(params: types.CodeAction) -> types.CodeAction:
        data = params.data if isinstance(params.data, dict) else {}
        if isinstance(data.get("uri"), str):
            await server.docs.ready(data["uri"])
        return resolve(server, params)
