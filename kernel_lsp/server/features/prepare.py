"""A module's reference made ready while its user reads or edits it (with `warmStart`): once an open document is
quiet, each of its references is profiled (the profile kept in the history for that version) and loaded in the
evaluator's referee, and a local model is loaded (the services keep it for every job), so the click that follows
waits only for its candidates. One preparation at a time, in a thread of its own; a newer version of a document
cancels the preparation of an older one. A reference that fails is left for the click to report (its job says
why); nothing here is shown to the user."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from ...tasks import Task, TaskError

if TYPE_CHECKING:
    from ...generation import Engine
    from ..server import KernelLanguageServer

log = logging.getLogger(__name__)

MAX_MODULES = 2  # references prepared per document (the evaluator keeps three referees)
QUIET_S = 1.0  # how long a document stays unchanged before its reference is prepared (not between keystrokes)


def _id(task: Task, generation: int) -> tuple[str, str]:
    """A version of a task as an evaluator sees it: its reference's text (a comment changes the referee's key),
    its fingerprint (the history's key of its profile), and which evaluator (one started after a settings change
    has no referee of it yet)."""
    return task.key, f"{task.fingerprint}:{hashlib.sha256(task.reference_src.encode()).hexdigest()[:16]}:{generation}"


class Preparer:
    def __init__(self, ls: KernelLanguageServer) -> None:
        self.ls = ls
        self._lock = threading.Lock()
        self._wanted: OrderedDict[str, list[Task]] = OrderedDict()  # uri -> its newest version's tasks
        self._last: dict[str, float] = {}  # uri in _wanted -> when its version not yet prepared was last seen
        self._seen: set[tuple[str, str]] = set()  # task versions (_id) prepared or being prepared
        self._current: tuple[str, tuple[str, str], threading.Event] | None = None  # uri, task version, its cancel
        self._references: dict[str, list[str]] = {}  # uri -> its newest version's references
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.prepared: list[dict] = []  # what was done, for debugInfo: module, fingerprint, seconds, outcome

    # --- on the event loop ------------------------------------------------------------------------------------
    def document(self, uri: str) -> None:
        if self._closed or not self.ls.services.settings.warm_start:
            return
        doc = self.ls.docs.known(uri)
        if doc is None or not doc.open:
            return
        tasks = self._tasks(uri)
        if not tasks:
            return
        self._supersede(uri, [t.reference_src for t in tasks])
        gen = self.ls.services.generation
        with self._lock:
            fresh = [t for t in tasks if _id(t, gen) not in self._seen]
            if not fresh:
                return
            self._wanted[uri] = fresh
            self._wanted.move_to_end(uri)
            self._last[uri] = time.monotonic()
            cur = self._current
            if cur is not None and cur[0] == uri and all(cur[1] != _id(t, gen) for t in tasks):
                cur[2].set()  # an older version of this document: its preparation is of no more use
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="klsp-prepare", daemon=True)
                self._thread.start()
        self._wake.set()

    def _supersede(self, uri: str, now: list[str]) -> None:
        """The document's older version's references expect no more candidates: work the evaluator began ahead for
        them (a torch.compile of seconds, holding the device) stops, and begins no more, a job of theirs still running
        included. One another document holds is left alone; the evaluator is told every document's references as
        the current ones (an undo back to a superseded version makes it current again)."""
        before = self._references.get(uri, [])
        self._references[uri] = now
        current = list(dict.fromkeys(r for refs in self._references.values() for r in refs))
        gone = [r for r in before if r not in current]
        ev = self.ls.services.started_evaluator() if gone else None
        superseded = getattr(ev, "superseded", None)
        for r in gone if superseded is not None else []:
            try:
                superseded(r, by=current)
            except Exception:  # noqa: BLE001  (an evaluator closing meanwhile: nothing of it to stop)
                log.debug("superseded", exc_info=True)

    def configured(self) -> None:
        """New settings: a replaced evaluator has none of the references prepared in the old one, and `warmStart`
        may have been turned on; every open document is looked at again."""
        for uri in self.ls.docs.uris():
            self.document(uri)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wanted.clear()
            self._last.clear()
            self._references.clear()
            if self._current is not None:
                self._current[2].set()
        self._wake.set()

    def _tasks(self, uri: str) -> list[Task]:
        doc = self.ls.docs.get(uri)
        if doc is None or doc.syntax_error or doc.skipped:
            return []
        out = []
        for m in doc.analysis.references[:MAX_MODULES]:
            try:
                out.append(self.ls.docs.task(uri, m.name))
            except TaskError:
                continue
        return out

    # --- in its own thread ------------------------------------------------------------------------------------
    def _loop(self) -> None:
        wait: float | None = None
        while True:
            self._wake.wait(wait)
            with self._lock:
                self._wake.clear()
                if self._closed:
                    return
                now = time.monotonic()
                quiet = [u for u in self._wanted if now - self._last[u] >= QUIET_S]
                if not quiet:  # still being edited: look again once the first one has been quiet long enough
                    wait = max(0.05, min(self._last[u] + QUIET_S for u in self._wanted) - now) \
                        if self._wanted else None
                    continue
                wait = 0.0
                uri = quiet[0]
                tasks = self._wanted.pop(uri)
                del self._last[uri]
            for task in tasks:
                self._one(uri, task)

    def _one(self, uri: str, task: Task) -> None:
        seen = _id(task, self.ls.services.generation)
        cancel = threading.Event()
        with self._lock:
            if self._closed or seen in self._seen:
                return
            self._seen.add(seen)
            self._current = (uri, seen, cancel)
        t0 = time.monotonic()
        outcome = "ready"
        engine = None
        try:
            engine = self.ls.services.engine()
            engine.prepare(task, cancel)
        except Exception as e:  # noqa: BLE001  (the click reports what failed, with its own words)
            outcome = "cancelled" if cancel.is_set() else f"not prepared: {type(e).__name__}: {e}"
        finally:
            if engine is not None:
                if outcome == "ready" and not cancel.is_set():
                    self._load_model(engine)
                engine.close()
            with self._lock:
                self._current = None
                if cancel.is_set():
                    self._seen.discard(seen)  # a later look at this version may try again (a failure is the click's)
        secs = time.monotonic() - t0
        log.info("reference of %s %s (%.1f s)", task.key, outcome, secs)
        self.prepared.append({"module": task.key, "fingerprint": task.fingerprint, "seconds": round(secs, 2),
                              "outcome": outcome})
        del self.prepared[:-20]


    @staticmethod
    def _load_model(engine: Engine) -> None:
        """A local model loaded now, kept by the services for the click; one that cannot load is left for the
        click to report (the reference is ready either way)."""
        try:
            engine.load_model()
        except Exception as e:  # noqa: BLE001
            log.info("the model was not loaded ahead: %s: %s", type(e).__name__, e)


def register(server: KernelLanguageServer) -> None:
    preparer = Preparer(server)
    server.events.document.append(preparer.document)
    server.events.configured.append(preparer.configured)
    server.events.closing.append(preparer.close)
    server.events.debug["prepared"] = lambda: list(preparer.prepared)
    server.events.debug["model"] = lambda: server.services.model.state()
