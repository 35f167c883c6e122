"""The language server on a real GPU, end to end over stdio: a KernelBench file with a hand-written CUDA ModelNew
is verified and timed through `kernel-lsp.verify`; the diagnostic carries the speedup and the hover the timing
table with the GPU's name. Skipped without CUDA or without the KernelBench data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lsp_helpers import diags, lsp_session, needs_evaluator, open_doc, run_command, wait_job, wait_until
from lsprotocol import types

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import fixturelib  # noqa: E402

torch = pytest.importorskip("torch")

pytestmark = [needs_evaluator, pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

FIXTURE = fixturelib.KERNELS / "level1" / "19_ReLU.py"


async def test_verify_cuda_model_new_shows_speedup_and_gpu(tmp_path: Path, cache_dir: Path) -> None:
    ref = fixturelib.fixture_reference(FIXTURE)
    if ref is None:
        pytest.skip("KernelBench data not found (set KERNELBENCH_DIR)")
    text = ref.rstrip() + "\n\n\n" + FIXTURE.read_text()
    env = {"KERNEL_LSP_DEVICE": "cuda", "KERNEL_LSP_TRIALS": "5", "KERNEL_LSP_TIMING_CALLS": "30",
           "KERNEL_LSP_TIME_COMPILED": "false"}
    async with lsp_session(tmp_path, cache_dir, env=env) as client:
        uri = await open_doc(client, tmp_path / "19_ReLU.py", text)
        line = text.splitlines().index("class Model(nn.Module):")
        res = await run_command(client, "kernel-lsp.verify", {"uri": uri, "line": line})
        final = await wait_job(client, res["jobId"], timeout=400)
        assert final["state"] == "done", final
        await wait_until(lambda: [d for d in diags(client, uri) if d.code == "verify"], timeout=10)
        d = next(d for d in diags(client, uri) if d.code == "verify")
        assert d.severity == types.DiagnosticSeverity.Information, d.message
        assert "than eager" in d.message and "correct on 5 trials" in d.message, d.message
        print("diagnostic:", d.message)
        hover = await client.text_document_hover_async(types.HoverParams(
            types.TextDocumentIdentifier(uri), types.Position(line, 7)))
        assert hover is not None
        md = hover.contents.value
        print(md)
        assert torch.cuda.get_device_name(0) in md, md
        assert "correct" in md and "ms" in md
