"""Shared: a source string executed as a fresh module (the referee loads the reference with it, the runner and the
recorder the candidate), and tracebacks cut down to that source's own frames."""

from __future__ import annotations

import sys
import types
from pathlib import Path

_counter = 0


def exec_module(src: str, filename: str) -> types.ModuleType:
    """Execute `src` as a fresh module (registered in sys.modules so dataclasses, pickling etc. work)."""
    global _counter
    _counter += 1
    name = f"_klsp_{Path(filename).stem}_{_counter}"
    mod = types.ModuleType(name)
    mod.__file__ = filename
    sys.modules[name] = mod
    code = compile(src, filename, "exec")
    exec(code, mod.__dict__)  # noqa: S102
    return mod


def candidate_frames(tb: str) -> str:
    """A traceback cut down to the candidate's own frames plus the exception line."""
    lines = tb.strip().splitlines()
    keep: list[str] = []
    for i, ln in enumerate(lines):
        if 'File "candidate.py"' in ln or 'File "reference.py"' in ln:
            keep.append(ln.strip())
            if i + 1 < len(lines) and not lines[i + 1].lstrip().startswith("File "):
                keep.append("    " + lines[i + 1].strip())
    if lines:
        keep.append(lines[-1])
    return "\n".join(keep)[-3000:]
