"""Documents, lenses, actions, hover without results; robustness; stdout discipline; no torch in the server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsp_helpers import (
    MODEL_SRC,
    NOISY_SERVER_CMD,
    diags,
    lsp_session,
    model_new,
    open_doc,
    run_command,
    wait_until,
)
from lsprotocol import types

PLAIN_MODULE = '''import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, scale: float = 0.5, bias=True):
        super().__init__()
        self.lin = nn.Linear(dim, dim, bias=bias)
        self.scale = scale

    def forward(self, x: torch.Tensor, steps: int = 2) -> torch.Tensor:
        for _ in range(steps):
            x = self.lin(x) * self.scale
        return x
'''


def _lens_titles(lenses: list[types.CodeLens]) -> list[str]:
    return [l.command.title for l in lenses if l.command]


async def _lenses(client, uri: str) -> list[types.CodeLens]:
    return await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(uri)))


async def _actions(client, uri: str, line: int, only=None, diagnostics=()) -> list[types.CodeAction]:
    res = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(uri), types.Range(types.Position(line, 0), types.Position(line, 0)),
        types.CodeActionContext(diagnostics=list(diagnostics), only=only)))
    return [a for a in res or [] if isinstance(a, types.CodeAction)]


async def test_capabilities_lenses_actions_and_no_torch(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC + model_new())
        titles = _lens_titles(await _lenses(client, uri))
        assert "⚡ Generate kernel" in titles and "Verify ModelNew" in titles and "Profile" in titles
        assert any(t.startswith("Best of ") for t in titles)
        acts = await _actions(client, uri, 5)
        kinds = {a.kind for a in acts}
        assert "refactor.kernelLsp.generate" in kinds and "refactor.kernelLsp.verify" in kinds
        assert all(a.command is None and a.edit is None for a in acts)  # filled in by resolve
        gen = next(a for a in acts if a.kind == "refactor.kernelLsp.generate")
        resolved = await client.code_action_resolve_async(gen)
        assert resolved.command is not None and resolved.command.command == "kernel-lsp.generate"
        assert list(resolved.command.arguments) == [{"uri": uri, "module": "Model"}]
        only = await _actions(client, uri, 5, only=["quickfix"])
        assert only == []
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["torchLoaded"] is False and "torch" not in info["modules"]
        assert "lsprotocol" in info["modules"]


async def test_code_action_resolve_provider_is_advertised(tmp_path: Path, cache_dir: Path) -> None:
    from lsp_helpers import SERVER_CMD, ClientServerConfig, server_env
    from pytest_lsp import client_capabilities

    client = await ClientServerConfig(server_command=SERVER_CMD, server_env=server_env(cache_dir)).start()
    try:
        result = await client.initialize_session(types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri=tmp_path.as_uri()))
        cap = result.capabilities.code_action_provider
        assert isinstance(cap, types.CodeActionOptions) and cap.resolve_provider is True
        assert "quickfix" in (cap.code_action_kinds or [])
        cmds = result.capabilities.execute_command_provider.commands
        for name in ("generate", "bestOfN", "refine", "verify", "profile", "cancel", "accept", "listCandidates",
                     "listJobs"):
            assert f"kernel-lsp.{name}" in cmds
        await client.shutdown_session()
    finally:
        await client.stop()


async def test_inputs_quick_fix_on_a_plain_module(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "block.py", PLAIN_MODULE)
        await wait_until(lambda: diags(client, uri))
        hint = diags(client, uri)[0]
        assert hint.severity == types.DiagnosticSeverity.Hint and "get_inputs()" in hint.message
        assert _lens_titles(await _lenses(client, uri)) == ["kernel-lsp: add get_inputs() / get_init_inputs()"]
        # the hover says what is missing and names the lens that is there (not Generate, which is not)
        line = PLAIN_MODULE.splitlines().index(next(t for t in PLAIN_MODULE.splitlines() if t.startswith("class ")))
        col = PLAIN_MODULE.splitlines()[line].index(" ") + 2
        hover = (await client.text_document_hover_async(types.HoverParams(
            types.TextDocumentIdentifier(uri), types.Position(line, col)))).contents.value
        assert "without `get_inputs()` and `get_init_inputs()`, which this file does not define" in hover, hover
        assert "*kernel-lsp: add get_inputs() / get_init_inputs()* above the class" in hover, hover
        assert "use *Generate kernel* above" not in hover, hover
        acts = await _actions(client, uri, 6, diagnostics=[hint])
        assert [a.kind for a in acts] == ["quickfix"]
        fix = await client.code_action_resolve_async(acts[0])
        assert fix.edit is not None and fix.edit.document_changes
        change = fix.edit.document_changes[0]
        assert isinstance(change, types.TextDocumentEdit) and change.text_document.version == 1
        new_text = _apply(PLAIN_MODULE, change.edits)
        ns: dict = {}
        exec(compile(new_text, "block.py", "exec"), ns)  # noqa: S102 - the stub is valid Python and runs
        assert ns["get_init_inputs"]() == [1, 0.5, True]
        x, steps = ns["get_inputs"]()
        assert tuple(x.shape) == (16, 1024) and steps == 2
        assert "TODO" in new_text
        # The fixed file is a task: the hint goes, generation lenses appear.
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            [types.TextDocumentContentChangeWholeDocument(new_text)]))
        await wait_until(lambda: not diags(client, uri), timeout=5)
        assert "⚡ Generate kernel" in _lens_titles(await _lenses(client, uri))


def _apply(text: str, edits) -> str:
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def off(p: types.Position) -> int:
        return offsets[min(p.line, len(lines))] + p.character

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: off(e.range.start)] + e.new_text + text[off(e.range.end):]
        lines = text.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
    return text


async def test_syntax_error_keeps_last_good_analysis(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        assert _lens_titles(await _lenses(client, uri))
        for v in range(2, 31):  # rapid edits, every other one broken, the last one too
            text = MODEL_SRC.replace("return torch.relu(x) * 2.0", "return torch.relu(x" + ")" * (v % 2))
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(uri=uri, version=v), [types.TextDocumentContentChangeWholeDocument(text)]))
        titles = _lens_titles(await _lenses(client, uri))  # v=30: broken; still the last good analysis
        assert "⚡ Generate kernel" in titles
        hover = await client.text_document_hover_async(types.HoverParams(
            types.TextDocumentIdentifier(uri), types.Position(4, 8)))
        assert hover is not None and "No candidates yet" in hover.contents.value
        res = await run_command(client, "kernel-lsp.generate", {"uri": uri, "module": "Model"})
        assert res["jobId"] is None and "syntax error" in res["error"]
        await wait_until(lambda: client.messages)
        assert not [m for m in client.log_messages if "Traceback" in m.message]


async def test_odd_uris_huge_files_and_bad_arguments(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir) as client:
        for uri in ("untitled:Untitled-1", "file:///c%3A/Users/me/model.py", "vscode-notebook-cell:/x.ipynb#W1"):
            client.text_document_did_open(types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=uri, language_id="python", version=1, text=MODEL_SRC)))
            titles = _lens_titles(await _lenses(client, uri))
            assert "⚡ Generate kernel" in titles, uri
            hover = await client.text_document_hover_async(types.HoverParams(
                types.TextDocumentIdentifier(uri), types.Position(4, 8)))
            assert hover is not None
        # Never opened, not on disk.
        assert not await _lenses(client, (tmp_path / "nope.py").as_uri())
        assert await client.text_document_hover_async(types.HoverParams(
            types.TextDocumentIdentifier("file:///does/not/exist.py"), types.Position(0, 0))) is None
        huge = MODEL_SRC + "# " + "x" * (3 * 1024 * 1024) + "\n"
        uri = await open_doc(client, tmp_path / "huge.py", huge)
        # no lens to run a job, and a word why (a lens without a command, and a diagnostic)
        [lens] = await _lenses(client, uri)
        assert lens.command.command == "" and "too large to analyse (3.0 MB)" in lens.command.title
        assert "2 MB limit" in lens.command.title
        await wait_until(lambda: [d for d in diags(client, uri) if d.code == "too-large"])
        for args in ([], [{}], [{"uri": uri}], [{"uri": uri, "module": "Nope"}], ["junk"], [{"jobId": "x"}]):
            for cmd in ("kernel-lsp.generate", "kernel-lsp.cancel", "kernel-lsp.listCandidates", "kernel-lsp.accept"):
                await run_command(client, cmd, *args)  # answered, no crash
        assert await run_command(client, "kernel-lsp.listJobs") == []
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["pid"] > 0


async def test_stdout_noise_does_not_break_the_protocol(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir, server_cmd=NOISY_SERVER_CMD) as client:
        await asyncio.sleep(0.3)
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        assert _lens_titles(await _lenses(client, uri))
        assert (await run_command(client, "kernel-lsp.debugInfo"))["torchLoaded"] is False


async def test_a_client_that_cancels_everything(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir) as client:
        uri = await open_doc(client, tmp_path / "relu.py", MODEL_SRC)
        doc = types.TextDocumentIdentifier(uri)
        pending = []
        for i in range(40):
            pending.append(client.text_document_hover_async(types.HoverParams(doc, types.Position(4, 8))))
            pending.append(client.text_document_code_lens_async(types.CodeLensParams(doc)))
            for msg_id in list(client.protocol._request_futures)[-2:]:
                client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
            client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=10_000 + i))  # unknown ids
            client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=f"nope-{i}"))
            client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=f"kernel-lsp/job/{i}"))
        await asyncio.gather(*pending, return_exceptions=True)
        for arg in ({"jobId": 1}, {"uri": uri, "module": "Model"}, {"uri": uri, "line": 5}):
            assert (await run_command(client, "kernel-lsp.cancel", arg))["cancelled"] == []
        assert _lens_titles(await _lenses(client, uri))  # still serving
