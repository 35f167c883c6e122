"""watchdog on the workspace: Python files changed outside the editor (git checkout, another tool) are re-read
and re-analysed, so results whose module changed go stale at once; when prompt templates under `prompts_dir`
change, the server's `prompts_changed` reloads them. The server starts and stops the watcher."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pygls.uris import from_fs_path

if TYPE_CHECKING:
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

SETTLE_S = 0.2
_SKIP_PARTS = {".git", "__pycache__", ".venv", "node_modules", ".mypy_cache", ".pytest_cache"}


class WorkspaceWatcher:
    def __init__(self, ls: KernelLanguageServer):
        self.ls = ls
        self._observer: Any = None
        self._pending: set[str] = set()
        self._scheduled = False
        self.events = 0  # seen by the observer thread (debugInfo)

    def start(self, root: Path) -> None:
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:
            log.warning("watchdog is not installed: files changed outside the editor are not noticed")
            return
        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: Any) -> None:
                watcher.events += 1
                if event.is_directory or event.event_type in ("opened", "closed_no_write"):
                    return
                for p in (getattr(event, "src_path", ""), getattr(event, "dest_path", "")):
                    if p:
                        watcher._from_thread(p if isinstance(p, str) else p.decode(errors="replace"))

        self._observer = Observer()
        self._observer.daemon = True
        try:
            self._observer.schedule(Handler(), str(root), recursive=True)
            self._observer.start()
            log.info("watching %s", root)
        except OSError as e:
            log.warning("cannot watch %s: %s", root, e)
            self._observer = None

    @property
    def observing(self) -> bool:
        return self._observer is not None

    def stop(self) -> None:
        obs, self._observer = self._observer, None
        if obs is not None:
            obs.stop()
            obs.join(timeout=2)

    # --- from the observer thread to the loop ---------------------------------------------------------------
    def _from_thread(self, path: str) -> None:
        self.ls.call_soon(lambda: self._queue(path))

    def _queue(self, path: str) -> None:
        self._pending.add(path)
        if not self._scheduled and self.ls.loop is not None:
            self._scheduled = True
            self.ls.loop.call_later(SETTLE_S, self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        paths, self._pending = self._pending, set()
        prompts_dir = self.ls.services.prompts_dir()
        prompts = prompts_dir.resolve() if prompts_dir is not None else None
        state = self.ls.services.state_dir().resolve()
        reload_prompts = False
        for raw in paths:
            p = Path(raw)
            if _SKIP_PARTS & set(p.parts) or _under(p, state):
                continue
            if prompts is not None and _under(p, prompts):
                reload_prompts = True
                continue
            if p.suffix == ".py":
                self.changed_on_disk(p)
        if reload_prompts and prompts is not None:
            self.ls.prompts_changed(prompts)

    def changed_on_disk(self, path: Path) -> None:
        uri = from_fs_path(str(path))
        if uri is None:
            return
        doc = self.ls.docs.known(uri)
        if doc is not None and doc.open:
            return  # the editor owns open documents: it sends their changes itself
        if doc is None or not path.exists():
            self.ls.docs.forget(uri)
            return
        self.ls.docs.load_from_disk(uri)
        log.info("%s changed on disk: re-analysed", path)
        self.ls.document_changed(uri)


def _under(p: Path, folder: Path) -> bool:
    try:
        p.resolve().relative_to(folder)
        return True
    except (ValueError, OSError):
        return False


def register(server: KernelLanguageServer) -> None:
    """Watches the workspace from `initialized` to shutdown."""
    watcher = WorkspaceWatcher(server)

    def start() -> None:
        if server.root is not None and server.root.is_dir():
            watcher.start(server.root)

    server.events.started.append(start)
    server.events.closing.append(watcher.stop)
    server.events.debug["watch"] = lambda: {"events": watcher.events, "observer": watcher.observing}
