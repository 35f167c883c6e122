"""The product's structure in figures: files and classes over 400 lines, and typed replies turned back into dicts
in the evaluator's parent (a reply's `.to_wire()` outside the worker sides and the wire itself).

    python scripts/structure.py [ROOT]

Counts `evaluator/` and `kernel_lsp/` (example candidates left out). Import circles and upward imports are
`farm-studio look`'s and `tests/core/test_layers.py`'s.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

LIMIT = 400
WORKER_SIDES = ("sandboxed", "trusted", "shared", "messages")


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    files = sorted(p for d in ("evaluator", "kernel_lsp") for p in (root / d).rglob("*.py")
                   if "examples" not in p.parts)
    lines = {p: len(p.read_text().splitlines()) for p in files}
    big = sorted(((n, p.relative_to(root)) for p, n in lines.items() if n > LIMIT), reverse=True)
    classes = []
    for p in files:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef) and (n := node.end_lineno - node.lineno + 1) > LIMIT:
                classes.append((n, f"{p.relative_to(root)}::{node.name}"))
    redict = []
    for p in (root / "evaluator").rglob("*.py"):
        rel = p.relative_to(root)
        if rel.parts[1] in WORKER_SIDES or rel.name in ("messages.py", "worker.py"):
            continue
        redict += [f"{rel}:{i}" for i, line in enumerate(p.read_text().splitlines(), 1)
                   if re.search(r"\b(res|reply|claim|rep|r|out)\.to_wire\(\)", line)]
    evaluator = sum(n for p, n in lines.items() if p.relative_to(root).parts[0] == "evaluator")
    top = [p for p in (root / "evaluator").glob("*.py") if p.name != "__init__.py"]
    print(f"product: {sum(lines.values())} lines, evaluator {evaluator}; files at evaluator/'s top: {len(top)}")
    print(f"files over {LIMIT} lines: {len(big)}")
    for n, p in big:
        print(f"  {n:5d} {p}")
    print(f"classes over {LIMIT} lines: {len(classes)}")
    for n, c in sorted(classes, reverse=True):
        print(f"  {n:5d} {c}")
    print(f"typed replies re-made as dicts in the parent: {len(redict)}")
    for r in redict:
        print(f"  {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
