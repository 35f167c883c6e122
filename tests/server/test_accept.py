"""Accepting over stdio, as VS Code does it (the edit applied by the client, then didChange / didSave): two accepts
in a row leave a file that imports and is correct (issue 12, item 1); saving the accepted candidate does not build
its kernel again (item 6); Accept is the preferred action only for the offered kernel: correct and faster than eager
(item 6; issue 27)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_helpers import (
    MODEL_SRC,
    apply_edits,
    assert_progress_forward,
    diags,
    lsp_session,
    needs_evaluator,
    open_doc,
    run_command,
    wait_job,
    wait_until,
)
from lsprotocol import types

pytestmark = [needs_evaluator, pytest.mark.slow]


async def test_two_accepts_in_a_row_leave_a_correct_file(tmp_path: Path, cache_dir: Path, endpoint) -> None:
    settings = {"samples": 2, "rounds": 1, "strategy": "zero-shot", **endpoint("good").settings()}
    path = tmp_path / "relu.py"
    async with lsp_session(tmp_path, cache_dir, init_options=settings) as client:
        uri = await open_doc(client, path, MODEL_SRC)
        job = (await run_command(client, "kernel-lsp.bestOfN", {"uri": uri, "module": "Model"}))["jobId"]
        assert (await wait_job(client, job, timeout=400))["state"] == "done"
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert [r["status"] for r in rows] == ["correct", "correct"], rows

        # Accept is preferred only for the offered candidate: the fastest correct one, shown faster than eager; one
        # that is not shown faster reads "Insert … anyway".
        acts = await client.text_document_code_action_async(types.CodeActionParams(
            types.TextDocumentIdentifier(uri), types.Range(types.Position(5, 0), types.Position(5, 0)),
            types.CodeActionContext(diagnostics=[], only=["refactor.rewrite.kernelLsp.accept"])))
        assert acts
        by_number = {r["number"]: r for r in rows}
        assert [a.data["candidate"] for a in acts] == sorted(by_number, key=lambda n: by_number[n]["rank"])
        for a in acts:
            row = by_number[a.data["candidate"]]
            assert bool(a.is_preferred) == row["offered"], (a.title, row)
            word = "Accept candidate" if row["faster"] else "Insert candidate"
            assert a.title.startswith(f"{word} {row['number']} ") and ("anyway" in a.title) != row["faster"], a.title

        text, version = MODEL_SRC, 1
        for number in (1, 2):  # the client applies each edit and sends the new text, as VS Code does
            out = await run_command(client, "kernel-lsp.accept", {"uri": uri, "module": "Model", "candidate": number})
            assert out["applied"] is True
            change = client.edits[-1].edit.document_changes[0]
            assert change.text_document.version == version
            text, version = apply_edits(text, change.edits), version + 1
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                [types.TextDocumentContentChangeWholeDocument(text)]))
        assert path.read_text() == MODEL_SRC  # the server never writes the file itself
        assert text.count("# >>> kernel-lsp: accepted candidate 2 of Model") == 1 and "candidate 1 of" not in text
        assert text.count("from torch.utils.cpp_extension import load_inline") == 1
        compile(text, "relu.py", "exec")

        # The user saves: the file's ModelNew is candidate 2 as accepted, so its verdict stands (no new build).
        path.write_text(text)
        jobs_before = {j["id"] for js in client.jobs_seen for j in js}
        client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri), text=text))
        [d] = await wait_until(lambda: [d for d in diags(client, uri) if d.code == "verify"])
        assert d.severity == types.DiagnosticSeverity.Information, d.message
        assert "correct on 5 trials" in d.message and "(candidate 2 as accepted: its check)" in d.message
        assert {j["id"] for js in client.jobs_seen for j in js} == jobs_before  # no verify job was started

        # ... and the file is correct when the oracle checks it for real.
        check = (await run_command(client, "kernel-lsp.verify", {"uri": uri, "module": "Model"}))["jobId"]
        final = await wait_job(client, check, timeout=400)
        assert final["state"] == "done" and "correct on 5 trials" in final["message"], final
        assert_progress_forward(client)

        # Edit the accepted kernel: it is the user's code now, and saving checks it again.
        edited = text.replace("return relu2_ext.relu2(x)", "return relu2_ext.relu2(x) * 1.0")
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version + 1),
            [types.TextDocumentContentChangeWholeDocument(edited)]))
        client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri), text=edited))
        await wait_until(lambda: [j for js in client.jobs_seen for j in js
                                  if j["kind"] == "verify" and j["id"] not in jobs_before | {check}], timeout=10)
