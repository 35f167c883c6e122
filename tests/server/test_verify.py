"""Verify / profile jobs with the real evaluator on CPU (C++ load_inline candidates): diagnostics on save,
hover, progress, the jobs notification, cancel."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_helpers import (
    MODEL_SRC,
    assert_progress_forward,
    diags,
    lsp_session,
    model_new,
    needs_evaluator,
    open_doc,
    run_command,
    wait_job,
    wait_until,
)
from lsprotocol import types

pytestmark = [needs_evaluator, pytest.mark.slow]

WRONG_MODEL_SRC = MODEL_SRC.replace("return torch.relu(x) * 2.0", "return torch.relu(x) * 3.0")


def _save(client, uri: str, text: str) -> None:
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri), text=text))


async def test_verify_on_save_then_mismatch_then_hover(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir) as client:
        text = MODEL_SRC + model_new()
        path = tmp_path / "relu.py"
        uri = await open_doc(client, path, text)
        _save(client, uri, text)
        job = await wait_until(lambda: [j for js in client.jobs_seen for j in js if j["kind"] == "verify"])
        final = await wait_job(client, job[0]["id"])
        assert final["state"] == "done", final
        assert final["uri"] == uri and final["module"] == "Model" and final["percentage"] == 100
        # Progress: created, begun cancellable, stage messages, ended.
        token = f"kernel-lsp/job/{final['id']}"
        reports = client.progress_reports[token]
        assert isinstance(reports[0], types.WorkDoneProgressBegin) and reports[0].cancellable
        assert any("compil" in (r.message or "") for r in reports[1:-1])
        assert isinstance(reports[-1], types.WorkDoneProgressEnd)
        await wait_until(lambda: [d for d in diags(client, uri) if d.code == "verify"])
        d = next(d for d in diags(client, uri) if d.code == "verify")
        assert d.severity == types.DiagnosticSeverity.Information and "correct on 5 trials" in d.message
        assert d.range.start.line == text.splitlines().index("class ModelNew(nn.Module):")

        # The same ModelNew against a different Model: an Error with the max error and the trial.
        wrong = WRONG_MODEL_SRC + model_new()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2), [types.TextDocumentContentChangeWholeDocument(wrong)]))
        await wait_until(lambda: not [d for d in diags(client, uri) if d.code == "verify"], timeout=5)  # stale: gone
        _save(client, uri, wrong)
        await wait_until(lambda: [d for d in diags(client, uri) if d.code == "verify"], timeout=240)
        d = next(d for d in diags(client, uri) if d.code == "verify")
        assert d.severity == types.DiagnosticSeverity.Error, d.message
        assert "disagrees with Model" in d.message and "max abs error" in d.message and "trial 1 of 5" in d.message
        assert "trial 0" not in d.message  # one trial number, counted from 1
        assert_progress_forward(client)  # the verify jobs' percentages never went back

        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["torchLoaded"] is False
        assert info["children"], "the evaluator's workers run as child processes"


async def test_profile_job_then_hover_shows_top_ops(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        res = await run_command(client, "kernel-lsp.profile", {"uri": uri, "line": 5})
        final = await wait_job(client, res["jobId"])
        assert final["state"] == "done", final
        hover = await client.text_document_hover_async(types.HoverParams(
            types.TextDocumentIdentifier(uri), types.Position(4, 7)))
        assert hover is not None and "**Profile**" in hover.contents.value, hover.contents.value
        assert "aten::" in hover.contents.value


async def test_the_check_on_save_gives_the_speed_and_a_new_save_cancels_it(tmp_path: Path, cache_dir: Path) -> None:
    """Issue 18 item 6: a saved ModelNew is timed too, so the diagnostic says whether it is faster; saving again
    while it runs cancels that check, and only the last saved text is checked."""
    async with lsp_session(tmp_path, cache_dir, init_options={"timeCompiled": False}) as client:
        path = tmp_path / "relu.py"
        first = MODEL_SRC + model_new()
        uri = await open_doc(client, path, first)
        _save(client, uri, first)
        running = await wait_until(lambda: [j for js in client.jobs_seen for j in js
                                            if j["kind"] == "verify" and j["state"] == "running"], timeout=30)
        second = first + "\n# edited\n"
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2), [types.TextDocumentContentChangeWholeDocument(second)]))
        _save(client, uri, second)
        cancelled = await wait_job(client, running[0]["id"])
        assert cancelled["state"] == "cancelled", cancelled
        jobs = await wait_until(lambda: [j for js in client.jobs_seen for j in js
                                         if j["kind"] == "verify" and j["id"] != running[0]["id"]], timeout=30)
        final = await wait_job(client, jobs[0]["id"])
        assert final["state"] == "done", final
        assert len({j["id"] for js in client.jobs_seen for j in js if j["kind"] == "verify"}) == 2
        d = (await wait_until(lambda: [d for d in diags(client, uri) if d.code == "verify"]))[0]
        assert d.severity == types.DiagnosticSeverity.Information
        assert d.message.startswith("ModelNew: ") and "correct on 5 trials" in d.message, d.message
        assert " faster than eager (" in d.message or " slower than eager (" in d.message, d.message
        assert " ms vs " in d.message  # its median and the reference's
        hover = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                         types.Position(4, 8)))
        assert "| ModelNew ms | eager ms |" in hover.contents.value
