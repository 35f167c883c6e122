"""Entry point of `kernel-lsp serve`: the server and its features put together."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from ..logs import protect_stdout, setup_logging

if TYPE_CHECKING:
    from .server import KernelLanguageServer

log = logging.getLogger(__name__)


def create_server() -> KernelLanguageServer:
    """The server with every feature registered. Imported late: `serve` protects fd 1 before pygls loads."""
    from lsprotocol import types

    from .features import FEATURES
    from .server import KernelLanguageServer

    server = KernelLanguageServer()
    for feature in FEATURES:
        feature.register(server)

    @server.feature(types.SHUTDOWN)
    def shutdown(params: None) -> None:
        server.close_services()

    @server.feature(types.EXIT)
    def exit_(params: None) -> None:
        server.close_services()

    return server


def serve(tcp: str | None = None, log_file: str | None = None, log_level: str | None = None) -> int:
    level = log_level or os.environ.get("KERNEL_LSP_LOG_LEVEL", "info")
    protocol_out = None
    if tcp is None:
        # Before anything else is imported: from here on fd 1 is stderr for everyone but the protocol.
        protocol_out = protect_stdout()
    setup_logging(level, log_file)
    server = create_server()
    server.handle_signals()
    if tcp is not None:
        host, _, port = tcp.rpartition(":")
        if not host or not port.isdigit():
            print(f"kernel-lsp: error: --tcp {tcp!r}: expected HOST:PORT", file=sys.stderr)
            return 2
        log.info("serving on tcp %s:%s", host, port)
        server.start_tcp(host, int(port))
    else:
        log.info("serving on stdio (pid %d)", os.getpid())
        server.start_io(sys.stdin.buffer, protocol_out)
    return 0
