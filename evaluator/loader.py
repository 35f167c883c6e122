"""Worker side: a source string executed as a fresh module."""

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
