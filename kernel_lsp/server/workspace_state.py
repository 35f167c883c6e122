"""Per-document analysis cache: the last good analysis of each document, fingerprints, tasks.

Analysis is lazy: an edit only marks the document dirty; whoever needs the analysis (a debounced diagnostics
pass, a hover, a lens) gets it re-done then, at most once per version. A syntax error keeps the last good
analysis (positions may be a little off until the file parses again) and is remembered, never logged as an
exception.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from pygls.uris import to_fs_path

from ..documents import Analysis, ModuleInfo, analyse
from ..documents.sources import candidate_only, reference_only, source_hash
from ..tasks import Task, TaskError, task_from_source

log = logging.getLogger(__name__)

MAX_ANALYSED_BYTES = 2 * 1024 * 1024


@dataclass
class DocState:
    uri: str
    text: str = ""
    version: int | None = None
    open: bool = False
    dirty: bool = True
    analysis: Analysis = field(default_factory=Analysis)  # the last good one
    good_text: str = ""  # the text `analysis` was made from
    syntax_error: str | None = None  # of the current text, if any
    skipped: str | None = None  # why the current text was not analysed (huge file)
    fingerprints: dict[str, str] = field(default_factory=dict)  # of the last good analysis, per module

    @property
    def text_hash(self) -> str:
        return source_hash(self.text)


def uri_to_path(uri: str) -> Path | None:
    """The file behind a `file:` URI (Windows drive URIs included), else None (untitled:, unknown schemes)."""
    if not uri.startswith("file:"):
        return None
    try:
        p = to_fs_path(uri)
    except Exception:  # noqa: BLE001 - a malformed URI is not a file
        return None
    return Path(p) if p else None


class DocumentStore:
    def __init__(self, root: Path | None = None):
        self.root = root
        self._docs: dict[str, DocState] = {}

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
        """The document with an up-to-date analysis (read from disk when the editor has not opened it)."""
        doc = self._docs.get(uri)
        if doc is None or (not doc.open and doc.dirty and not doc.text):
            doc = self.load_from_disk(uri)
            if doc is None:
                return None
        if doc.dirty:
            self._analyse(doc)
        return doc

    def _analyse(self, doc: DocState) -> None:
        doc.dirty = False
        size = len(doc.text.encode("utf-8", "surrogatepass")) if len(doc.text) > MAX_ANALYSED_BYTES // 4 else 0
        if size > MAX_ANALYSED_BYTES:
            if doc.skipped is None:
                log.info("%s: %.1f MB, over the %d MB limit: not analysed", doc.uri, size / 2**20,
                         MAX_ANALYSED_BYTES >> 20)
            doc.skipped = f"file too large to analyse ({size / 2**20:.1f} MB)"
            doc.analysis, doc.good_text, doc.syntax_error, doc.fingerprints = Analysis(), "", None, {}
            return
        doc.skipped = None
        a = analyse(doc.text)
        if a.ok:
            if doc.text != doc.good_text:
                doc.fingerprints = {}
            doc.analysis, doc.good_text, doc.syntax_error = a, doc.text, None
        else:
            doc.syntax_error = a.syntax_error
            log.debug("%s: syntax error, keeping the last good analysis: %s", doc.uri, a.syntax_error)

    # --- tasks -----------------------------------------------------------------------------------------------
    def label(self, uri: str) -> str:
        """The path part of task keys: relative to the workspace root when inside it, else the path or URI."""
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
            fp = doc.fingerprints[module] = doc.analysis.fingerprint(module, reference_only(doc.good_text))
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
