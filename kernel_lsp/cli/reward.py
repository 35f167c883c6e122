"""`kernel-lsp reward IN.jsonl --out OUT.jsonl`: score a batch of completions with the oracle (kernel_lsp/reward.py).

IN holds one JSON object a line: `{"reference": "<the Model's source>", "completion": "<the model's answer>"}`,
any other field kept out of the way (an `id` is copied to the result). OUT gets one result a line, in the order of
IN, each with `line` (its line in IN), written as soon as it and the lines before it are scored. A line that is
not such an object is reported on stderr, one line each, and written as a `bad_input` result; every other line is
scored all the same. Blank lines are skipped.

Exit status: 0 when every line was scored, 1 when some were bad input, 2 for a bad invocation, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..config import Settings


class RewardError(Exception):
    """Something the user can fix: one line, exit 2."""


def read_rows(path: str) -> tuple[list[tuple[int, Any]], list[str]]:
    """(line number, parsed row) for each non-blank line, and one message per line that is not JSON."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise RewardError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise RewardError(f"{path}: is a folder, not a JSONL file") from None
    except OSError as e:
        raise RewardError(f"{path}: cannot read: {e.strerror or e}") from None
    rows: list[tuple[int, Any]] = []
    problems: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except json.JSONDecodeError as e:
            problems.append(f"not JSON ({e.msg} at column {e.colno})")
            rows.append((n, _NotJson(problems[-1])))
    return rows, problems


class _NotJson:
    def __init__(self, problem: str) -> None:
        self.problem = problem


def run_reward(settings: Settings, args: argparse.Namespace) -> int:
    from .. import reward

    out = Path(args.out)
    if out.is_dir():
        raise RewardError(f"--out {out}: is a folder, not a file")
    if not out.parent.is_dir():
        raise RewardError(f"--out {out}: no such folder {out.parent}")
    rows, _ = read_rows(args.input)
    try:
        f = out.open("w", encoding="utf-8")
    except OSError as e:
        raise RewardError(f"--out {out}: cannot write: {e.strerror or e}") from None
    # each result goes out as soon as every line before it has one: an interrupted batch keeps what was scored
    ready: dict[int, dict[str, Any]] = {}
    written = bad = 0

    def line_done(res: dict[str, Any]) -> None:
        nonlocal written, bad
        ready[res["index"]] = res
        while written in ready:
            res = ready.pop(written)
            line, row = rows[written]
            if res["status"] == reward.BAD_INPUT:
                bad += 1
                if isinstance(row, _NotJson):
                    res["message"] = row.problem
                print(f"kernel-lsp: {args.input}:{line}: {res['message']}", file=sys.stderr)
            f.write(json.dumps({"line": line, **{k: v for k, v in res.items() if k != "index"}}) + "\n")
            f.flush()
            written += 1

    try:
        with f:
            results = reward.score([r for _, r in rows], settings=settings, ray=args.ray, on_result=line_done)
    except OSError as e:
        raise RewardError(f"--out {out}: cannot write: {e.strerror or e}") from None
    counts: dict[str, int] = {}
    for res in results:
        counts[res["status"]] = counts.get(res["status"], 0) + 1
    what = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    print(f"kernel-lsp: scored {len(results)} rows ({what or 'none'}) -> {out}", file=sys.stderr)
    return 1 if bad else 0
