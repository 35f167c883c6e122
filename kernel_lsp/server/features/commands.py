"""`workspace/executeCommand`: start / cancel / list jobs, list candidates, the module at a line, and a hidden
debug command.

Job commands take `{uri, module}` or `{uri, line}` (typed in `server/arguments.py`) and return `{jobId}` (or
`{jobId: null, error}` with a Warning shown to the user when the module cannot be run or the argument is wrong).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ...history import results
from ...jobs import KINDS
from ...jobs.start import JobRefused
from ...tasks import TaskError
from ..arguments import ArgumentError, CancelArgs, JobArgs, ModuleAtArgs, Target, parse

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

PREFIX = "kernel-lsp."
JOB_COMMANDS = {k: PREFIX + k for k in KINDS}  # verify, profile, generate, bestOfN, refine
CANCEL, LIST_JOBS, LIST_CANDIDATES, MODULE_AT, DEBUG_INFO = (
    PREFIX + n for n in ("cancel", "listJobs", "listCandidates", "moduleAt", "debugInfo"))


class CommandError(ValueError):
    """A command cannot be carried out; the message is for users."""


def target(ls: KernelLanguageServer, arg: Target) -> tuple[str, str]:
    """(uri, module) of a command's target: the module named, else the one containing the line."""
    if arg.module:
        return arg.uri, arg.module
    assert arg.line is not None  # Target: a module or a line
    m = ls.docs.module_at(arg.uri, arg.line)
    if m is None:
        raise CommandError(f"no nn.Module at line {arg.line + 1} of {ls.docs.label(arg.uri)}")
    return arg.uri, m.name


def module_at(ls: KernelLanguageServer, arg: ModuleAtArgs) -> dict[str, Any]:
    """`{uri, line}` -> `{module, modules}`: the module a command at that line acts on (the server's rule, the one
    the job commands use: the module containing the line, inside ModelNew its reference), else null; and every
    module of the file with its line, for the client to offer a choice."""
    doc = ls.docs.get(arg.uri)
    if doc is None:
        raise CommandError(f"{arg.uri}: no such document")
    m = ls.docs.module_at(arg.uri, arg.line) if arg.line is not None else None
    refs = doc.analysis.references
    if m is None and len(refs) == 1:
        m = refs[0]
    return {"module": m.name if m is not None else None,
            "modules": [{"name": r.name, "line": r.name_span.line} for r in refs]}


def start_job(ls: KernelLanguageServer, kind: str, uri: str, module: str, *, time: bool = True,
              strategy: str | None = None) -> int:
    ls.bind_loop()
    return ls.starter.start(kind, uri, module, time=time, strategy=strategy)


def _fail(ls: KernelLanguageServer, message: str) -> dict[str, Any]:
    ls.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"kernel-lsp: {message}"))
    return {"jobId": None, "error": message}


def verify_on_save(ls: KernelLanguageServer, uri: str) -> int | None:
    """The save -> verify policy of jobs/start.py; an accepted candidate's verdict recorded as the file's check
    changes the document's diagnostics without a job."""
    ls.bind_loop()
    check = ls.starter.on_save(uri)
    if check.recorded:
        ls.document_changed(uri)
    return check.job_id


def register(server: KernelLanguageServer) -> None:
    def make(kind: str):
        async def command(*args: Any) -> dict[str, Any]:
            try:
                arg = parse(JobArgs, args)
                await server.docs.ready(arg.uri)
                uri, module = target(server, arg)
                return {"jobId": start_job(server, kind, uri, module, strategy=arg.strategy)}
            except (ArgumentError, TaskError, CommandError, JobRefused, RuntimeError) as e:
                return _fail(server, str(e))
        return command

    for kind, name in JOB_COMMANDS.items():
        server.command(name)(make(kind))

    @server.command(CANCEL)
    def cancel(*args: Any) -> dict[str, Any]:
        try:
            arg = parse(CancelArgs, args)
            if arg.jobId is not None:
                return {"cancelled": [arg.jobId] if server.jobs.cancel(arg.jobId) else []}
            uri, module = target(server, parse(Target, args))
        except (ArgumentError, CommandError) as e:
            return {"cancelled": [], "error": str(e)}
        return {"cancelled": server.jobs.cancel_key(server.docs.task_key(uri, module))}

    @server.command(LIST_JOBS)
    def list_jobs(*args: Any) -> list[dict[str, Any]]:
        return [s.public() for s in server.jobs.snapshots()]

    @server.command(LIST_CANDIDATES)
    def list_candidates(*args: Any) -> list[dict[str, Any]]:
        try:
            uri, module = target(server, parse(Target, args))
        except (ArgumentError, CommandError) as e:
            _fail(server, str(e))
            return []
        doc = server.docs.get(uri)
        fp = server.docs.fingerprint(doc, module) if doc and doc.analysis.module(module) else ""
        res = results.load(server.services.history_if_exists(), server.docs.task_key(uri, module), fp)
        return [results.candidate_row(c, res) for c in res.candidates]

    @server.command(MODULE_AT)
    async def module_at_line(*args: Any) -> dict[str, Any]:
        try:
            arg = parse(ModuleAtArgs, args)
            await server.docs.ready(arg.uri)
            return module_at(server, arg)
        except (ArgumentError, CommandError) as e:
            return {"module": None, "modules": [], "error": str(e)}

    @server.command(DEBUG_INFO)
    def debug_info(*args: Any) -> dict[str, Any]:
        """Hidden: what the server process has loaded (tests check that torch is not among it)."""
        ls = server
        return {
            "pid": os.getpid(),
            "torchLoaded": "torch" in sys.modules,
            "modules": sorted(m for m in sys.modules if "." not in m),
            "root": str(ls.root) if ls.root else None,
            "stateDir": str(ls.services.state_dir()),
            "settings": ls.settings.to_dict(),
            "evaluator": dataclasses.asdict(ls.services.evaluator_settings()),
            "jobs": [s.public() for s in ls.jobs.snapshots()],
            "children": _children(),
            "promptReloads": ls.prompt_reloads,
            "threads": sorted(t.name for t in threading.enumerate()),
            "analyser": {"analysed": ls.analyser.analysed, "pids": ls.analyser.pids()},
            **{key: value() for key, value in ls.events.debug.items()},  # the features' own (lensRefreshes, watch)
        }


def _children() -> list[int]:
    """PIDs of this process's children (Linux /proc); empty elsewhere."""
    me = os.getpid()
    out = []
    try:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    if int(fields[1]) == me:
                        out.append(int(entry))
                except (OSError, IndexError, ValueError):
                    continue
    except OSError:
        pass
    return out
