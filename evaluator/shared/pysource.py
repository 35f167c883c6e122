"""Shared (it decides nothing): `ast.parse` that is safe while other threads of the process parse too.

CPython 3.11 keeps the AST constructor's recursion count in per-interpreter state and resets it at the start of
every parse. When one thread's parse is suspended part way (a garbage collection runs a finalizer, the finalizer
gives up the GIL) and another thread parses meanwhile, the first one ends with "SystemError: AST constructor
recursion depth mismatch" on perfectly valid source (CPython gh-106905 and its follow-ups). The language server
parses documents on its loop while jobs parse candidates on their threads, so it met exactly that: a job failed
with an internal error on a candidate that parsed fine a moment later.

Every parse in this project goes through `parse`: one lock keeps our own parses apart, and the rare clash with a
parse we do not own (the standard library's traceback formatting parses a line to place its carets) is parsed
again, since parsing has no side effects.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.RLock()
_TRIES = 3


def _is_the_race(e: SystemError) -> bool:
    return "recursion depth mismatch" in str(e)


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`; SyntaxError, ValueError and RecursionError as ast.parse raises them."""
    with _LOCK:
        for attempt in range(_TRIES):
            try:
                return ast.parse(source, filename)
            except SystemError as e:
                if not _is_the_race(e) or attempt == _TRIES - 1:
                    raise
    raise AssertionError("unreachable")
