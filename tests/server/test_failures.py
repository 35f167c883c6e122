"""Every job leaves a clear trace: a generation that ends without a kernel leaves a diagnostic and a hover saying
what happened and what to try (issue 12, item 2), in the user's words, not the model's feedback (item 6); a module
that does not run fails the job before the model is asked anything (item 8, in the editor)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_helpers import (
    MODEL_SRC,
    assert_progress_forward,
    diags,
    lsp_session,
    messages_seen,
    needs_evaluator,
    open_doc,
    run_command,
    wait_job,
    wait_until,
)
from lsprotocol import types

pytestmark = [needs_evaluator, pytest.mark.slow]

SETTINGS = {"samples": 2, "rounds": 1, "strategy": "zero-shot"}


async def _hover(client, uri: str) -> str:
    h = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                 types.Position(4, 8)))
    return h.contents.value


async def test_a_generation_without_a_kernel_says_what_happened_and_what_to_try(
        tmp_path: Path, cache_dir: Path, endpoint) -> None:
    ep = endpoint("prose")
    async with lsp_session(tmp_path, cache_dir, init_options={**SETTINGS, **ep.settings()}) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        assert "No candidates yet" in await _hover(client, uri)
        job = (await run_command(client, "kernel-lsp.bestOfN", {"uri": uri, "module": "Model"}))["jobId"]
        final = await wait_job(client, job, timeout=240)
        assert final["state"] == "failed" and "2 no kernel" in final["message"], final
        [d] = await wait_until(lambda: [d for d in diags(client, uri) if d.code == "job-failed"])
        assert d.severity == types.DiagnosticSeverity.Warning and d.range.start.line == 4
        assert d.message.startswith("kernel generation (best-of-n) failed: no correct candidate in 2 attempt(s)")
        assert "held no usable ModelNew (e.g. the answer holds no code)" in d.message and "try a stronger" in d.message
        hover = await _hover(client, uri)
        assert "No candidates yet" not in hover and "**Last kernel generation (best-of-n) failed**" in hover
        assert "try a stronger code model" in hover
        # the user reads what went wrong, never the instructions meant for the model
        seen = messages_seen(client, job)
        assert any("has no usable ModelNew: the answer holds no code" in m for m in seen), seen
        assert not any("answer with one" in m or "your answer" in m for m in seen), seen
        assert_progress_forward(client)

    # The trace is in the history: it is there after a restart too, until the next generation.
    async with lsp_session(tmp_path, cache_dir, init_options={**SETTINGS, **ep.settings()}) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        await wait_until(lambda: [d for d in diags(client, uri) if d.code == "job-failed"])


async def test_a_module_that_does_not_run_fails_before_the_model_is_asked(
        tmp_path: Path, cache_dir: Path, endpoint) -> None:
    ep = endpoint("good")
    broken = MODEL_SRC.replace("    return [torch.randn(64, 256)]", "    raise ValueError('no inputs today')")
    async with lsp_session(tmp_path, cache_dir, init_options={**SETTINGS, **ep.settings()}) as client:
        uri = await open_doc(client, tmp_path / "relu.py", broken)
        job = (await run_command(client, "kernel-lsp.generate", {"uri": uri, "module": "Model"}))["jobId"]
        final = await wait_job(client, job, timeout=120)
        assert final["state"] == "failed" and "Model does not run" in final["message"], final
        assert "no inputs today" in final["message"] and "fix the module" in final["message"]
        assert ep.kernel_requests == 0  # nothing was asked of the model
        [d] = await wait_until(lambda: [d for d in diags(client, uri) if d.code == "job-failed"])
        assert "Model does not run" in d.message
