"""`workspace/executeCommand`: start / cancel / list jobs, list candidates, the module at a line, and a hidden
debug command.

Job commands take `{uri, module}` or `{uri, line}` and return `{jobId}` (or `{jobId: null, error}` with a
Warning shown to the user when the module cannot be run).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ...config import STRATEGIES
from ...documents.sources import source_hash
from ...history import History, verify
from ...jobs import KINDS, JobOutcome, runners
from ...jobs.manager import JobContext
from ...services import Unavailable
from ...tasks import TaskError
from .. import edits, results
from ..workspace_state import DocState

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

PREFIX = "kernel-lsp."
JOB_COMMANDS = {k: PREFIX + k for k in KINDS}  # verify, profile, generate, bestOfN, refine
CANCEL, LIST_JOBS, LIST_CANDIDATES, MODULE_AT, DEBUG_INFO = (
    PREFIX + n for n in ("cancel", "listJobs", "listCandidates", "moduleAt", "debugInfo"))


class CommandError(ValueError):
    """A command cannot be carried out; the message is for users."""


def _arg(args: tuple[Any, ...]) -> dict[str, Any]:
    if args and isinstance(args[0], dict):
        return args[0]
    if args and isinstance(args[0], list) and args[0] and isinstance(args[0][0], dict):
        return args[0][0]
    raise CommandError("expected one argument object, e.g. {uri, module}")


def target(ls: KernelLanguageServer, arg: dict[str, Any]) -> tuple[str, str]:
    """(uri, module) from {uri, module} or {uri, line}."""
    uri = arg.get("uri")
    if not isinstance(uri, str) or not uri:
        raise CommandError("missing 'uri'")
    module = arg.get("module")
    if isinstance(module, str) and module:
        return uri, module
    line = arg.get("line")
    if isinstance(line, int) and not isinstance(line, bool):
        m = ls.docs.module_at(uri, line)
        if m is None:
            raise CommandError(f"no nn.Module at line {line + 1} of {ls.docs.label(uri)}")
        return uri, m.name
    raise CommandError("expected 'module' or 'line'")


def module_at(ls: KernelLanguageServer, arg: dict[str, Any]) -> dict[str, Any]:
    """`{uri, line}` -> `{module, modules}`: the module a command at that line acts on (the server's rule, the one
    the job commands use: the module containing the line, inside ModelNew its reference), else null; and every
    module of the file with its line, for the client to offer a choice."""
    uri = arg.get("uri")
    if not isinstance(uri, str) or not uri:
        raise CommandError("missing 'uri'")
    doc = ls.docs.get(uri)
    if doc is None:
        raise CommandError(f"{uri}: no such document")
    line = arg.get("line")
    m = ls.docs.module_at(uri, line) if isinstance(line, int) and not isinstance(line, bool) else None
    refs = doc.analysis.references
    if m is None and len(refs) == 1:
        m = refs[0]
    return {"module": m.name if m is not None else None,
            "modules": [{"name": r.name, "line": r.name_span.line} for r in refs]}


def strategy_arg(arg: dict[str, Any]) -> str | None:
    """An optional {strategy} in a generate command's argument (the client's strategy pick)."""
    value = arg.get("strategy")
    if value is None or value == "":
        return None
    if value not in STRATEGIES:
        raise CommandError(f"unknown strategy {value!r} (one of: {', '.join(STRATEGIES)})")
    return str(value)


def start_job(ls: KernelLanguageServer, kind: str, uri: str, module: str, *, time: bool = True,
              strategy: str | None = None) -> int:
    ls.bind_loop()
    doc = ls.docs.get(uri)
    task = ls.docs.task(uri, module)  # TaskError: shown to the user
    if kind in ("verify", "refine") and not task.candidate_src:
        raise CommandError(f"{task.module}: the file has no ModelNew to {kind}")
    req = runners.JobRequest(kind, task, uri, doc.text_hash if doc else "", time=time, strategy=strategy)
    services = ls.services

    def work(ctx: JobContext) -> JobOutcome:
        try:
            return runners.run(ctx, services, req)
        except Unavailable as e:
            return JobOutcome(str(e), ok=False)

    snap = ls.jobs.submit(task.key, kind, work, uri=uri, module=task.module)
    log.info("job %d: %s %s", snap.id, kind, task.key)
    return snap.id


def _fail(ls: KernelLanguageServer, message: str) -> dict[str, Any]:
    ls.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"kernel-lsp: {message}"))
    return {"jobId": None, "error": message}


def verify_on_save(ls: KernelLanguageServer, uri: str) -> int | None:
    """On save of a file with ModelNew and a reference module: check ModelNew and time it against the reference
    (the diagnostic says whether it is faster). Saving again cancels the check still running or queued: only the
    last saved text is checked."""
    doc = ls.docs.get(uri)
    if doc is None or doc.syntax_error or doc.skipped:
        return None
    a = doc.analysis
    if a.model_new is None or not a.references or not a.has_inputs:
        return None
    module = (a.module("Model") or a.references[0]).name
    key = ls.docs.task_key(uri, module)
    history = ls.services.history_if_exists()
    rec = verify.load(history, key)
    if rec is not None and rec.current(doc.text_hash):
        log.info("%s: unchanged since its last check, not verified again", ls.docs.label(uri))
        return None
    if history is not None and _checked_as_accepted(ls, doc, module, key, history):
        ls.document_changed(uri)
        return None
    for s in ls.jobs.active(key):
        if s.kind == "verify":
            ls.jobs.cancel(s.id)
    try:
        return start_job(ls, "verify", uri, module, time=True)
    except (TaskError, CommandError) as e:
        log.info("no verify on save: %s", e)
        return None


def _checked_as_accepted(ls: KernelLanguageServer, doc: DocState, module: str, key: str, history: History) -> bool:
    """The file's ModelNew is an accepted candidate, unchanged, for this version of the module: its verdict is the
    check (recorded as the file's), with no rebuild of a kernel the generate job built moments before."""
    named = edits.accepted_block(doc.text)
    if named is None or named[1] != module:
        return False
    cand = history.candidate(key, named[0])
    if cand is None or cand.verdict is None or cand.fingerprint != ls.docs.fingerprint(doc, module) \
            or not edits.is_unchanged_block(doc.text, cand.source, cand.number, module):
        return False
    verify.save(history, key, verify.VerifyRecord(cand.fingerprint, doc.text_hash, source_hash(cand.source),
                                                  cand.verdict, accepted=cand.number))
    log.info("%s: ModelNew is candidate %d as accepted: its verdict stands, not built again", ls.docs.label(doc.uri),
             cand.number)
    return True


def register(server: KernelLanguageServer) -> None:
    def make(kind: str):
        async def command(*args: Any) -> dict[str, Any]:
            try:
                arg = _arg(args)
                if isinstance(arg.get("uri"), str):
                    await server.docs.ready(arg["uri"])
                uri, module = target(server, arg)
                return {"jobId": start_job(server, kind, uri, module, strategy=strategy_arg(arg))}
            except (TaskError, CommandError, RuntimeError) as e:
                return _fail(server, str(e))
        return command

    for kind, name in JOB_COMMANDS.items():
        server.command(name)(make(kind))

    @server.command(CANCEL)
    def cancel(*args: Any) -> dict[str, Any]:
        try:
            arg = _arg(args)
        except CommandError as e:
            return {"cancelled": [], "error": str(e)}
        if "jobId" in arg:
            try:
                job_id = int(arg["jobId"])
            except (TypeError, ValueError):
                return {"cancelled": [], "error": f"bad jobId {arg['jobId']!r}"}
            return {"cancelled": [job_id] if server.jobs.cancel(job_id) else []}
        try:
            uri, module = target(server, arg)
        except CommandError as e:
            return {"cancelled": [], "error": str(e)}
        return {"cancelled": server.jobs.cancel_key(server.docs.task_key(uri, module))}

    @server.command(LIST_JOBS)
    def list_jobs(*args: Any) -> list[dict[str, Any]]:
        return [s.public() for s in server.jobs.snapshots()]

    @server.command(LIST_CANDIDATES)
    def list_candidates(*args: Any) -> list[dict[str, Any]]:
        try:
            uri, module = target(server, _arg(args))
        except CommandError as e:
            _fail(server, str(e))
            return []
        doc = server.docs.get(uri)
        fp = server.docs.fingerprint(doc, module) if doc and doc.analysis.module(module) else ""
        res = results.load(server.services.history_if_exists(), server.docs.task_key(uri, module), fp)
        return [results.candidate_row(c, res) for c in res.candidates]

    @server.command(MODULE_AT)
    async def module_at_line(*args: Any) -> dict[str, Any]:
        try:
            arg = _arg(args)
            if isinstance(arg.get("uri"), str):
                await server.docs.ready(arg["uri"])
            return module_at(server, arg)
        except CommandError as e:
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
            "lensRefreshes": ls.lens_refreshes,
            "threads": sorted(t.name for t in threading.enumerate()),
            "watch": {"events": ls.watcher.events, "observer": ls.watcher.observing},
            "analyser": {"analysed": ls.analyser.analysed, "pids": ls.analyser.pids()},
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
