"""What one worker may do: one policy, read on both sides of the sandbox.

The evaluator makes it (processes/handle.py), wraps a sandboxed worker's command in bubblewrap by it
(processes/sandbox.py) and passes it on the worker's command line; the worker hardens itself by it before any
candidate code runs (sandboxed/harden.py), or, trusted, checks that its parent is still the evaluator. Nothing
here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class WorkerPolicy:
    role: str  # "referee" | "pch" (trusted); "runner" | "recorder" | "builder" (sandboxed)
    workdir: str  # the worker's HOME, TMPDIR and cwd: the one folder it may write
    sandboxed: bool = True
    writable: tuple[str, ...] = ()  # more folders it may write
    readable: tuple[str, ...] = ()  # more folders it may read (the build cache)
    read_paths: tuple[str, ...] = ()  # what Python and the toolchain need read (sandbox.needed_read_paths)
    gpu: bool = False  # the device files are bound into the sandbox; no address-space limit, no Landlock
    namespaces: bool = False  # it runs inside bubblewrap's namespaces: reads need no allow-list
    max_file_bytes: int = 4 << 30
    parent: int = 0  # a trusted worker's parent (the evaluator's pid), checked once its death signal is armed

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerPolicy:
        d = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"worker policy: unknown fields {unknown}")
        for k in ("writable", "readable", "read_paths"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)
