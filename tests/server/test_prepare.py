"""The reference made ready ahead of the click (warmStart): an open document that is quiet has its reference
profiled and loaded before any job; an edit makes its new version ready too; a reference that fails is left for
the click to report, with nothing shown meanwhile; warmStart off prepares nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from lsp_helpers import MODEL_SRC, lsp_session, needs_evaluator, open_doc, run_command
from lsprotocol import types

pytestmark = [needs_evaluator, pytest.mark.slow]

WARM = {"KERNEL_LSP_WARM_START": "1"}


async def prepared(client: Any, n: int, timeout: float = 180.0) -> list[dict]:
    """The server's preparations once `n` have ended (each with its outcome)."""
    deadline = time.monotonic() + timeout
    while True:
        done = (await run_command(client, "kernel-lsp.debugInfo"))["prepared"]
        if len(done) >= n:
            return done
        assert time.monotonic() < deadline, f"{len(done)} of {n} preparations ended: {done}"
        await asyncio.sleep(0.25)


def profiles(root: Path) -> set[str]:
    """The fingerprints whose reference profile is in the workspace's history (read as another process would)."""
    db = root / ".kernel-lsp" / "history.sqlite"
    if not db.exists():
        return set()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
        return {r[0] for r in con.execute("SELECT fingerprint FROM profiles")}


async def test_a_quiet_document_has_its_reference_ready_before_the_click(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir, env=WARM) as client:
        uri = await open_doc(client, tmp_path / "relu2.py", MODEL_SRC)
        first = (await prepared(client, 1))[0]
        assert first["outcome"] == "ready" and first["module"].endswith("::Model"), first
        fp1 = first["fingerprint"]
        assert profiles(tmp_path) == {fp1}
        assert not any(client.jobs_seen), "no job was asked for"
        model = (await run_command(client, "kernel-lsp.debugInfo"))["model"]
        assert model["loaded"] and model["opened"] == 1 and model["jobs"] == 0, model  # the embedded GGUF, kept

        # an edit: the new version is prepared once the document is quiet; the old one is not prepared again
        text = MODEL_SRC.replace("* 2.0", "* 3.0")
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
        done = await prepared(client, 2)
        assert done[1]["outcome"] == "ready" and done[1]["fingerprint"] != first["fingerprint"], done
        assert fp1 in profiles(tmp_path) and len(profiles(tmp_path)) == 2

        # a setting that replaces the evaluator: the new one gets the open document's reference too, unedited
        client.set_configuration({"trials": 4}, section="kernelLsp")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        done = await prepared(client, 3)
        assert done[2]["outcome"] == "ready" and done[2]["fingerprint"] == done[1]["fingerprint"], done
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["evaluator"]["trials"] == 4
        assert info["model"]["loaded"] and info["model"]["opened"] == 1, info["model"]  # loaded once, still kept


async def test_a_reference_that_fails_is_left_for_the_click(tmp_path: Path, cache_dir: Path) -> None:
    broken = MODEL_SRC.replace("return torch.relu(x) * 2.0", "raise ValueError('not today')")
    async with lsp_session(tmp_path, cache_dir, env=WARM) as client:
        await open_doc(client, tmp_path / "broken.py", broken)
        done = (await prepared(client, 1))[0]
        assert done["outcome"].startswith("not prepared:") and "not today" in done["outcome"], done
        assert profiles(tmp_path) == set()
        await asyncio.sleep(1.5)  # a failure is not tried again for the same version, and nothing is shown
        assert len((await run_command(client, "kernel-lsp.debugInfo"))["prepared"]) == 1
        assert not [m for m in client.messages if m.type in (types.MessageType.Error, types.MessageType.Warning)]


async def test_warm_start_off_prepares_nothing(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir) as client:  # KERNEL_LSP_WARM_START=0
        await open_doc(client, tmp_path / "relu2.py", MODEL_SRC)
        await asyncio.sleep(3)
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["prepared"] == [] and info["children"] == []


async def test_a_model_that_cannot_load_leaves_the_reference_ready(tmp_path: Path, cache_dir: Path) -> None:
    """warmStart loads a local model after the reference; one that cannot load is the click's to report: the
    reference is ready all the same, and nothing is shown meanwhile."""
    env = {**WARM, "KERNEL_LSP_MODEL": str(tmp_path / "missing.gguf")}
    async with lsp_session(tmp_path, cache_dir, env=env) as client:
        await open_doc(client, tmp_path / "relu2.py", MODEL_SRC)
        done = (await prepared(client, 1))[0]
        assert done["outcome"] == "ready", done
        model = (await run_command(client, "kernel-lsp.debugInfo"))["model"]
        assert not model["loaded"] and model["opened"] == 0, model
        assert not [m for m in client.messages if m.type in (types.MessageType.Error, types.MessageType.Warning)]
