"""`pysource.parse`: valid source parses while another thread parses too (CPython 3.11 shares the AST
constructor's recursion count between threads)."""

from __future__ import annotations

import ast
import gc
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from evaluator.shared import pysource

ROOT = Path(__file__).resolve().parents[2]
BIG = "\n".join(f"def f{i}(x):\n    return [x + {i} for _ in range(3)]" for i in range(200))
SMALL = "y = 1\n" * 50


def _clash(parse_a: Callable[[str], object], parse_b: Callable[[str], object], hold_s: float) -> list[str]:
    """Thread A parses BIG; part way through, a garbage collection runs a finalizer in A that lets thread B parse
    SMALL and waits (at most `hold_s`) for it: the interleaving a server's loop and a job's thread met."""
    go, done = threading.Event(), threading.Event()
    errors: list[str] = []
    armed = [True]

    class Trip:
        def __del__(self) -> None:
            if armed[0] and threading.current_thread() is a:
                armed[0] = False
                go.set()
                done.wait(hold_s)

    def run_a() -> None:
        t = Trip()
        t.self = t  # type: ignore[attr-defined]  # a cycle: only the collector frees it
        del t
        old = gc.get_threshold()
        gc.set_threshold(1)
        try:
            parse_a(BIG)
        except SystemError as e:
            errors.append(f"a: {e}")
        finally:
            gc.set_threshold(*old)

    def run_b() -> None:
        if go.wait(5.0):
            try:
                parse_b(SMALL)
            except SystemError as e:
                errors.append(f"b: {e}")
            done.set()

    a = threading.Thread(target=run_a)
    b = threading.Thread(target=run_b)
    b.start()
    a.start()
    a.join(10)
    b.join(10)
    assert not armed[0], "the collector never ran the finalizer inside A's parse: the clash was not staged"
    return errors


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="CPython 3.13 keeps the count per thread")
def test_the_clash_is_real_for_a_bare_ast_parse() -> None:
    errors = _clash(ast.parse, ast.parse, hold_s=2.0)
    assert errors and "recursion depth mismatch" in errors[0], errors


def test_two_threads_parsing_through_pysource_both_succeed() -> None:
    assert _clash(pysource.parse, pysource.parse, hold_s=0.3) == []


def test_a_parse_we_do_not_own_is_survived_by_parsing_again() -> None:
    # B stands for the standard library (traceback formatting parses a line): it does not take our lock
    assert _clash(pysource.parse, ast.parse, hold_s=2.0) == []


def test_pysource_raises_what_ast_parse_raises() -> None:
    with pytest.raises(SyntaxError):
        pysource.parse("def (:\n")
    assert isinstance(pysource.parse("x = 1").body[0], ast.Assign)


def test_no_module_of_ours_calls_ast_parse_directly() -> None:
    direct = [f"{p.relative_to(ROOT)}:{n}"
              for pkg in ("kernel_lsp", "evaluator")
              for p in sorted((ROOT / pkg).rglob("*.py")) if p.name != "pysource.py"
              for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bast\.parse\(", line)]
    assert direct == [], f"parse through evaluator.shared.pysource.parse: {direct}"
