"""Settings: `initializationOptions`, then `workspace/configuration` (section "kernelLsp"), re-read on
`workspace/didChangeConfiguration`. The workspace's pyproject `[tool.kernel-lsp]` applies below them. A bad
value is shown with `window/showMessage` (Warning) and its default is used."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ...config import load_lenient
from ...documents.store import uri_to_path
from ...logs import add_log_file, log_path

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

SECTION = "kernelLsp"
_IGNORED = {"trace", "server", "enable", "serverPath", "pythonPath"}  # the client's own settings


def client_layer(raw: Any) -> dict[str, Any]:
    """Settings from the client: flat `{maxTokens: ...}` or nested `{kernelLsp: {...}}`."""
    if not isinstance(raw, dict):
        return {}
    if isinstance(raw.get(SECTION), dict):
        raw = raw[SECTION]
    return {k: v for k, v in raw.items() if k not in _IGNORED and not isinstance(v, dict)}


def workspace_root(params: types.InitializeParams) -> Path | None:
    for uri in [*(f.uri for f in params.workspace_folders or []), params.root_uri]:
        if uri and (p := uri_to_path(uri)) is not None:
            return p
    return Path(params.root_path) if params.root_path else None


def apply_settings(ls: KernelLanguageServer, layer: dict[str, Any], *, announce: bool = True) -> list[str]:
    ls.client_settings = layer
    settings, errors = load_lenient(ls.root, overrides=layer)
    ls.services.configure(settings, ls.root)
    ls.results_cache.invalidate()
    ls.events.fire(ls.events.configured)
    if settings.log_file:  # set in the workspace or the editor: the server logs there too (stderr stays)
        add_log_file(log_path(settings, ls.services.state_dir(), ls.root or Path.cwd()))
    if errors:
        log.warning("bad settings: %s", "; ".join(errors))
        if announce:
            _warn_bad(ls, errors)
    return errors


def _warn_bad(ls: KernelLanguageServer, errors: list[str]) -> None:
    ls.window_show_message(types.ShowMessageParams(
        types.MessageType.Warning, "kernel-lsp: ignoring bad settings, using the defaults instead: " + "; ".join(errors)))


def register(server: KernelLanguageServer) -> None:
    pending: list[str] = []

    @server.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        server.bind_loop()
        server.root = workspace_root(params)
        server.docs.root = server.root
        server.init_layer = client_layer(params.initialization_options)
        pending[:] = apply_settings(server, server.init_layer, announce=False)
        log.info("workspace %s, state in %s", server.root, server.settings.state_dir)

    @server.feature(types.INITIALIZED)
    async def initialized(params: types.InitializedParams) -> None:
        server.bind_loop()
        if pending:
            _warn_bad(server, pending)
            pending.clear()
        if server.client_supports("workspace", "configuration"):
            await refresh(server, None)
        server.started()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change(params: types.DidChangeConfigurationParams) -> None:
        await refresh(server, params.settings)


async def refresh(ls: KernelLanguageServer, pushed: Any) -> None:
    layer: dict[str, Any] | None = None
    if ls.client_supports("workspace", "configuration"):
        try:
            result = await ls.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)]))
            if result and isinstance(result[0], dict):
                layer = {**ls.init_layer, **client_layer(result[0])}
        except Exception as e:  # noqa: BLE001 - a client that cannot answer keeps the settings it pushed
            log.info("workspace/configuration failed: %s", e)
    if layer is None:
        pushed_layer = client_layer(pushed)
        if not pushed_layer:
            return
        layer = {**ls.init_layer, **pushed_layer}
    if layer == ls.client_settings:
        return
    apply_settings(ls, layer)
    ls.documents_changed()
