"""One model kept open for every job of a long-lived process (the language server): a local GGUF is read and put on
the device once, not at every click (seconds for a 7B model each time). Jobs use it side by side (a backend's chat
takes one request at a time). New model settings open a new one; the old one closes once its last job is done. A
model no job used for `idle_s` is closed (its memory given back to the device's other work) and opened again by the
next job."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kernel_lsp.config import Settings

from . import Backend, BackendSpec, backend_spec, open_spec

log = logging.getLogger(__name__)

IDLE_S = 600.0  # a kept model no job used for this long is closed


class KeptModel:
    def __init__(self, idle_s: float = IDLE_S, opener: Callable[[BackendSpec], Backend] | None = None):
        self.idle_s = idle_s
        self._open = opener or open_spec
        self._lock = threading.Lock()
        self._spec: BackendSpec | None = None
        self._current: Backend | None = None
        self._users: dict[int, int] = {}  # id(backend) -> jobs using it (the current one and retired ones)
        self._retired: dict[int, Backend] = {}
        self._timer: threading.Timer | None = None
        self.opened = 0  # models opened so far (one per model setting, and again after an idle close)

    def use(self, settings: Settings) -> tuple[Backend, Callable[[], None]]:
        """The model the settings name, and the call that gives it back when the job is done. Raises
        BackendUnavailable (a model that does not exist), as opening it would."""
        spec = backend_spec(settings)
        old: Backend | None = None
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._current is None or spec != self._spec:
                if self._current is not None:
                    old = self._retire_locked()
                self._current, self._spec = self._open(spec), spec
                self.opened += 1
            backend = self._current
            self._users[id(backend)] = self._users.get(id(backend), 0) + 1
        if old is not None:
            _close(old)
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                self._release(backend)

        return backend, release

    def _retire_locked(self) -> Backend | None:
        """The current model is replaced: closed now when no job uses it (returned), else by its last job."""
        cur, self._current, self._spec = self._current, None, None
        if cur is None:
            return None
        if self._users.get(id(cur), 0) == 0:
            self._users.pop(id(cur), None)
            return cur
        self._retired[id(cur)] = cur
        return None

    def _release(self, backend: Backend) -> None:
        close: Backend | None = None
        with self._lock:
            left = self._users[id(backend)] = self._users.get(id(backend), 1) - 1
            if left > 0:
                return
            if id(backend) in self._retired:
                close = self._retired.pop(id(backend))
                self._users.pop(id(backend), None)
            elif backend is self._current and self.idle_s >= 0:
                self._timer = threading.Timer(self.idle_s, self._idle, args=(backend,))
                self._timer.daemon = True
                self._timer.start()
        if close is not None:
            _close(close)

    def _idle(self, backend: Backend) -> None:
        with self._lock:
            if backend is not self._current or self._users.get(id(backend), 0) > 0:
                return
            cur = self._retire_locked()
        if cur is not None:
            log.info("%s unused for %.0f s: closed", getattr(cur, "name", "the model"), self.idle_s)
            _close(cur)

    def state(self) -> dict[str, object]:
        """What is kept (the server's debugInfo): the model's name, whether it is loaded, the jobs using it."""
        with self._lock:
            cur = self._current
            return {"name": getattr(cur, "name", None) if cur is not None else None,
                    "loaded": bool(getattr(cur, "loaded", cur is not None)), "jobs": self._users.get(id(cur), 0),
                    "opened": self.opened}

    def close(self) -> None:
        """The process is done: every model closes now (jobs are over by then)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            models = [m for m in (self._current, *self._retired.values()) if m is not None]
            self._current, self._spec = None, None
            self._retired.clear()
            self._users.clear()
        for m in models:
            _close(m)


def _close(backend: Backend) -> None:
    try:
        backend.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        log.exception("closing the model failed")
