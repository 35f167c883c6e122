"""Starting jobs on a document's modules, and the save → verify policy.

A front end (the language server's commands and its save handler) names a document and a module; this turns that
into a job on the job manager: the task read from the document store, the runner, the workspace's services. What
a save does is decided here too: nothing for a file without ModelNew, an unchanged file or an accepted candidate
that is still as it was accepted; otherwise one check of the last saved text, replacing one still queued or
running. No LSP types here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..documents import edits
from ..documents.sources import source_hash
from ..documents.store import DocState, DocumentStore
from ..history import History, verify
from ..services import Unavailable, WorkspaceServices
from ..tasks import TaskError
from . import runners
from .manager import JobContext, JobManager, JobOutcome

log = logging.getLogger(__name__)


class JobRefused(ValueError):
    """The job cannot start on that module (no ModelNew to verify, ...); the message is for users."""


@dataclass(frozen=True)
class SaveCheck:
    """What a save led to: the verify job started (`job_id`), or the accepted candidate's verdict recorded as the
    file's check (`recorded`: the document's results changed without a job), or neither."""
    job_id: int | None = None
    recorded: bool = False


class JobStarter:
    def __init__(self, docs: DocumentStore, services: WorkspaceServices, jobs: JobManager):
        self.docs = docs
        self.services = services
        self.jobs = jobs

    def start(self, kind: str, uri: str, module: str, *, time: bool = True, strategy: str | None = None) -> int:
        """Submit a `kind` job on `module` of the document `uri`; its id. TaskError or JobRefused when the module
        cannot be run (the message is for users)."""
        doc = self.docs.get(uri)
        task = self.docs.task(uri, module)
        if kind in ("verify", "refine") and not task.candidate_src:
            raise JobRefused(f"{task.module}: the file has no ModelNew to {kind}")
        req = runners.JobRequest(kind, task, uri, doc.text_hash if doc else "", time=time, strategy=strategy)
        services = self.services

        def work(ctx: JobContext) -> JobOutcome:
            try:
                return runners.run(ctx, services, req)
            except Unavailable as e:
                return JobOutcome(str(e), ok=False)

        snap = self.jobs.submit(task.key, kind, work, uri=uri, module=task.module)
        log.info("job %d: %s %s", snap.id, kind, task.key)
        return snap.id

    def on_save(self, uri: str) -> SaveCheck:
        """On save of a file with ModelNew and a reference module: check ModelNew and time it against the reference
        (the diagnostic says whether it is faster). Saving again cancels the check still running or queued: only
        the last saved text is checked."""
        doc = self.docs.get(uri)
        if doc is None or doc.syntax_error or doc.skipped:
            return SaveCheck()
        a = doc.analysis
        if a.model_new is None or not a.references or not a.has_inputs:
            return SaveCheck()
        module = (a.module("Model") or a.references[0]).name
        key = self.docs.task_key(uri, module)
        history = self.services.history_if_exists()
        rec = verify.load(history, key)
        if rec is not None and rec.current(doc.text_hash):
            log.info("%s: unchanged since its last check, not verified again", self.docs.label(uri))
            return SaveCheck()
        if history is not None and self._checked_as_accepted(doc, module, key, history):
            return SaveCheck(recorded=True)
        for s in self.jobs.active(key):
            if s.kind == "verify":
                self.jobs.cancel(s.id)
        try:
            return SaveCheck(job_id=self.start("verify", uri, module, time=True))
        except (TaskError, JobRefused) as e:
            log.info("no verify on save: %s", e)
            return SaveCheck()

    def _checked_as_accepted(self, doc: DocState, module: str, key: str, history: History) -> bool:
        """The file's ModelNew is an accepted candidate, unchanged, for this version of the module: its verdict is
        the check (recorded as the file's), with no rebuild of a kernel the generate job built moments before."""
        named = edits.accepted_block(doc.text)
        if named is None or named[1] != module:
            return False
        cand = history.candidate(key, named[0])
        if cand is None or cand.verdict is None or cand.fingerprint != self.docs.fingerprint(doc, module) \
                or not edits.is_unchanged_block(doc.text, cand.source, cand.number, module):
            return False
        verify.save(history, key, verify.VerifyRecord(cand.fingerprint, doc.text_hash, source_hash(cand.source),
                                                      cand.verdict, accepted=cand.number))
        log.info("%s: ModelNew is candidate %d as accepted: its verdict stands, not built again",
                 self.docs.label(doc.uri), cand.number)
        return True
