"""A candidate's build started while the model still writes: the text streams in piece by piece, and once a fenced
block that defines ModelNew is complete its code goes to the oracle's `prebuild` (the compile stage alone, into
the build cache). The model's explanation or summary after the block costs no compile time: when the whole answer
is in, the candidate's evaluation finds its build done (or joins the build under way).

What is evaluated is still the code extracted from the whole answer: a block built early and replaced later only
cost a build. Code inside the model's reasoning is never built early."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable

from .extract import ExtractionError, extract, strip_thinking

log = logging.getLogger(__name__)

_FENCE = re.compile(r"^[ \t]*```", re.M)
_OPEN_THOUGHT = re.compile(r"<(think|thinking|reasoning)>(?![\s\S]*</\1>)", re.I)
MAX_EARLY = 2  # builds started early per answer (a model that rewrites its block many times gets no more)

Prebuild = Callable[..., str]


class EarlyBuild:
    """Feed it the answer's pieces (`feed`, the backend's `on_text`); it starts each complete ModelNew block's
    build once, in a thread of its own, and never raises into the backend."""

    def __init__(self, prebuild: Prebuild, reference_src: str, cancel: threading.Event | None = None) -> None:
        self._prebuild = prebuild
        self._reference = reference_src
        self._cancel = cancel
        self._parts: list[str] = []
        self._fences = 0
        self._tick = False  # a backtick arrived since the last look
        self.started: list[str] = []  # sources handed to the oracle, in order
        self.threads: list[threading.Thread] = []

    def feed(self, piece: str) -> None:
        self._parts.append(piece)
        if "`" in piece:
            self._tick = True
        if not self._tick or "\n" not in piece or len(self.started) >= MAX_EARLY:
            return
        self._tick = False
        try:
            self._look()
        except Exception:  # noqa: BLE001  (an early build is only a head start: never a reason to fail a sample)
            log.debug("early build skipped", exc_info=True)

    def _look(self) -> None:
        text = "".join(self._parts)
        text = text[:text.rfind("\n") + 1]  # whole lines only: a fence still being written is not a fence
        fences = len(_FENCE.findall(text))
        if fences == self._fences or fences % 2:  # no new fence, or a block still open
            return
        self._fences = fences
        if _OPEN_THOUGHT.search(text):  # still reasoning: its code is not the answer
            return
        try:  # reasoning stripped first: extract's fallback to a ModelNew inside the reasoning finds none here
            source = extract(strip_thinking(text), self._reference).source
        except ExtractionError:
            return
        if source in self.started:
            return
        self.started.append(source)
        t = threading.Thread(target=self._build, args=(source,), name="klsp-early-build", daemon=True)
        self.threads.append(t)
        t.start()

    def _build(self, source: str) -> None:
        try:
            status = self._prebuild(self._reference, source, cancel=self._cancel)
            log.debug("early build: %s", status)
        except Exception:  # noqa: BLE001  (the evaluation builds it again and reports what failed)
            log.debug("early build failed", exc_info=True)
