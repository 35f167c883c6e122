"""Signs of life while the model writes: the tokens written so far and their rate reach the editor at least every
couple of seconds ($/progress, kernelLsp/jobs and the running job's lens), the percentage moves with them, and a
job's one-line status names everything in flight, the same whichever thread last reported. With the embedded
model, *Generate kernel* is one sample of one round and the long jobs' lenses say what to expect."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
from lsp_helpers import MODEL_SRC, lsp_session, needs_evaluator, open_doc, run_command, wait_job
from lsprotocol import types

pytestmark = [needs_evaluator, pytest.mark.slow]

TOKENS = re.compile(r"round 1: sample (\d)/(\d): (\d+)/(\d+) tokens, (\d+(?:\.\d)?) tok/s")


async def _lens_titles(client, uri: str) -> list[str]:
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    return [lens.command.title for lens in lenses]


async def _watch(client, uri: str, job: int, timeout: float = 240.0):
    """Until the job ends: each $/progress report as it came ((time, message, percentage)), the job's messages in
    kernelLsp/jobs, and the running job's lens titles."""
    token = f"kernel-lsp/job/{job}"
    reports: list[tuple[float, str, int | None]] = []
    lens: list[str] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        seen = client.progress_reports.get(token, [])
        for r in seen[len(reports):]:
            reports.append((time.monotonic(), getattr(r, "message", None) or "", getattr(r, "percentage", None)))
        if any(getattr(r, "kind", "") == "end" for r in seen):
            break
        lens += [t for t in await _lens_titles(client, uri) if t.endswith("— cancel")]
        await asyncio.sleep(0.1)
    final = await wait_job(client, job, timeout=60)
    messages = [j["message"] for js in client.jobs_seen for j in js if j["id"] == job]
    return reports, messages, lens, final


async def test_tokens_so_far_while_the_model_writes(tmp_path: Path, cache_dir: Path, endpoint) -> None:
    # the model writes 60 words in about 6 s; each is a token to the server
    settings = {"samples": 1, "rounds": 1, "strategy": "zero-shot", "maxTokens": 80, **endpoint("drip").settings()}
    async with lsp_session(tmp_path, cache_dir, init_options=settings) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        job = (await run_command(client, "kernel-lsp.generate", {"uri": uri, "module": "Model"}))["jobId"]
        reports, messages, lens, final = await _watch(client, uri, job)
    assert final["state"] in ("done", "failed"), final
    ticks = [(t, int(m.group(3)), pct) for t, msg, pct in reports if (m := TOKENS.search(msg))]
    assert len(ticks) >= 3, [r[1] for r in reports]
    counts = [n for _, n, _ in ticks]
    assert counts == sorted(counts) and counts[0] < counts[-1] <= 80, counts
    gaps = [b[0] - a[0] for a, b in zip(ticks, ticks[1:])]
    assert max(gaps) < 2.5, gaps  # at least every couple of seconds
    pcts = [p for _, _, p in ticks]
    assert pcts[-1] > pcts[0], pcts  # the percentage moves while the model writes, not only between samples
    assert all(TOKENS.search(m).group(4) == "80" for _, m, _ in reports if TOKENS.search(m))  # of at most 80
    assert any(TOKENS.search(m) for m in messages), messages  # kernelLsp/jobs: the same words
    assert any(TOKENS.search(t) for t in lens), lens  # and the running job's lens


async def test_the_status_names_everything_in_flight(tmp_path: Path, cache_dir: Path, endpoint) -> None:
    # candidate 1 (a ModelNew that builds nothing) is checked while the model writes sample 2: the job's status,
    # shown by the lens and the status bar alike, names both whichever of the two reported last
    settings = {"samples": 2, "rounds": 1, "strategy": "zero-shot", "maxTokens": 80,
                **endpoint("wrong,drip").settings()}
    async with lsp_session(tmp_path, cache_dir, init_options=settings) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        job = (await run_command(client, "kernel-lsp.bestOfN", {"uri": uri, "module": "Model"}))["jobId"]
        reports, messages, _, final = await _watch(client, uri, job, timeout=400)
    assert final["state"] in ("done", "failed"), final
    writing = [i for i, m in enumerate(messages) if "sample 2/2" in m]
    checking = [i for i, m in enumerate(messages) if "candidate 1:" in m]
    assert writing and checking, messages
    both = [i for i in writing if "candidate 1:" in messages[i]]
    assert both, messages
    # from the moment both are in flight until candidate 1's check ends, every status names the two
    span = messages[min(both):max(both) + 1]
    assert all("candidate 1:" in m and "sample 2/2" in m for m in span), span
    assert re.search(r"candidate 1: .+ · round 1: sample 2/2", messages[both[0]]), messages[both[0]]
    pcts = [p for _, _, p in reports if p is not None]
    assert pcts == sorted(pcts) and len(set(pcts)) >= 5, pcts  # it moves through the checks, not by whole steps


@pytest.mark.model
async def test_generate_with_the_embedded_model_is_one_sample(tmp_path: Path, cache_dir: Path) -> None:
    # the settings' defaults (4 samples x 3 rounds): Generate with the embedded model still writes one sample, and
    # tells its tokens as they come; Best of 4 says how long it may take
    settings = {"maxTokens": 48}
    async with lsp_session(tmp_path, cache_dir, init_options=settings) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        titles = await _lens_titles(client, uri)
        assert "⚡ Generate kernel" in titles, titles
        assert "Best of 4 (embedded model: up to 1 min)" in titles, titles  # 4 x 48 tokens at ~20 tok/s
        job = (await run_command(client, "kernel-lsp.generate", {"uri": uri, "module": "Model"}))["jobId"]
        reports, messages, _, final = await _watch(client, uri, job, timeout=600)
        info = await run_command(client, "kernel-lsp.debugInfo")
    assert info["settings"]["samples"] == 4 and info["settings"]["rounds"] == 3
    assert any("1 round(s) x 1 sample(s)" in m for m in messages), messages
    assert not any("sample 2/" in m or "round 2" in m for m in messages), messages
    assert any(TOKENS.search(m) for _, m, _ in reports), [r[1] for r in reports]
    assert final["state"] in ("done", "failed"), final
