"""Per-document analysis cache: the last good analysis of each document, fingerprints, tasks.

Analysis is lazy: an edit only marks the document dirty; whoever needs the analysis (a debounced diagnostics
pass, a hover, a lens) gets it re-done then, at most once per version. A syntax error keeps the last good
analysis (positions may be a little off until the file parses again) and is remembered, never logged as an
exception.

A large document is analysed in a process of its own (:class:`BackgroundAnalyser`, documents/worker.py): `ast`
work holds the GIL, so in a thread it would still stall the event loop, and with it every request on every other
document. Until
its analysis is back the document keeps its previous one; requests on it can wait for it (:meth:`ready`)
without holding up anything else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..tasks import Task, TaskError, task_from_source
from .analysis import Analysis, ModuleInfo
from .sources import candidate_only, reference_only, source_hash
from .worker import Analysed, analyse_text, read_frame, write_frame

log = logging.getLogger(__name__)

MAX_ANALYSED_BYTES = 2 * 1024 * 1024
INLINE_ANALYSIS_CHARS = 20_000  # larger documents are analysed in the background process (~25 ms inline here)


class BackgroundAnalyser:
    """The worker process analysing large documents (started on first use, see documents/worker.py). Texts go to it
    one at a time from a thread of its own; `submit` returns at once."""

    def __init__(self) -> None:
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernel-lsp-analysis")
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.analysed = 0  # texts sent (debugInfo)

    def submit(self, text: str) -> Future[Analysed]:
        self.analysed += 1
        return self._io.submit(self._round_trip, text)

    def _process(self) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = subprocess.Popen([sys.executable, "-m", "kernel_lsp.documents.worker"],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
            return self._proc

    def _round_trip(self, text: str) -> Analysed:
        proc = self._process()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            write_frame(proc.stdin, text.encode("utf-8", "surrogatepass"))
            data = read_frame(proc.stdout)
        except OSError as e:
            data, why = None, str(e)
        else:
            why = "it ended"
        if data is None:
            proc.kill()
            raise RuntimeError(f"the analysis process failed ({why})")
        status, value = pickle.loads(data)
        if status != "ok":
            raise RuntimeError(str(value))
        return value

    def pids(self) -> list[int]:
        proc = self._proc
        return [proc.pid] if proc is not None and proc.poll() is None else []

    def close(self) -> None:
        self._io.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()  # the worker ends at the end of its input
                proc.wait(timeout=1)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait(timeout=2)


@dataclass
class DocState:
    uri: str
    text: str = ""
    version: int | None = None
    open: bool = False
    dirty: bool = True
    analysis: Analysis = field(default_factory=Analysis)  # the last good one
    good_text: str = ""  # the text `analysis` was made from
    assignments: str = ""  # of `good_text` (see Analysed)
    syntax_error: str | None = None  # of the current text, if any
    skipped: str | None = None  # why the current text was not analysed (huge file)
    fingerprints: dict[str, str] = field(default_factory=dict)  # of the last good analysis, per module
    pending: Future[Analysed] | None = None  # a background analysis under way

    @property
    def text_hash(self) -> str:
        return source_hash(self.text)


def uri_to_path(uri: str) -> Path | None:
    """The file behind a `file:` URI (Windows drive URIs included), else None (untitled:, unknown schemes)."""
    if not uri.startswith("file:"):
        return None
    try:
        parts = urlsplit(uri)
        path = unquote(parts.path)
    except ValueError:  # a malformed URI is not a file
        return None
    if parts.netloc and path:  # file://server/share/...: a UNC path
        path = f"//{parts.netloc}{path}"
    elif len(path) >= 3 and path[0] == "/" and path[1].isalpha() and path[2] == ":":  # /c:/...: a drive
        path = path[1].lower() + path[2:]
    if not path:
        return None
    return Path(path.replace("/", "\\")) if os.name == "nt" else Path(path)


class DocumentStore:
    """`analyser` and `post` (run a callable on the event loop, from any thread) enable background analysis of large
    documents; `on_analysed(uri)` is called (on the loop) when one is back."""

    def __init__(self, root: Path | None = None, *, analyser: BackgroundAnalyser | None = None,
                 post: Callable[[Callable[[], None]], None] | None = None,
                 on_analysed: Callable[[str], None] | None = None):
        self._root = root
        self._labels: dict[str, str] = {}  # uri -> label, for the current root
        self._docs: dict[str, DocState] = {}
        self._analyser = analyser if post is not None else None
        self._post = post
        self._on_analysed = on_analysed

    # --- text ------------------------------------------------------------------------------------------------
    def set_text(self, uri: str, text: str, version: int | None = None, *, is_open: bool | None = None) -> DocState:
        doc = self._docs.get(uri) or DocState(uri)
        self._docs[uri] = doc
        if text != doc.text or doc.version != version:
            doc.text, doc.version, doc.dirty = text, version, True
        if is_open is not None:
            doc.open = is_open
        return doc

    def close(self, uri: str) -> None:
        doc = self._docs.get(uri)
        if doc is not None:
            doc.open = False

    def forget(self, uri: str) -> None:
        self._docs.pop(uri, None)

    def uris(self) -> list[str]:
        return list(self._docs)

    def known(self, uri: str) -> DocState | None:
        return self._docs.get(uri)

    def load_from_disk(self, uri: str) -> DocState | None:
        """A document not open in the editor, read from its file (None if there is none)."""
        path = uri_to_path(uri)
        if path is None:
            return None
        try:
            if path.stat().st_size > MAX_ANALYSED_BYTES:
                text = ""
            else:
                text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        return self.set_text(uri, text, None)

    # --- analysis --------------------------------------------------------------------------------------------
    def get(self, uri: str) -> DocState | None:
        """The document with an up-to-date analysis (read from disk when the editor has not opened it); for a large
        document, the analysis so far while a new one is made in the background."""
        doc = self._docs.get(uri)
        if doc is None or (not doc.open and doc.dirty and not doc.text):
            doc = self.load_from_disk(uri)
            if doc is None:
                return None
        if doc.dirty:
            self._analyse(doc)
        return doc

    async def ready(self, uri: str) -> DocState | None:
        """The document once its analysis matches its text (waits for a background analysis; never blocks)."""
        for _ in range(5):
            doc = self.get(uri)
            if doc is None or doc.pending is None:
                return doc
            try:
                await asyncio.wrap_future(doc.pending)
            except Exception:  # noqa: BLE001 - reported where it is installed
                pass
            await asyncio.sleep(0)  # the result is installed by a callback queued before this one
        return self.get(uri)

    def _analyse(self, doc: DocState) -> None:
        size = len(doc.text.encode("utf-8", "surrogatepass")) if len(doc.text) > MAX_ANALYSED_BYTES // 4 else 0
        if size > MAX_ANALYSED_BYTES:
            doc.dirty = False
            if doc.skipped is None:
                log.info("%s: %.1f MB, over the %d MB limit: not analysed", doc.uri, size / 2**20,
                         MAX_ANALYSED_BYTES >> 20)
            doc.skipped = f"file too large to analyse ({size / 2**20:.1f} MB)"
            doc.analysis, doc.good_text, doc.syntax_error, doc.fingerprints = Analysis(), "", None, {}
            doc.assignments = ""
            return
        doc.skipped = None
        if self._analyser is not None and len(doc.text) > INLINE_ANALYSIS_CHARS:
            self._in_background(doc)
            return
        doc.dirty = False
        self._install(doc, doc.text, analyse_text(doc.text))

    def _in_background(self, doc: DocState) -> None:
        if doc.pending is not None:
            return  # one at a time: the newest text goes when this one is back
        assert self._analyser is not None and self._post is not None
        text, post, uri = doc.text, self._post, doc.uri
        doc.pending = fut = self._analyser.submit(text)
        fut.add_done_callback(lambda f: post(lambda: self._back(uri, text, f)))

    def _back(self, uri: str, text: str, fut: Future[Analysed]) -> None:
        doc = self._docs.get(uri)
        if doc is None or doc.pending is not fut:
            return
        doc.pending = None
        try:
            result = fut.result()
        except Exception as e:  # noqa: BLE001 - the worker died, or the server is closing
            log.warning("analysing %s in the background failed: %s", uri, e)
            return
        self._install(doc, text, result)
        if doc.text == text:
            doc.dirty = False
        else:
            self._analyse(doc)  # changed meanwhile: the newest text goes next
        if self._on_analysed is not None:
            self._on_analysed(uri)

    @staticmethod
    def _install(doc: DocState, text: str, result: Analysed) -> None:
        a = result.analysis
        if a.ok:
            if text != doc.good_text:
                doc.fingerprints = {}
            doc.analysis, doc.good_text, doc.assignments, doc.syntax_error = a, text, result.assignments, None
        else:
            doc.syntax_error = a.syntax_error
            log.debug("%s: syntax error, keeping the last good analysis: %s", doc.uri, a.syntax_error)

    def shutdown(self) -> None:
        """Stop the background analysis process."""
        if self._analyser is not None:
            self._analyser.close()

    # --- tasks -----------------------------------------------------------------------------------------------
    @property
    def root(self) -> Path | None:
        return self._root

    @root.setter
    def root(self, root: Path | None) -> None:
        self._root = root
        self._labels.clear()

    def label(self, uri: str) -> str:
        """The path part of task keys: relative to the workspace root when inside it, else the path or URI."""
        label = self._labels.get(uri)
        if label is None:
            label = self._labels[uri] = self._label(uri)
        return label

    def _label(self, uri: str) -> str:
        path = uri_to_path(uri)
        if path is None:
            return uri
        if self.root is not None:
            try:
                return Path(os.path.relpath(path, self.root)).as_posix() if _inside(path, self.root) else str(path)
            except ValueError:  # another drive
                return str(path)
        return str(path)

    def task_key(self, uri: str, module: str) -> str:
        return f"{self.label(uri)}::{module}"

    def fingerprint(self, doc: DocState, module: str) -> str:
        """What results for `module` depend on: the module, the harness, and top-level assignments, but not the
        file's ModelNew and its kernel code (so accepting a candidate does not make every result stale)."""
        fp = doc.fingerprints.get(module)
        if fp is None:
            fp = doc.fingerprints[module] = doc.analysis.fingerprint(module, doc.assignments)
        return fp

    def task(self, uri: str, module: str | None) -> Task:
        """The task for `module` in the document (its reference without any ModelNew kernel code)."""
        doc = self.get(uri)
        if doc is None:
            raise TaskError(f"{uri}: no such document")
        if doc.skipped:
            raise TaskError(f"{uri}: {doc.skipped}")
        if doc.syntax_error and not doc.analysis.modules:
            raise TaskError(f"{self.label(uri)}: syntax error: {doc.syntax_error}")
        if doc.syntax_error:
            raise TaskError(f"{self.label(uri)}: fix the syntax error first ({doc.syntax_error})")
        t = task_from_source(doc.good_text, module, path=self.label(uri), analysis=doc.analysis)
        return dataclasses.replace(t, reference_src=reference_only(t.reference_src),
                                   fingerprint=self.fingerprint(doc, t.module),
                                   candidate_src=candidate_only(t.candidate_src) if t.candidate_src else "")

    def module_at(self, uri: str, line: int) -> ModuleInfo | None:
        doc = self.get(uri)
        if doc is None:
            return None
        m = doc.analysis.module_at(line)
        if m is not None and m.is_candidate:
            refs = doc.analysis.references
            m = (doc.analysis.module("Model") or (refs[0] if refs else None))
        return m


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except (ValueError, OSError):
        return False
