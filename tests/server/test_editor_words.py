"""What a user reads in the editor (issue 18, items 2-5, and issue 17's uncertain speedups), from a history written
beforehand (no evaluator): one way to write a speed in the lens, diagnostic, hover, code actions and candidate
list; an uncertain speedup never as a plain number; Accept not offered once its block is in the file; one spelling
of the strategy and no "Best of 1"; no Markdown in diagnostics."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from lsp_helpers import MODEL_SRC, apply_edits, candidate_source, diags, lsp_session, open_doc, run_command, wait_until
from lsprotocol import types

from evaluator.verdict import Correctness, Timing, TimingStats, Verdict
from kernel_lsp.documents import analyse
from kernel_lsp.documents.sources import reference_assignments
from kernel_lsp.generation.engine import NO_KERNEL, what_to_try
from kernel_lsp.history import History
from kernel_lsp.jobs.runners import GENERATION_KIND

KEY = "relu.py::Model"


def _fp(src: str = MODEL_SRC) -> str:
    return analyse(src).fingerprint("Model", reference_assignments(src))


def _verdict(speedup: float, *, compiled: float | None = None, ci: float | None = None, uncertain: bool = False,
             noise: str = "") -> Verdict:
    eager = 0.41 * speedup
    t = Timing(device="cpu", method="perf-counter", candidate=TimingStats(0.41, 0.01), eager=TimingStats(eager, 0.01),
               compiled=TimingStats(0.41 * compiled, 0.01) if compiled else None, speedup_eager=speedup,
               speedup_compiled=compiled, speedup_ci_pct=ci, uncertain=uncertain, noise=noise)
    return Verdict.from_dict(Verdict("correct", "ok", correctness=Correctness(trials=5, passed=5, max_abs_err=0.0),
                                     timing=t).to_dict())


def _seed(root: Path, *verdicts: Verdict) -> None:
    with History(root / ".kernel-lsp") as h:
        for i, v in enumerate(verdicts, 1):
            h.add_candidate(KEY, _fp(), candidate_source(), round=1, sample=i, strategy="best-of-n", verdict=v)


async def _lenses(client, uri: str) -> list[str]:
    got = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    return [lens.command.title for lens in got]


async def _actions(client, uri: str, line: int = 4) -> list[types.CodeAction]:
    return await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(uri), types.Range(types.Position(line, 0), types.Position(line, 0)),
        types.CodeActionContext(diagnostics=[])))


async def _hover(client, uri: str) -> str:
    h = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri),
                                                                 types.Position(4, 8)))
    return h.contents.value


async def test_a_slower_kernel_reads_the_same_everywhere(tmp_path: Path, cache_dir: Path) -> None:
    _seed(tmp_path, _verdict(1 / 1.07, compiled=1 / 2.3))
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        info = (await wait_until(lambda: [d for d in diags(client, uri) if d.code == "candidate"]))[0]
        assert info.message == ("candidate 1: 1.07× slower than eager (0.41 ms vs 0.38 ms), "
                                "2.30× slower than torch.compile, correct on 5 trials")
        assert "Accept candidate 1 (1.07× slower than eager)" in await _lenses(client, uri)
        titles = [a.title for a in await _actions(client, uri)]
        assert "Accept candidate 1 (1.07× slower than eager)" in titles
        md = await _hover(client, uri)
        assert "| vs eager | vs torch.compile |" in md
        assert "| 1.07× slower | 2.30× slower |" in md
        assert "0.94" not in md + info.message  # the factor is never written the other way round
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert rows[0]["speed"] == "1.07× slower than eager" and rows[0]["uncertain"] is False


async def test_an_uncertain_speedup_is_never_a_plain_number(tmp_path: Path, cache_dir: Path) -> None:
    _seed(tmp_path, _verdict(2.1, compiled=1.3, ci=25.0, uncertain=True, noise="the machine was busy"))
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        info = (await wait_until(lambda: [d for d in diags(client, uri) if d.code == "candidate"]))[0]
        assert info.message == ("candidate 1: 2.10× ± 25 % faster than eager (0.41 ms vs 0.86 ms, uncertain), "
                                "1.30× faster than torch.compile (uncertain), correct on 5 trials — uncertain "
                                "because the machine was busy"), info.message
        lens = [t for t in await _lenses(client, uri) if t.startswith("Accept")]
        assert lens == ["Accept candidate 1 (2.10× ± 25 % faster than eager, uncertain)"]  # why: in the hover
        md = await _hover(client, uri)
        assert "| 2.10× ± 25 % faster (uncertain) | 1.30× faster (uncertain) |" in md, md
        assert "candidate 1 uncertain: ± 25 % (the machine was busy)" in md
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert rows[0]["uncertain"] is True and rows[0]["speed"] == "2.10× ± 25 % faster than eager (uncertain)"
        for text in (info.message, *lens, md, rows[0]["speed"]):  # "2.10×" only ever comes with its ± figure
            assert text.count("2.10×") == text.count("2.10× ± 25 %"), text


async def test_accept_is_not_offered_once_its_block_is_in_the_file(tmp_path: Path, cache_dir: Path) -> None:
    _seed(tmp_path, _verdict(1.5), _verdict(1.2))
    async with lsp_session(tmp_path, cache_dir) as client:
        path = tmp_path / "relu.py"
        uri = await open_doc(client, path, MODEL_SRC)
        assert "Accept candidate 1 (1.50× faster than eager)" in await _lenses(client, uri)
        out = await run_command(client, "kernel-lsp.accept", {"uri": uri, "module": "Model", "candidate": 1})
        assert out["applied"] is True
        text = apply_edits(MODEL_SRC, client.edits[-1].edit.document_changes[0].edits)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            [types.TextDocumentContentChangeWholeDocument(text)]))
        await wait_until(lambda: [d for d in diags(client, uri) if d.code == "candidate"], timeout=5)
        lenses = await _lenses(client, uri)
        assert not [t for t in lenses if t.startswith("Accept")], lenses
        assert "Verify ModelNew" in lenses  # the file now has a ModelNew
        titles = [a.title for a in await _actions(client, uri)]
        assert not [t for t in titles if t.startswith("Accept candidate 1")], titles
        # the slower candidate is still offered, but not as the preferred action (the faster one is in the file)
        acc = [a for a in await _actions(client, uri) if a.title.startswith("Accept candidate 2")]
        assert acc and not acc[0].is_preferred
        # the user edits the accepted block: it is their code now, and accepting candidate 1 is offered again
        edited = text.replace("return relu2_ext.relu2(x)", "return relu2_ext.relu2(x) * 1.0")
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=3),
            [types.TextDocumentContentChangeWholeDocument(edited)]))
        await _settle(client, uri, "Accept candidate 1 (1.50× faster than eager)")


async def _settle(client, uri: str, title: str) -> None:
    end = time.monotonic() + 5
    while time.monotonic() < end:
        if title in await _lenses(client, uri):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no lens {title!r}: {await _lenses(client, uri)}")


async def test_one_spelling_of_the_strategy_and_no_best_of_one(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir, init_options={"samples": 1}) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        lenses = await _lenses(client, uri)
        assert lenses[0] == "⚡ Generate kernel" and not [t for t in lenses if "Best of" in t], lenses
        titles = [a.title for a in await _actions(client, uri)]
        assert "Generate a kernel for Model (profile-guided)" in titles, titles
        assert not [t for t in titles if "Best of" in t or "profiling-guided" in t], titles
    async with lsp_session(tmp_path, cache_dir, init_options={"samples": 3, "strategy": "one-shot"}) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        assert "Best of 3" in await _lenses(client, uri)
        titles = [a.title for a in await _actions(client, uri)]
        assert "Generate a kernel for Model (one-shot)" in titles and "Best of 3 kernels for Model" in titles


async def test_diagnostics_hold_no_markdown(tmp_path: Path, cache_dir: Path) -> None:
    advice = what_to_try(NO_KERNEL, "no code block")
    assert "`" in advice  # the words carry code spans (the hover renders them) ...
    with History(tmp_path / ".kernel-lsp") as h:
        job = h.start_job(KEY, _fp(), GENERATION_KIND, strategy="profile-guided")
        h.finish_job(job, "done", f"no correct candidate in 2 attempt(s): 2 no kernel. {advice}")
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        warn = (await wait_until(lambda: [d for d in diags(client, uri) if d.code == "job-failed"]))[0]
        assert "`" not in warn.message and "**" not in warn.message  # ... the Problems panel shows them as they are
        assert "setting 'model' or 'endpoint'" in warn.message and "more 'samples'" in warn.message, warn.message
        assert "`samples`" in await _hover(client, uri)  # the hover keeps them: it is Markdown
