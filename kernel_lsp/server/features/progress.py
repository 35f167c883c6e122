"""Jobs as the client sees them: `$/progress` (cancellable) per job and the `kernelLsp/jobs` notification on every
change (:meth:`ProgressBridge.on_job`, subscribed to the server's job events; diagnostics and lenses follow in
`KernelLanguageServer.job_changed`). Runs on the event loop only."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lsprotocol import types

from ...jobs import JobSnapshot
from ...jobs.manager import QUEUED

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

JOBS_NOTIFICATION = "kernelLsp/jobs"
TOKEN_PREFIX = "kernel-lsp/job/"


@dataclass
class _Progress:
    token: str
    ready: bool = False
    ended: bool = False
    last: JobSnapshot | None = None


def _title(s: JobSnapshot) -> str:
    return f"kernel-lsp: {'best-of-n' if s.kind == 'bestOfN' else s.kind} {s.module}"


class ProgressBridge:
    def __init__(self, ls: KernelLanguageServer):
        self.ls = ls
        self._progress: dict[int, _Progress] = {}

    def token_job(self, token: str | int) -> int | None:
        t = str(token)
        if t.startswith(TOKEN_PREFIX) and t[len(TOKEN_PREFIX):].isdigit():
            return int(t[len(TOKEN_PREFIX):])
        return None

    def on_job(self, snap: JobSnapshot) -> None:
        # the progress first: a client that sees a job's final state has already seen its progress end
        self._progress_update(snap)
        ls = self.ls
        ls.protocol.notify(JOBS_NOTIFICATION, {"jobs": [s.public() for s in ls.jobs.snapshots()]})

    # --- $/progress ----------------------------------------------------------------------------------------------
    def _progress_update(self, snap: JobSnapshot) -> None:
        if not self.ls.client_supports("window", "work_done_progress"):
            return
        p = self._progress.get(snap.id)
        if p is None:
            if snap.final and snap.state != "failed" and snap.message.startswith("cancelled before"):
                return
            p = self._progress[snap.id] = _Progress(TOKEN_PREFIX + str(snap.id), last=snap)
            asyncio.ensure_future(self._create(snap.id, p))
            return
        p.last = snap
        if p.ready:
            self._send(snap.id, p)

    async def _create(self, job_id: int, p: _Progress) -> None:
        try:
            await self.ls.work_done_progress.create_async(p.token)
        except Exception as e:  # noqa: BLE001 - a client that refuses progress just gets none
            log.info("window/workDoneProgress/create refused: %s", e)
            self._progress.pop(job_id, None)
            return
        s = p.last
        assert s is not None
        self.ls.work_done_progress.begin(p.token, types.WorkDoneProgressBegin(
            title=_title(s), cancellable=True, message=s.message, percentage=s.percentage or 0))
        p.ready = True
        if s.final or s.state != QUEUED:
            self._send(job_id, p)

    def _send(self, job_id: int, p: _Progress) -> None:
        s = p.last
        if s is None or p.ended:
            return
        if s.final:
            p.ended = True
            self.ls.work_done_progress.end(p.token, types.WorkDoneProgressEnd(message=f"{s.state}: {s.message}"))
            self._progress.pop(job_id, None)
            self.ls.work_done_progress.tokens.pop(p.token, None)
        else:
            self.ls.work_done_progress.report(p.token, types.WorkDoneProgressReport(
                message=s.message, percentage=s.percentage, cancellable=True))


def register(server: KernelLanguageServer) -> None:
    bridge = ProgressBridge(server)
    server.events.job.append(bridge.on_job)

    @server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def cancel(params: types.WorkDoneProgressCancelParams) -> None:
        job_id = bridge.token_job(params.token)
        if job_id is not None:
            log.info("client cancelled job %d from its progress UI", job_id)
            server.jobs.cancel(job_id)
