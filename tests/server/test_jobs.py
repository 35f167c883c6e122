"""The job manager seen from the client: one job per module (others queue), cancel by command and from the
progress UI within 2 s, nothing left running after shutdown."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from lsp_helpers import (
    MODEL_SRC,
    lsp_session,
    needs_evaluator,
    open_doc,
    run_command,
    wait_job,
    wait_until,
)
from lsprotocol import types

pytestmark = [needs_evaluator, pytest.mark.slow]

SETTINGS = {"samples": 1, "rounds": 1, "strategy": "zero-shot"}


def _state(client, job_id: int) -> str | None:
    for jobs in reversed(client.jobs_seen):
        for j in jobs:
            if j["id"] == job_id:
                return j["state"]
    return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_queue_cancel_and_no_leftover_processes(tmp_path: Path, cache_dir: Path, endpoint) -> None:
    settings = {**SETTINGS, **endpoint("slow").settings()}
    async with lsp_session(tmp_path, cache_dir, init_options=settings) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        first = (await run_command(client, "kernel-lsp.generate", {"uri": uri, "module": "Model"}))["jobId"]
        second = (await run_command(client, "kernel-lsp.profile", {"uri": uri, "line": 6}))["jobId"]
        await wait_until(lambda: _state(client, first) == "running", timeout=30)
        jobs = await run_command(client, "kernel-lsp.listJobs")
        by_id = {j["id"]: j for j in jobs}
        assert by_id[second]["state"] == "queued" and f"behind generate job {first}" in by_id[second]["message"]
        assert set(by_id[first]) == {"id", "uri", "module", "kind", "state", "message", "percentage"}
        lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
        running = [l for l in lenses if l.command and l.command.command == "kernel-lsp.cancel"]
        assert running and "(+1 queued)" in running[0].command.title

        # Let the generation get to the model (the slow double waits there until cancelled).
        await wait_until(lambda: any(j["id"] == first and "sample 1/1" in j["message"]
                                     for js in client.jobs_seen for j in js), timeout=90)
        info = await run_command(client, "kernel-lsp.debugInfo")
        t0 = time.monotonic()
        out = await run_command(client, "kernel-lsp.cancel", {"uri": uri, "module": "Model"})
        assert sorted(out["cancelled"]) == sorted([first, second])
        await wait_until(lambda: _state(client, first) == "cancelled" and _state(client, second) == "cancelled",
                         timeout=5)
        assert time.monotonic() - t0 < 2.5
        token = f"kernel-lsp/job/{first}"
        await wait_until(lambda: isinstance(client.progress_reports.get(token, [None])[-1], types.WorkDoneProgressEnd))

        # Cancel from the progress UI (here while the job is still starting: it is reported cancelled within
        # 2 s even when its current step cannot be interrupted).
        third = (await run_command(client, "kernel-lsp.generate", {"uri": uri, "module": "Model"}))["jobId"]
        token = f"kernel-lsp/job/{third}"
        await wait_until(lambda: len(client.progress_reports.get(token, [])) >= 1 and _state(client, third) == "running",
                         timeout=30)
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
        final = await wait_job(client, third, timeout=5)
        assert final["state"] == "cancelled" and time.monotonic() - t0 < 2.5
        children = (await run_command(client, "kernel-lsp.debugInfo"))["children"] or info["children"]
        assert children, "the evaluator runs its workers as child processes"
    await asyncio.sleep(0.5)
    await wait_until(lambda: not [p for p in children if _alive(p)], timeout=10)


async def test_a_bare_client_without_progress_or_configuration(tmp_path: Path, cache_dir: Path, endpoint) -> None:
    """No window.workDoneProgress, no workspace.configuration: jobs still run and report through kernelLsp/jobs;
    pushed settings (didChangeConfiguration.settings) are used. A model that answers prose fails the job cleanly."""
    settings = {**SETTINGS, **endpoint("prose").settings()}
    async with lsp_session(tmp_path, cache_dir, init_options=settings,
                           capabilities=types.ClientCapabilities()) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"kernelLsp": {"samples": 2, "rounds": 1, "strategy": "zero-shot"}}))
        await wait_until(lambda: True)
        for _ in range(50):
            if (await run_command(client, "kernel-lsp.debugInfo"))["settings"]["samples"] == 2:
                break
            await asyncio.sleep(0.05)
        job = (await run_command(client, "kernel-lsp.bestOfN", {"uri": uri, "module": "Model"}))["jobId"]
        final = await wait_job(client, job, timeout=120)
        assert final["state"] == "failed" and "no correct candidate" in final["message"], final
        assert client.progress_reports == {}
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert rows == []


async def test_warm_start_begins_before_any_job(tmp_path: Path, cache_dir: Path) -> None:
    """warmStart (on by default): the evaluator's processes start with the server, before any click; off: none."""
    async with lsp_session(tmp_path, cache_dir, env={"KERNEL_LSP_WARM_START": "1"}) as client:
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["settings"]["warm_start"] is True
        children: list[int] = []

        async def poll() -> list[int]:
            children[:] = (await run_command(client, "kernel-lsp.debugInfo"))["children"]
            return children

        deadline = time.monotonic() + 60
        while not await poll():
            assert time.monotonic() < deadline, "no evaluator process started without a job"
            await asyncio.sleep(0.5)
        assert not client.jobs_seen or not any(client.jobs_seen)  # no job was asked for
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["torchLoaded"] is False  # the workers import torch, never the server
    async with lsp_session(tmp_path, cache_dir) as client:  # KERNEL_LSP_WARM_START=0
        await asyncio.sleep(3)
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["settings"]["warm_start"] is False and info["children"] == []
