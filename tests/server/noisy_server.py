"""TEST ONLY: `kernel-lsp serve`, in a process that writes to fd 1 (from C level and from Python) right after the
client's `initialized`, as torch, ninja or a C library may do: the protocol stream must not see any of it.

    python tests/server/noisy_server.py [serve options]
"""

from __future__ import annotations

import os
import sys

from kernel_lsp.cli import main
from kernel_lsp.server.server import KernelLanguageServer

_started = KernelLanguageServer.started


def _noisy_started(self: KernelLanguageServer) -> None:
    os.write(1, b"noise from C level on fd 1\n")
    print("noise from print()")
    _started(self)


KernelLanguageServer.started = _noisy_started  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
