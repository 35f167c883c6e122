"""The pygls server object and the wiring of its features.

Every feature lives in its own module under `features/` and exposes `register(server)`. Handlers are plain
functions running on the event loop and must stay fast: anything long runs as a job in the JobManager's own
executor (never pygls's thread pool, which also reads stdin).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from .. import __version__
from ..config import Settings
from ..jobs import JobManager, JobSnapshot
from .results import CandidateCache
from .services import ServerServices
from .workspace_state import DocumentStore

log = logging.getLogger(__name__)


class KernelLanguageServer(LanguageServer):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.services = ServerServices()
        self.docs = DocumentStore()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.jobs = JobManager(on_change=self._job_changed, max_workers=2)
        self.job_listeners: list[Any] = []  # callables(JobSnapshot), run on the event loop
        self.document_listeners: list[Any] = []  # callables(uri), run on the event loop after re-analysis
        self.client_settings: dict[str, Any] = {}  # the settings layer in force (init options + configuration)
        self.init_layer: dict[str, Any] = {}  # from initializationOptions
        self.root: Path | None = None
        self.prompt_reload_hooks: list[Any] = []  # callables(folder): prompt templates changed on disk
        self.start_hooks: list[Any] = []  # run once after `initialized`
        self.close_hooks: list[Any] = []  # run on shutdown / exit / lost connection
        self.watcher: Any = None
        self.results_cache = CandidateCache()  # candidates per task key, dropped on job changes
        self.prompt_reloads = 0  # how many times prompt templates were reloaded (debugInfo)
        self._closed = False

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

    # --- jobs: from worker threads to the loop -----------------------------------------------------------------
    def bind_loop(self) -> None:
        if self.loop is None:
            try:
                self.loop = asyncio.get_running_loop()
            except RuntimeError:
                self.loop = asyncio.get_event_loop()

    def _job_changed(self, snap: JobSnapshot) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._dispatch_job, snap)
        except RuntimeError:  # loop closed while shutting down
            pass

    def _dispatch_job(self, snap: JobSnapshot) -> None:
        for listener in list(self.job_listeners):
            try:
                listener(snap)
            except Exception:
                log.exception("job listener failed")

    def document_changed(self, uri: str) -> None:
        for listener in list(self.document_listeners):
            try:
                listener(uri)
            except Exception:
                log.exception("document listener failed")

    # --- lifecycle ---------------------------------------------------------------------------------------------
    def close_services(self) -> None:
        if self._closed:
            return
        self._closed = True
        for hook in self.close_hooks:
            try:
                hook()
            except Exception:
                log.exception("close hook failed")
        log.info("stopping jobs and the evaluator")
        self.jobs.shutdown(wait=2.5)
        self.services.close()


    def shutdown(self) -> None:  # the connection ended, with or without `shutdown`/`exit`
        self.close_services()
        super().shutdown()


def create_server() -> KernelLanguageServer:
    server = KernelLanguageServer("kernel-lsp", __version__)
    from .features import FEATURES

    for feature in FEATURES:
        feature.register(server)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: KernelLanguageServer, params: None) -> None:
        ls.close_services()

    @server.feature(types.EXIT)
    def exit_(ls: KernelLanguageServer, params: None) -> None:
        ls.close_services()

    return server
