"""Each candidate's verdict reaches the editor as soon as it exists (issue 11, "Stream results"): with one fast
candidate and one the model is still writing, the first verdict's diagnostic, hover row and lens come while the
job runs, not when it ends."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_helpers import (
    MODEL_SRC,
    assert_progress_forward,
    diags,
    job_final,
    lsp_session,
    needs_evaluator,
    open_doc,
    run_command,
    wait_job,
    wait_until,
)
from lsprotocol import types

pytestmark = [needs_evaluator, pytest.mark.slow]


async def test_the_first_verdict_is_shown_before_the_job_ends(tmp_path: Path, cache_dir: Path, endpoint) -> None:
    # candidate 1: a ModelNew that builds nothing (its verdict comes in seconds); sample 2: held by the endpoint
    # until the test has seen candidate 1 in the editor.
    ep = endpoint("wrong,hold")
    settings = {"samples": 2, "rounds": 1, "strategy": "zero-shot", **ep.settings()}
    async with lsp_session(tmp_path, cache_dir, init_options=settings) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        job = (await run_command(client, "kernel-lsp.bestOfN", {"uri": uri, "module": "Model"}))["jobId"]
        first = await wait_until(lambda: [d for d in diags(client, uri) if d.code == "candidate-failed"], timeout=240)
        assert first[0].message.startswith("candidate 1 failed (") and first[0].data["candidate"] == 1
        assert job_final(client, job) is None and not ep.release.is_set()  # the job is still running
        assert ep.kernel_requests == 2  # ... with the second sample still being written by the model

        hover = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                         types.Position(4, 8)))
        rows = [line for line in hover.contents.value.splitlines() if line.startswith("| 1 |")]
        assert rows and "best-of-n" in rows[0], hover.contents.value
        # the profile's device is the CPU: not called a GPU, no figure rounded to 0
        assert "**Device**: cpu" in hover.contents.value and "**GPU**" not in hover.contents.value
        assert " 0 TFLOP/s" not in hover.contents.value
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert [r["number"] for r in rows] == [1] and rows[0]["status"] != "pending"

        ep.release.set()
        final = await wait_job(client, job, timeout=400)
        assert final["state"] in ("done", "failed"), final
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert [r["number"] for r in rows] == [1, 2]
        await wait_until(lambda: [d for d in diags(client, uri) if d.data and d.data.get("candidate") == 2],
                         timeout=30)
        assert_progress_forward(client)
