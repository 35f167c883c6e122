"""What a user reads in the editor (issue 18, items 2-5, issue 17's uncertain speedups, issue 27 items 1-2), from a
history written beforehand (no evaluator): one way to write a speed in the lens, diagnostic, hover, code actions and
candidate list; an uncertain speedup never as a plain number; a kernel no faster than eager shown for what it is,
never offered as the result; ★ and the offer on the lowest time, whatever each candidate's own eager run said;
Accept not offered once its block is in the file; one spelling of the strategy and no "Best of 1"; no Markdown in
diagnostics."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from lsp_helpers import MODEL_SRC, apply_edits, candidate_source, diags, lsp_session, open_doc, run_command, wait_until
from lsprotocol import types

from evaluator.verdict import Correctness, KernelCheck, Timing, TimingStats, Verdict
from kernel_lsp.documents import analyse
from kernel_lsp.documents.sources import reference_assignments
from kernel_lsp.generation.engine import NO_KERNEL, what_to_try
from kernel_lsp.history import History
from kernel_lsp.history.store import GENERATION_KIND

KEY = "relu.py::Model"


def _fp(src: str = MODEL_SRC) -> str:
    return analyse(src).fingerprint("Model", reference_assignments(src))


def _verdict(speedup: float, *, compiled: float | None = None, ci: float | None = None, uncertain: bool = False,
             noise: str = "", ms: float = 0.41) -> Verdict:
    eager = ms * speedup
    t = Timing(device="cpu", method="perf-counter", candidate=TimingStats(ms, 0.01), eager=TimingStats(eager, 0.01),
               compiled=TimingStats(ms * compiled, 0.01) if compiled else None, speedup_eager=speedup,
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


async def test_a_slower_kernel_is_shown_for_what_it_is_and_not_offered(tmp_path: Path, cache_dir: Path) -> None:
    """Issue 27 item 1: the only correct kernel is slower than eager. Nothing recommends it (no ★, no "Accept", no
    preferred action); every place says how slow it is, and the action that takes it says "anyway"."""
    _seed(tmp_path, _verdict(1 / 1.07, compiled=1 / 2.3))
    async with lsp_session(tmp_path, cache_dir) as client:
        path = tmp_path / "relu.py"
        uri = await open_doc(client, path, MODEL_SRC)
        info = (await wait_until(lambda: [d for d in diags(client, uri) if d.code == "candidate-not-faster"]))[0]
        assert info.severity == types.DiagnosticSeverity.Information
        assert info.message == ("no kernel faster than eager yet: the fastest correct one, candidate 1, is 1.07× "
                                "slower than eager (0.41 ms vs 0.38 ms), correct on 5 trials")
        assert not [d for d in diags(client, uri) if d.code == "candidate"]
        lenses = await _lenses(client, uri)
        assert "Insert candidate 1 anyway (1.07× slower than eager)" in lenses, lenses
        assert not [t for t in lenses if t.startswith("Accept")], lenses
        acts = [a for a in await _actions(client, uri) if a.kind == "refactor.rewrite.kernelLsp.accept"]
        assert [a.title for a in acts] == ["Insert candidate 1 anyway (1.07× slower than eager)"]
        assert not acts[0].is_preferred  # "auto fix" never applies it
        md = await _hover(client, uri)
        assert "| vs eager | vs torch.compile |" in md
        assert "| 1 | 1 | best-of-n | correct | 0 | 0.41 ms | 1.07× slower | 2.30× slower |" in md, md
        assert "★" not in md
        assert ("**No kernel faster than eager: the fastest correct one, candidate 1, is 1.07× slower than eager "
                "(0.41 ms vs 0.38 ms)**: not offered as the result (*Insert candidate 1 anyway* puts it in the "
                "file).") in md, md
        assert "0.94" not in md + info.message  # the factor is never written the other way round
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert rows[0]["speed"] == "1.07× slower than eager" and rows[0]["uncertain"] is False
        assert (rows[0]["rank"], rows[0]["offered"], rows[0]["faster"]) == (1, False, False)
        # the user may still take it: only when they ask, and only through the editor
        out = await run_command(client, "kernel-lsp.accept", {"uri": uri, "module": "Model", "candidate": 1})
        assert out["applied"] is True and "accepted candidate 1" in client.edits[-1].edit.document_changes[0].edits[0].new_text
        assert path.read_text() == MODEL_SRC


async def test_a_speedup_whose_interval_reaches_one_is_not_a_win(tmp_path: Path, cache_dir: Path) -> None:
    _seed(tmp_path, _verdict(1.02, ci=8.0, uncertain=True, noise="the machine was busy"))
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        info = (await wait_until(lambda: [d for d in diags(client, uri) if d.code == "candidate-not-faster"]))[0]
        assert info.message == ("no kernel shown faster than eager yet: the fastest correct one, candidate 1, is "
                                "1.02× ± 8 % faster than eager (0.41 ms vs 0.42 ms), not shown faster, correct on 5 "
                                "trials — uncertain because the machine was busy"), info.message
        lenses = await _lenses(client, uri)
        assert "Insert candidate 1 anyway (1.02× ± 8 % faster than eager, not shown faster)" in lenses, lenses
        assert "★" not in await _hover(client, uri)
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert rows[0]["speed"] == "1.02× ± 8 % faster than eager, not shown faster" and not rows[0]["offered"]


async def test_the_star_and_the_offer_follow_the_lowest_time(tmp_path: Path, cache_dir: Path) -> None:
    """Issue 27 item 2: candidate 1 (0.238 ms) reads 9× faster against its own, slow, eager run; candidate 2
    (0.22 ms) 1.2×. Candidate 2 is the faster kernel: ★, the lens, the diagnostic, the preferred action and the
    candidate list all name it (docs/REWARDS.md); candidate 1 stays an Accept of its own, not preferred."""
    _seed(tmp_path, _verdict(9.0, ms=0.238), _verdict(1.2, ms=0.22))
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        info = (await wait_until(lambda: [d for d in diags(client, uri) if d.code == "candidate"]))[0]
        assert info.message.startswith("candidate 2: 1.20× faster than eager (0.22 ms vs 0.26 ms)"), info.message
        lenses = await _lenses(client, uri)
        assert [t for t in lenses if t.startswith(("Accept", "Insert"))] == ["Accept candidate 2 (1.20× faster than eager)"]
        md = await _hover(client, uri)
        starred = [line for line in md.splitlines() if "★" in line]
        assert len(starred) == 1 and starred[0].startswith("| 2 ★ |") and "0.22 ms" in starred[0], md
        assert "| 1 | 1 | best-of-n | correct | 0 | 0.238 ms | 9.00× faster |" in md, md
        acts = [a for a in await _actions(client, uri) if a.kind == "refactor.rewrite.kernelLsp.accept"]
        assert [(a.title, bool(a.is_preferred)) for a in acts] == [
            ("Accept candidate 2 (1.20× faster than eager)", True), ("Accept candidate 1 (9.00× faster than eager)", False)]
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert [(r["number"], r["rank"], r["offered"], r["faster"]) for r in rows] == [(1, 2, False, True),
                                                                                        (2, 1, True, True)]


async def test_a_library_only_candidate_is_shown_as_such_and_still_offered(tmp_path: Path, cache_dir: Path) -> None:
    """A correct candidate whose library operators do the reference's work (kernel finding library_only) says so in
    the diagnostic, the hover and the candidate list, and is offered like any correct candidate faster than eager;
    an own-code one reads as before."""
    lib = _verdict(2.0)
    lib.kernel = KernelCheck(finding="library_only", message="library operators do every class of the reference's "
                             "work (elementwise)")
    _seed(tmp_path, Verdict.from_dict(lib.to_dict()))
    async with lsp_session(tmp_path, cache_dir) as client:
        path = tmp_path / "relu.py"
        uri = await open_doc(client, path, MODEL_SRC)
        info = (await wait_until(lambda: [d for d in diags(client, uri) if d.code == "candidate"]))[0]
        assert info.message == ("candidate 1: 2.00× faster than eager (0.41 ms vs 0.82 ms), correct on 5 trials, "
                                "uses PyTorch operators only"), info.message
        lenses = await _lenses(client, uri)
        assert "Accept candidate 1 (2.00× faster than eager)" in lenses, lenses
        md = await _hover(client, uri)
        assert "| 1 ★ | 1 | best-of-n | correct (uses PyTorch operators only) | 0 | 0.41 ms | 2.00× faster |" in md, md
        assert "candidate 1 uses PyTorch operators only" in md
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert (rows[0]["offered"], rows[0]["faster"], rows[0]["libraryOnly"]) == (True, True, True)
        out = await run_command(client, "kernel-lsp.accept", {"uri": uri, "module": "Model", "candidate": 1})
        assert out["applied"] is True


async def test_an_own_code_candidate_reads_as_before(tmp_path: Path, cache_dir: Path) -> None:
    own = _verdict(2.0)
    own.kernel = KernelCheck(finding="own_code", message="its own code does the reference's elementwise work")
    _seed(tmp_path, Verdict.from_dict(own.to_dict()))
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        info = (await wait_until(lambda: [d for d in diags(client, uri) if d.code == "candidate"]))[0]
        assert info.message == "candidate 1: 2.00× faster than eager (0.41 ms vs 0.82 ms), correct on 5 trials"
        md = await _hover(client, uri)
        assert "| 1 ★ | 1 | best-of-n | correct | 0 | 0.41 ms | 2.00× faster |" in md and "PyTorch operators" not in md
        rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
        assert rows[0]["libraryOnly"] is False


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
        assert any(t.startswith("Best of 3 (embedded model: up to ") for t in await _lenses(client, uri))
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
