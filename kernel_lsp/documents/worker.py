"""The analysis of large documents, in a process of its own: `python -m kernel_lsp.documents.worker`.

`ast` work holds the GIL, so done in a thread of the language server it would still stall the event loop (and with
it every request on every other document). The server starts this process once and sends it texts on stdin; it
answers each in order on stdout. A frame is an 8-byte big-endian length and that many bytes: UTF-8 text in,
a pickled ``("ok", Analysed)`` or ``("error", message)`` out. It ends at the end of its input.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass
from typing import BinaryIO

from .analysis import Analysis, analyse
from .sources import reference_assignments


@dataclass(frozen=True)
class Analysed:
    """One analysis pass over a text (plain data: it comes back from the worker process)."""

    analysis: Analysis
    assignments: str  # top-level assignments of the reference part, for fingerprints ("" on a syntax error)


def analyse_text(text: str) -> Analysed:
    a = analyse(text)
    return Analysed(a, reference_assignments(text) if a.ok else "")


def write_frame(stream: BinaryIO, data: bytes) -> None:
    stream.write(len(data).to_bytes(8, "big") + data)
    stream.flush()


def read_frame(stream: BinaryIO) -> bytes | None:
    """One frame, or None at the end of the stream."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    n = int.from_bytes(header, "big")
    data = stream.read(n)
    return data if len(data) == n else None


def main() -> int:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    while (data := read_frame(sys.stdin.buffer)) is not None:
        try:
            answer: tuple[str, object] = ("ok", analyse_text(data.decode("utf-8", "surrogatepass")))
        except Exception as e:  # noqa: BLE001 - reported to the server, which keeps the last analysis
            answer = ("error", f"{type(e).__name__}: {e}")
        write_frame(out, pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    from kernel_lsp.documents import worker  # by its name, so that what is pickled names this module, not __main__

    sys.exit(worker.main())
