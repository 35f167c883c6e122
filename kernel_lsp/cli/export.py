"""`kernel-lsp export --from DIR --out FILE`: the trajectories of a history as a training dataset (docs/DATASET.md).

DIR is a workspace (its history is `<state_dir>/history.sqlite`), a state folder (the folder holding
history.sqlite) or a bench `--out` folder (bench keeps its history in that folder's state folder). FILE gets one
JSON object a line; when pyarrow is importable the same rows also go to FILE with the suffix `.parquet` (a FILE
ending in `.parquet` gets the Parquet rows, and the JSONL goes next to it with `.jsonl`).

Exit status: 0 when the dataset was written, 1 when it was written but some prompt holds an earlier step's chain
of thought (the rows say which: `reasoning_in_prompt`), 2 for a bad invocation (no history there, a bad --out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import dataset
from ..config import Settings
from ..history import History
from .answers import history_file


class ExportError(Exception):
    """Something the user can fix: one line, exit 2."""


def find_history(folder: Path, settings: Settings) -> Path:
    """The history database of a workspace, a state folder or a bench --out folder."""
    if folder.is_file() and folder.name.endswith(".sqlite"):
        return folder
    if not folder.is_dir():
        raise ExportError(f"--from {folder}: no such folder")
    for db in (folder / "history.sqlite", history_file(settings, folder)):
        if db.is_file():
            return db
    raise ExportError(f"--from {folder}: no history there (neither {folder / 'history.sqlite'} nor "
                      f"{history_file(settings, folder)}); give a workspace, its state folder or a bench --out folder")


def _split(values: list[str] | None) -> tuple[str, ...]:
    return tuple(v.strip() for item in values or [] for v in item.split(",") if v.strip())


def run_export(settings: Settings, args: argparse.Namespace) -> int:
    db = find_history(Path(args.source), settings)
    out = Path(args.out)
    if out.is_dir():
        raise ExportError(f"--out {out}: is a folder, not a file")
    if not out.parent.is_dir():
        raise ExportError(f"--out {out}: no such folder {out.parent}")
    pq = out.with_suffix(".parquet")
    if out.suffix == ".parquet":  # asked for Parquet: the JSONL goes next to it
        if not dataset.parquet_available():
            raise ExportError(f"--out {out}: Parquet needs pyarrow, which is not installed (pip install pyarrow)")
        out = out.with_suffix(".jsonl")
    filters = dataset.Filters(tasks=_split(args.task), strategies=_split(args.strategies),
                              statuses=_split(args.status))
    with History(db.parent) as h:
        try:
            rows = dataset.write_jsonl(dataset.rows(h, filters), out)
        except OSError as e:
            raise ExportError(f"--out {out}: cannot write: {e.strerror or e}") from None
    written = [str(out)]
    if dataset.parquet_available():
        dataset.write_parquet(rows, pq)
        written.append(str(pq))
    else:
        print("kernel-lsp: no Parquet copy: pyarrow is not installed (pip install pyarrow)", file=sys.stderr)
    jobs = len({r["job"] for r in rows})
    print(f"kernel-lsp: {len(rows)} steps of {jobs} job{'s' if jobs != 1 else ''} from {db} -> "
          f"{', '.join(written)}", file=sys.stderr)
    leaks = [r["step"] for r in rows if r["reasoning_in_prompt"]]
    if leaks:
        print(f"kernel-lsp: {len(leaks)} prompt(s) hold an earlier step's chain of thought (steps "
              f"{', '.join(map(str, leaks[:10]))}{', ...' if len(leaks) > 10 else ''}; "
              "`reasoning_in_prompt` in their rows)", file=sys.stderr)
        return 1
    return 0
