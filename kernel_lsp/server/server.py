"""The pygls server object and its features."""

from __future__ import annotations

import logging
import os

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from .. import __version__

log = logging.getLogger(__name__)


class KernelLanguageServer(LanguageServer):
    pass


def create_server() -> KernelLanguageServer:
    server = KernelLanguageServer("kernel-lsp", __version__)

    @server.feature(types.INITIALIZED)
    def initialized(ls: KernelLanguageServer, params: types.InitializedParams) -> None:
        log.info("initialized")
        if os.environ.get("KERNEL_LSP_TEST_NOISE"):
            # Test hook for the stdout discipline: write to fd 1 from C level and from Python.
            os.write(1, b"noise from C level on fd 1\n")
            print("noise from print()")

    return server
