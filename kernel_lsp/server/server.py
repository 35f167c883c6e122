"""The pygls server object: what it holds, and the events that flow through it.

- documents: the DocumentStore (analysis per document), re-analysed when the client sends changes;
- jobs: the JobManager, and `starter` (jobs/start.py: job start and the save -> verify policy); job changes come
  from job threads through :meth:`_job_changed_from_thread` to :meth:`job_changed` on the event loop;
- services: the workspace's WorkspaceServices (settings, history, evaluator, engine);
- events: what features subscribe to when they register (:class:`Events`): a job changed, a document's analysis or
  results changed, the code lenses may read differently, the server started, it is closing.

The server imports no feature: each feature lives in its own module under `features/`, registers its handlers and
its subscriptions with `register(server)` and imports this class for typing only; `main.create_server()`
puts them together. Handlers run on the event loop and must stay fast: anything long runs as a job in the
JobManager's own executor (never pygls's thread pool, which also reads stdin).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pygls.io_ import StdinAsyncReader, StdoutWriter
from pygls.lsp.server import LanguageServer

from .. import __version__
from ..config import Settings
from ..documents.store import BackgroundAnalyser, DocumentStore
from ..history.results import CandidateCache
from ..jobs import JobManager, JobSnapshot
from ..jobs.start import JobStarter
from ..services import WorkspaceServices
from . import protocol

log = logging.getLogger(__name__)


@dataclass
class Events:
    """The server's events; features subscribe in their `register(server)`. Every callback runs on the event
    loop."""
    job: list[Callable[[JobSnapshot], None]] = field(default_factory=list)  # every change of a job
    document: list[Callable[[str], None]] = field(default_factory=list)  # a document's analysis or results
    lenses: list[Callable[[], None]] = field(default_factory=list)  # the code lenses may read differently
    started: list[Callable[[], None]] = field(default_factory=list)  # after `initialized`
    configured: list[Callable[[], None]] = field(default_factory=list)  # settings applied (initial ones too)
    closing: list[Callable[[], None]] = field(default_factory=list)  # shutdown, before jobs and services stop
    debug: dict[str, Callable[[], Any]] = field(default_factory=dict)  # kernel-lsp.debugInfo's keys

    @staticmethod
    def fire(callbacks: list[Callable[..., None]], *args: Any) -> None:
        for cb in list(callbacks):
            try:
                cb(*args)
            except Exception:
                log.exception("%s failed", getattr(cb, "__qualname__", cb))


class KernelLanguageServer(LanguageServer):
    protocol: protocol.KernelProtocol

    def __init__(self, name: str = "kernel-lsp", version: str = __version__):
        super().__init__(name, version, protocol_cls=protocol.KernelProtocol)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.root: Path | None = None
        self.client_settings: dict[str, Any] = {}  # the settings layer in force (init options + configuration)
        self.init_layer: dict[str, Any] = {}  # from initializationOptions
        self.services = WorkspaceServices(interactive=True)
        self.analyser = BackgroundAnalyser()
        self.docs = DocumentStore(analyser=self.analyser, post=self.call_soon, on_analysed=self.document_analysed)
        self.jobs = JobManager(on_change=self._job_changed_from_thread, max_workers=2)
        self.starter = JobStarter(self.docs, self.services, self.jobs)  # job start and the save -> verify policy
        self.results_cache = CandidateCache()  # candidates per task key, dropped on job changes
        self.events = Events()
        self.prompt_reloads = 0  # how many times prompt templates were reloaded (debugInfo)
        self._jobs_seen: dict[int, tuple[str, int]] = {}  # job id -> (state, results) last acted on
        self._closed = False
        self._signalled: int | None = None

    @property
    def settings(self) -> Settings:
        return self.services.settings

    # --- capabilities of the client ----------------------------------------------------------------------------
    def client_supports(self, *path: str) -> bool:
        node: Any = self.client_capabilities
        for name in path:
            node = getattr(node, name, None)
            if node is None:
                return False
        return bool(node)

    # --- the event loop ----------------------------------------------------------------------------------------
    def bind_loop(self) -> None:
        if self.loop is None:
            try:
                self.loop = asyncio.get_running_loop()
            except RuntimeError:
                self.loop = asyncio.get_event_loop()

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the event loop, from any thread (dropped once the loop is closed)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:  # loop closed while shutting down
            pass

    # --- events ------------------------------------------------------------------------------------------------
    def _job_changed_from_thread(self, snap: JobSnapshot) -> None:
        self.call_soon(lambda: self.job_changed(snap))

    def job_changed(self, snap: JobSnapshot) -> None:
        """A job changed (on the event loop): the job subscribers (progress) always; when it published a result or
        ended, the document; when its state or results changed, the code lenses."""
        self.results_cache.invalidate(snap.key)
        self.events.fire(self.events.job, snap)
        before = self._jobs_seen.get(snap.id)
        now = (snap.state, snap.results)
        if before == now:
            return
        if snap.final:
            self._jobs_seen.pop(snap.id, None)
        else:
            self._jobs_seen[snap.id] = now
        if snap.uri and (snap.final or snap.results != (before[1] if before else 0)):
            self.document_changed(snap.uri)
        if snap.final and not self.jobs.active():
            self.services.close_retired()
        self.refresh_lenses()

    def document_changed(self, uri: str) -> None:
        """A document was re-analysed, or results for it changed."""
        self.events.fire(self.events.document, uri)

    def document_analysed(self, uri: str) -> None:
        """A large document's analysis is back from the background process."""
        self.document_changed(uri)
        self.refresh_lenses()

    def documents_changed(self) -> None:
        """Settings changed: every known document may read differently."""
        for uri in self.docs.uris():
            self.document_changed(uri)

    def refresh_lenses(self) -> None:
        """The code lenses may read differently (the lenses feature asks the editor to refresh them)."""
        self.events.fire(self.events.lenses)

    def prompts_changed(self, folder: Path) -> None:
        """Prompt templates under `folder` changed on disk: the next prompt uses them."""
        self.prompt_reloads += 1
        self.services.reload_prompts()
        log.info("prompt templates in %s changed: reloaded", folder)

    def started(self) -> None:
        """After `initialized`: tell the features (the watcher starts); start the evaluator in the background
        (`warmStart`)."""
        self.events.fire(self.events.started)
        if self.services.settings.warm_start:
            threading.Thread(target=self._warm, name="klsp-warm", daemon=True).start()

    def _warm(self) -> None:
        try:
            self.services.warm()
            log.info("evaluator starting in the background (warmStart)")
        except Exception as e:  # noqa: BLE001  (the first job reports a start failure with its own verdict)
            log.warning("could not start the evaluator in the background: %s", e)

    # --- lifecycle ---------------------------------------------------------------------------------------------
    def close_services(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.events.fire(self.events.closing)
        log.info("stopping jobs and the evaluator")
        self.jobs.shutdown(wait=2.5)
        self.services.close()
        self.docs.shutdown()

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Errors are logged, never shown as pop-ups: a failed request gets its JSON-RPC error response, and noise
        on the connection is answered by the protocol (see protocol.py)."""
        log.error("%s: %s", getattr(source, "__name__", source), error)

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """pygls's stdio server, with the message loop of protocol.py."""
        self._stop_event = threading.Event()
        reader = StdinAsyncReader(stdin or sys.stdin.buffer, self.thread_pool)
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        try:
            protocol.run(self._stop_event, reader, self.protocol)
        except BrokenPipeError:
            log.error("the connection to the client is lost: shutting down")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def handle_signals(self) -> None:
        """SIGTERM / SIGINT / SIGHUP end the server like `exit` does: jobs, evaluator workers and their compilers
        are stopped first, then the process exits (with 128 + the signal's number)."""
        def on_signal(signum: int, frame: Any) -> None:
            if self._signalled is not None:
                return
            self._signalled = signum
            log.info("signal %d: shutting down", signum)
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)

    def shutdown(self) -> None:  # the connection ended, with or without `shutdown`/`exit`, or a signal came
        self.close_services()
        if self._signalled is not None:
            # pygls would now wait for its stdin reader thread, which waits for a client that is still there.
            logging.shutdown()
            os._exit(128 + self._signalled)
        super().shutdown()
