"""Results read from a history written beforehand (no evaluator needed): diagnostics wording, hover table,
sibling accept, watchdog invalidation, prompt reloads; configuration sources and bad values."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsp_helpers import (
    MODEL_SRC,
    candidate_source,
    diags,
    lsp_session,
    open_doc,
    run_command,
    wait_until,
)
from lsprotocol import types

from evaluator.verdict import (
    Correctness,
    Profile,
    ProfileOp,
    Timing,
    TimingStats,
    Verdict,
)
from kernel_lsp.documents import analyse
from kernel_lsp.documents.sources import reference_assignments
from kernel_lsp.history import History


def _good() -> Verdict:
    return Verdict("correct", "ok", correctness=Correctness(trials=5, passed=5, atol=1e-4, rtol=1e-4, max_abs_err=0.0),
                   timing=Timing(device="cuda:0 (NVIDIA H200)", method="cuda-events",
                                 candidate=TimingStats(0.41, 0.01), eager=TimingStats(0.7544, 0.01),
                                 compiled=TimingStats(0.49, 0.01), speedup_eager=1.84, speedup_compiled=1.2,
                                 pct_of_limit=63.0))


def _compile_error() -> Verdict:
    return Verdict("compile_error", "compile failed",
                   compiler_log="main.cpp:7:5: error: 'foo' was not declared in this scope\nmain.cpp:9: note: x")


def seed_history(root: Path, src: str = MODEL_SRC) -> None:
    fp = analyse(src).fingerprint("Model", reference_assignments(src))
    with History(root / ".kernel-lsp") as h:
        h.add_candidate("relu.py::Model", "0" * 16, candidate_source(), strategy="zero-shot", verdict=_good())
        h.add_candidate("relu.py::Model", fp, candidate_source(), round=1, strategy="best-of-n", verdict=_good())
        h.add_candidate("relu.py::Model", fp, "broken", round=2, strategy="refine", verdict=_compile_error())
        h.save_profile("relu.py::Model", fp, Profile(device="cuda:0", total_ms=0.75, ops=[
            ProfileOp("aten::relu", 0.5, 0.66, 1, "[64, 256]"), ProfileOp("aten::mul", 0.25, 0.33, 1, "[64, 256]")],
            bound="memory", gpu={"name": "NVIDIA H200", "capability": "9.0", "bandwidth_gbs": 4100.0}))


async def test_diagnostics_and_hover_from_history(tmp_path: Path, cache_dir: Path) -> None:
    seed_history(tmp_path)
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        await wait_until(lambda: len(diags(client, uri)) == 2)
        warn, info = sorted(diags(client, uri), key=lambda d: d.severity)
        assert info.severity == types.DiagnosticSeverity.Information
        assert info.message == ("candidate 2: 1.84× faster than eager (0.41 ms vs 0.75 ms), 1.20× faster than "
                                "torch.compile, correct on 5 trials")
        assert warn.severity == types.DiagnosticSeverity.Warning
        assert warn.message == ("candidate 3 failed (compile error): "
                                "main.cpp:7:5: error: 'foo' was not declared in this scope")
        assert info.range.start == types.Position(4, 6) and info.range.end == types.Position(4, 11)
        hover = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                         types.Position(4, 9)))
        md = hover.contents.value
        assert hover.contents.kind == types.MarkupKind.Markdown
        assert "| 1 | 0 | zero-shot | correct (stale) |" in md
        assert "| 2 ★ | 1 | best-of-n | correct | 0 | 0.41 ms | 1.84× faster | 1.20× faster | 63% |" in md
        assert "| 3 | 2 | refine | compile error |" in md
        assert "| `aten::relu` | 0.5 | 66% | 1 | [64, 256] |" in md and "memory-bound" in md
        assert "**GPU**: NVIDIA H200, sm 9.0, 4100 GB/s" in md
        lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
        assert any(l.command.title == "Accept candidate 2 (1.84× faster than eager)" for l in lenses)
        assert await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                        types.Position(12, 4))) is None


async def test_accept_to_a_sibling_file(tmp_path: Path, cache_dir: Path) -> None:
    seed_history(tmp_path)
    async with lsp_session(tmp_path, cache_dir, init_options={"acceptTarget": "sibling"}) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        out = await run_command(client, "kernel-lsp.accept", {"uri": uri, "module": "Model", "candidate": 2})
        assert out["applied"] is True and out["path"] == str(tmp_path / "relu_kernel.py")
        text = (tmp_path / "relu_kernel.py").read_text()
        assert "class ModelNew" in text and text.startswith("# kernel-lsp: candidate 2 of Model (1.84× faster than eager)")
        assert (tmp_path / "relu.py").read_text() == MODEL_SRC and client.edits == []
        out = await run_command(client, "kernel-lsp.accept", {"uri": uri, "module": "Model", "candidate": 99})
        assert out["applied"] is False and "no candidate 99" in out["failureReason"]


async def test_inline_accept_replaces_an_earlier_block(tmp_path: Path, cache_dir: Path) -> None:
    seed_history(tmp_path)
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        await run_command(client, "kernel-lsp.accept", {"uri": uri, "module": "Model", "candidate": 2})
        edit = client.edits[-1].edit.document_changes[0]
        assert edit.text_document.version == 1
        e = edit.edits[0]
        lines = MODEL_SRC.splitlines()
        assert e.range.start.line == len(lines) - 1  # appended after the last line
        text = MODEL_SRC.rstrip("\n") + e.new_text + "\n"
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2), [types.TextDocumentContentChangeWholeDocument(text)]))
        await run_command(client, "kernel-lsp.accept", {"uri": uri, "module": "Model", "candidate": 2})
        edit2 = client.edits[-1].edit.document_changes[0]
        assert edit2.text_document.version == 2
        start = text.splitlines().index(next(l for l in text.splitlines() if l.startswith("# >>> kernel-lsp")))
        assert edit2.edits[0].range.start.line == start  # the accepted block is replaced, not duplicated
        client.apply_edit_result = False
        out = await run_command(client, "kernel-lsp.accept", {"uri": uri, "module": "Model", "candidate": 2})
        assert out["applied"] is False
        await wait_until(lambda: any("Accept candidate 2" in m.message for m in client.messages))


async def test_watchdog_invalidates_files_changed_on_disk(tmp_path: Path, cache_dir: Path) -> None:
    seed_history(tmp_path)
    (tmp_path / "prompts").mkdir()
    path = tmp_path / "relu.py"
    path.write_text(MODEL_SRC)
    async with lsp_session(tmp_path, cache_dir, init_options={"promptsDir": "prompts"}) as client:
        uri = path.as_uri()  # never opened in the editor
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert [r["stale"] for r in rows] == [True, False, False]
        await asyncio.sleep(1.0)  # watchdog sets its recursive inotify watches up in its own thread
        path.write_text(MODEL_SRC.replace("* 2.0", "* 4.0"))  # e.g. git checkout
        async def all_stale() -> bool:
            rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
            return all(r["stale"] for r in rows)
        for _ in range(100):
            if await all_stale():
                break
            await asyncio.sleep(0.1)
        assert await all_stale()
        (tmp_path / "prompts" / "system.j2").write_text("You write kernels.")
        for _ in range(100):
            info = await run_command(client, "kernel-lsp.debugInfo")
            if info["promptReloads"]:
                break
            await asyncio.sleep(0.1)
        assert info["promptReloads"] >= 1


async def test_configuration_sources_and_bad_values(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.kernel-lsp]\nsamples = 5\nrounds = 2\n')
    init = {"rounds": 4, "trials": "many", "kernelLspUnknown": 1}
    async with lsp_session(tmp_path, cache_dir, init_options=init) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        await wait_until(lambda: client.messages)
        msg = client.messages[0]
        assert msg.type == types.MessageType.Warning and "trials = 'many' is not an integer" in msg.message
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["settings"]["samples"] == 5 and info["settings"]["rounds"] == 4  # pyproject < init options
        assert info["settings"]["trials"] == 3  # bad value: the layer below (env of the test) is kept
        lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
        assert any(l.command.title.startswith("Best of 5 (") for l in lenses)
        assert info["evaluator"]["time_compiled"] is True and info["evaluator"]["trials"] == 3

        client.set_configuration({"samples": 7, "acceptTarget": "sibling", "timeCompiled": False,
                                  "logFile": "logs/server.log"}, section="kernelLsp")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        async def samples() -> int:
            return (await run_command(client, "kernel-lsp.debugInfo"))["settings"]["samples"]
        for _ in range(50):
            if await samples() == 7:
                break
        assert await samples() == 7
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["settings"]["accept_target"] == "sibling" and info["settings"]["rounds"] == 4
        assert info["evaluator"]["time_compiled"] is False  # the next job's evaluator: no restart of the server
        await wait_until(lambda: (tmp_path / "logs" / "server.log").exists())  # log_file: the server logs there too
        lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
        assert any(l.command.title.startswith("Best of 7 (") for l in lenses)

        n = len(client.messages)
        client.set_configuration({"samples": 0, "strategy": "magic"}, section="kernelLsp")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await wait_until(lambda: len(client.messages) > n)
        assert "samples = 0 is out of range" in client.messages[-1].message
        assert "strategy = 'magic' is not one of" in client.messages[-1].message
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["settings"]["samples"] == 5 and info["settings"]["strategy"] == "profile-guided"
