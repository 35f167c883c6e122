"""A workspace's services, opened in one place: its settings, the evaluator's settings they map to, the history
store, the prompt templates, the evaluator and the generation engine. The language server, `kernel-lsp optimize`
and `kernel-lsp bench` all open them here, so the three read the same settings the same way.

The evaluator starts lazily, on the first call of :meth:`WorkspaceServices.evaluator` (from a job's thread, never
the server's event loop), and is replaced when a setting it depends on changes: what it depends on is derived
from :func:`kernel_lsp.oracle.eval_settings`, the one mapping, not kept as a list by hand. A replaced evaluator is
closed once no job uses it any more (:meth:`close_retired`). The editor's services are `interactive`: its verdicts do
not wait for the reference's torch.compile (the first verdict first; a later candidate has that figure).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluator.settings import EvalSettings

from .config import Settings, state_path
from .generation.backends.kept import KeptModel
from .history import History
from .oracle import Oracle, eval_settings

if TYPE_CHECKING:
    from .generation import Backend, Engine, PromptLibrary

log = logging.getLogger(__name__)

EvaluatorFactory = Callable[[EvalSettings], Oracle]


class Unavailable(RuntimeError):
    """A part of the system is not installed or cannot start. The message is for users."""


def _start_evaluator(settings: EvalSettings) -> Oracle:
    try:
        from evaluator import Evaluator
    except ImportError as e:
        raise Unavailable(f"evaluator unavailable: {e}") from None
    return Evaluator(settings)


class WorkspaceServices:
    """The services of one workspace (`root`: the folder whose `state_dir` holds the history)."""

    def __init__(self, settings: Settings | None = None, root: Path | None = None, *,
                 make_evaluator: EvaluatorFactory = _start_evaluator, interactive: bool = False):
        self.settings = settings or Settings()
        # the editor's: a verdict does not wait for its reference's torch.compile (its figure comes with a later
        # candidate); a sweep's and the CLI's verdicts all have it
        self.interactive = interactive
        self.root = root
        self._make_evaluator = make_evaluator
        self._lock = threading.RLock()
        self._history: History | None = None
        self._history_path: Path | None = None
        self._evaluator: Oracle | None = None
        self._evaluator_settings: EvalSettings | None = None
        self._retired: list[Oracle] = []
        self.generation = 0  # how many times the evaluator was replaced (what was prepared in an older one is gone)
        self._prompts: PromptLibrary | None = None  # one library for every job; reloaded when templates change
        self.model = KeptModel()  # the model every job uses: loaded by the first, kept for the next ones

    # --- settings --------------------------------------------------------------------------------------------
    def configure(self, settings: Settings, root: Path | None) -> None:
        """New settings (and root): the evaluator is replaced when its settings differ, the prompts and the history
        are reopened when their folders changed; everything else takes effect on the next job."""
        with self._lock:
            old_prompts = self.prompts_dir()
            self.settings, self.root = settings, root
            if self._evaluator is not None and self._eval_settings() != self._evaluator_settings:
                log.info("evaluator settings changed: the next job starts a new evaluator")
                self._retired.append(self._evaluator)
                self._evaluator = None
                self.generation += 1
            if self.prompts_dir() != old_prompts:
                self._prompts = None
            if self._history is not None and self.state_dir() != self._history_path:
                log.info("state folder changed to %s", self.state_dir())
                self._history.close()
                self._history = None

    def state_dir(self) -> Path:
        return state_path(self.settings, self.root or Path.cwd())

    def prompts_dir(self) -> Path | None:
        """The workspace's prompt templates folder (`prompts_dir`, relative to the root), if set."""
        d = self.settings.prompts_dir
        if not d:
            return None
        p = Path(d).expanduser()
        return p if p.is_absolute() else (self.root or Path.cwd()) / p

    # --- history ---------------------------------------------------------------------------------------------
    def history(self) -> History:
        with self._lock:
            if self._history is None:
                self._history_path = self.state_dir()
                self._history = History(self._history_path)
            return self._history

    def history_if_exists(self) -> History | None:
        """The history, opened only if its database is already there (read paths must not create folders)."""
        with self._lock:
            if self._history is None and not (self.state_dir() / "history.sqlite").exists():
                return None
        return self.history()

    # --- the oracle ------------------------------------------------------------------------------------------
    def evaluator(self) -> Oracle:
        with self._lock:
            if self._evaluator is None:
                es = self._eval_settings()
                log.info("starting the evaluator")
                self._evaluator = self._make_evaluator(es)
                self._evaluator_settings = es
            return self._evaluator

    def started_evaluator(self) -> Oracle | None:
        """The evaluator if one is open, without opening one (from the event loop)."""
        with self._lock:
            return self._evaluator

    def _eval_settings(self) -> EvalSettings:
        es = eval_settings(self.settings)
        return dataclasses.replace(es, compiled_wait=False) if self.interactive else es

    def warm(self) -> None:
        """Open the evaluator now and let it start in the background (the `warm_start` setting): the first click
        then finds the device probed, spare workers started and torch's precompiled header built."""
        ev = self.evaluator()
        ev.start_background()

    def evaluator_settings(self) -> EvalSettings:
        """The settings of the evaluator in use, else of the one the next job would start."""
        with self._lock:
            return self._evaluator_settings if self._evaluator is not None and self._evaluator_settings \
                else self._eval_settings()

    def device_info(self) -> dict[str, Any]:
        with self._lock:
            ev = self._evaluator
        if ev is None:
            return {}
        try:
            return dict(ev.device_info())
        except Exception as e:  # noqa: BLE001
            return {"error": str(e)}

    # --- generation ------------------------------------------------------------------------------------------
    def prompts(self) -> PromptLibrary:
        """The prompt templates: the built-in ones, overridden by the workspace's `prompts_dir`."""
        with self._lock:
            if self._prompts is None:
                from .generation import PromptLibrary

                self._prompts = PromptLibrary(self.prompts_dir())
            return self._prompts

    def reload_prompts(self) -> None:
        with self._lock:
            lib = self._prompts
        if lib is not None:
            lib.reload()

    def engine(self, backend: Backend | None = None) -> Engine:
        """A generation engine on these services. Without `backend` it uses the model the settings name, kept open
        for the services' next jobs (`model`); the caller closes the engine (which gives the model back)."""
        from .generation import Engine

        return Engine(self.settings, self.evaluator(), self.history(), backend, prompts=self.prompts(),
                      use_model=self.model.use)

    # --- lifecycle -------------------------------------------------------------------------------------------
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
        self.model.close()
        for e in [*retired, ev]:
            if e is not None:
                _close(e)
        if hist is not None:
            hist.close()

    def __enter__(self) -> WorkspaceServices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close(ev: Oracle) -> None:
    try:
        ev.close()
    except Exception:
        log.exception("closing the evaluator failed")
