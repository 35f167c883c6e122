"""The language server end to end over stdio on a KernelBench-style file holding both `Model` and a hand-written
`ModelNew`: `kernel-lsp.verify` verifies and times it; the diagnostic carries the speedup and the hover the timing
table with the device. On the GPU: a CUDA fixture against its KernelBench reference (skipped without CUDA or
without the KernelBench data). On the CPU, in CI: a C++ fixture through the very same steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lsp_helpers import diags, lsp_session, needs_evaluator, open_doc, run_command, wait_job, wait_until
from lsprotocol import types

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import fixturelib  # noqa: E402

torch = pytest.importorskip("torch")

pytestmark = [needs_evaluator, pytest.mark.slow]


def _cuda_file() -> str:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    fixture = fixturelib.KERNELS / "level1" / "19_ReLU.py"
    ref = fixturelib.fixture_reference(fixture)
    if ref is None:
        pytest.skip("KernelBench data not found (set KERNELBENCH_DIR)")
    return ref.rstrip() + "\n\n\n" + fixture.read_text()


def _cpu_file() -> str:
    return fixturelib.cpu_reference("scale_bias_relu").rstrip() + "\n\n\n" + fixturelib.cpu_candidate("scale_bias_relu")


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu), "cpu"])
async def test_verify_model_new_shows_speedup_and_device(device: str, tmp_path: Path, cache_dir: Path) -> None:
    text = _cuda_file() if device == "cuda" else _cpu_file()
    env = {"KERNEL_LSP_DEVICE": device, "KERNEL_LSP_TRIALS": "5", "KERNEL_LSP_TIMING_CALLS": "30",
           "KERNEL_LSP_TIME_COMPILED": "false"}
    async with lsp_session(tmp_path, cache_dir, env=env) as client:
        uri = await open_doc(client, tmp_path / "task.py", text)
        line = text.splitlines().index("class Model(nn.Module):")
        res = await run_command(client, "kernel-lsp.verify", {"uri": uri, "line": line})
        assert res.get("jobId") is not None, res
        final = await wait_job(client, res["jobId"], timeout=400)
        assert final["state"] == "done", f"{final['state']}: {final.get('message')}"
        await wait_until(lambda: [d for d in diags(client, uri) if d.code == "verify"], timeout=10)
        d = next(d for d in diags(client, uri) if d.code == "verify")
        assert d.severity == types.DiagnosticSeverity.Information, d.message
        # 5 trials of the task's inputs and two out of its distribution (signed, wide)
        assert "than eager" in d.message and "correct on 7 trials" in d.message, d.message
        hover = await client.text_document_hover_async(types.HoverParams(
            types.TextDocumentIdentifier(uri), types.Position(line, 7)))
        assert hover is not None
        md = hover.contents.value
        name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
        assert name in md, md
        assert "**ModelNew in this file**: " in md and "correct on 7 trials" in md and "| ModelNew ms |" in md, md
        print(d.message, md, sep="\n")
