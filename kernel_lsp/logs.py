"""Logging discipline.

While serving over stdio, fd 1 carries LSP frames and nothing else. torch, ninja, nvcc and C libraries write to
fd 1 directly, below Python, so redirecting `sys.stdout` is not enough: :func:`protect_stdout` duplicates the
real fd 1 into a private descriptor for the protocol, then points fd 1 (and `sys.stdout`) at stderr. Whatever
anything in the process prints afterwards lands in the log stream, never in the protocol.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any, BinaryIO

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def protect_stdout() -> BinaryIO:
    """Return a binary stream on the real stdout and route fd 1 to stderr for everyone else."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)  # C code, subprocesses inheriting fd 1, print(): all go to stderr now
    os.set_inheritable(protocol_fd, False)  # children never get the protocol stream
    sys.stdout = io.TextIOWrapper(os.fdopen(os.dup(2), "wb", buffering=0), write_through=True)
    return os.fdopen(protocol_fd, "wb", buffering=0)


def setup_logging(level: str = "info", log_file: str | Path | None = None) -> logging.Logger:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(err)
    if log_file:
        add_log_file(Path(log_file))
    # pygls logs every message at DEBUG; keep it at INFO unless asked for debug.
    logging.getLogger("pygls").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    return logging.getLogger("kernel_lsp")


def add_log_file(path: Path) -> Path | None:
    """Also log into `path` (rotated at 5 MB); once per path. None (and a warning) when it cannot be written."""
    root = logging.getLogger()
    for h in root.handlers:
        if isinstance(h, logging.handlers.RotatingFileHandler) and Path(h.baseFilename) == path.absolute():
            return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = logging.handlers.RotatingFileHandler(path, maxBytes=5 << 20, backupCount=2, encoding="utf-8")
    except OSError as e:
        root.warning("cannot write the log file %s: %s", path, e)
        return None
    fh.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(fh)
    return path


def log_path(settings: Any, state_dir: Path, root: Path) -> Path:
    """The log file the settings name (`log_file`, relative to `root`), else `<state_dir>/kernel-lsp.log`.
    `state_dir` is already the workspace's (`config.state_path`): it is not joined to `root` again, or a
    relative root (`bench --out bout`) would put the log in `bout/bout/.kernel-lsp/`."""
    if not settings.log_file:
        return state_dir / "kernel-lsp.log"
    path = Path(settings.log_file).expanduser()
    return path if path.is_absolute() else root / path


def command_log(settings: Any, state_dir: Path, root: Path) -> Path | None:
    """Logging for a headless command (`optimize`, `bench`): everything at `settings.log_level` into the log file
    (see `log_path`), only errors on stderr (which carries the progress and the one-line messages). Returns the
    log file, or None when it cannot be written (then warnings go to stderr too)."""
    setup_logging(str(settings.log_level))
    err = logging.getLogger().handlers[0]
    err.setLevel(logging.ERROR)
    path = add_log_file(log_path(settings, state_dir, root))
    if path is None:
        err.setLevel(logging.WARNING)
    return path
