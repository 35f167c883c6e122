"""Entry point of `kernel-lsp serve`."""

from __future__ import annotations

import logging
import os
import sys

from ..logs import protect_stdout, setup_logging

log = logging.getLogger(__name__)


def serve(tcp: str | None = None, log_file: str | None = None, log_level: str | None = None) -> int:
    level = log_level or os.environ.get("KERNEL_LSP_LOG_LEVEL", "info")
    protocol_out = None
    if tcp is None:
        # Before anything else is imported: from here on fd 1 is stderr for everyone but the protocol.
        protocol_out = protect_stdout()
    setup_logging(level, log_file)
    from .server import create_server

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
