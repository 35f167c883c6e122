"""The server's long-lived services: settings, the history store and the evaluator (its worker pool).

The evaluator is started lazily by the first job that needs it (in a job thread, never on the event loop) and
replaced when settings it depends on change; a replaced one is closed once no job uses it any more.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from ..config import Settings, state_path
from ..history import History
from ..jobs.runners import Unavailable

log = logging.getLogger(__name__)

_EVAL_KEYS = ("device", "gpu", "atol", "rtol", "trials", "compile_timeout", "run_timeout", "compile_workers",
              "timing_calls", "seed")


class ServerServices:
    def __init__(self, settings: Settings | None = None, root: Path | None = None):
        self.settings = settings or Settings()
        self.root = root
        self._lock = threading.RLock()
        self._history: History | None = None
        self._history_path: Path | None = None
        self._evaluator: Any = None
        self._retired: list[Any] = []
        self._prompts: Any = None  # one PromptLibrary for every job; reloaded when templates change on disk

    def configure(self, settings: Settings, root: Path | None) -> None:
        with self._lock:
            old = self.settings
            self.settings, self.root = settings, root
            if any(getattr(old, k) != getattr(settings, k) for k in _EVAL_KEYS) and self._evaluator is not None:
                log.info("evaluator settings changed: the next job starts a new evaluator")
                self._retired.append(self._evaluator)
                self._evaluator = None
            if old.prompts_dir != settings.prompts_dir:
                self._prompts = None
            if self._history is not None and self._state_dir() != self._history_path:
                log.info("state folder changed to %s", self._state_dir())
                self._history.close()
                self._history = None

    def _state_dir(self) -> Path:
        return state_path(self.settings, self.root or Path.cwd())

    def history(self) -> History:
        with self._lock:
            if self._history is None:
                self._history_path = self._state_dir()
                self._history = History(self._history_path)
            return self._history

    def history_if_exists(self) -> History | None:
        """The history, opened only if its database is already there (read paths must not create folders)."""
        with self._lock:
            if self._history is None and not (self._state_dir() / "history.sqlite").exists():
                return None
        return self.history()

    def evaluator(self) -> Any:
        with self._lock:
            if self._evaluator is None:
                try:
                    from evaluator import Evaluator
                except ImportError as e:
                    raise Unavailable(f"evaluator unavailable: {e}") from None
                from ..cli import settings_to_eval

                log.info("starting the evaluator")
                self._evaluator = Evaluator(settings_to_eval(self.settings))
            return self._evaluator

    def prompts(self) -> Any:
        """The prompt templates (built-in, overridden by the workspace's `prompts_dir`), or None if unavailable."""
        with self._lock:
            if self._prompts is None:
                try:
                    from ..generation import PromptLibrary
                except ImportError:
                    return None
                d = self.settings.prompts_dir
                folder = None
                if d:
                    p = Path(d).expanduser()
                    folder = p if p.is_absolute() else (self.root or Path.cwd()) / p
                self._prompts = PromptLibrary(folder)
            return self._prompts

    def reload_prompts(self) -> None:
        with self._lock:
            lib = self._prompts
        if lib is not None:
            lib.reload()

    def device_info(self) -> dict[str, Any]:
        with self._lock:
            ev = self._evaluator
        if ev is None:
            return {}
        try:
            return dict(ev.device_info())
        except Exception as e:  # noqa: BLE001
            return {"error": str(e)}

    def close_retired(self) -> None:
        with self._lock:
            retired, self._retired = self._retired, []
        for ev in retired:
            _close(ev)

    def close(self) -> None:
        with self._lock:
            ev, self._evaluator = self._evaluator, None
            retired, self._retired = self._retired, []
            hist, self._history = self._history, None
        for e in [*retired, ev]:
            if e is not None:
                _close(e)
        if hist is not None:
            hist.close()


def _close(ev: Any) -> None:
    try:
        ev.close()
    except Exception:
        log.exception("closing the evaluator failed")
