"""A large document is analysed in a process of its own: editing a 10,000-line file does not hold up requests on
other documents (the figures under load are in benchmarks/bench_lsp_latency.py), and its own lenses still come."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from lsp_helpers import MODEL_SRC, lsp_session, open_doc, run_command
from lsprotocol import types


def big_source(lines: int = 10_000) -> str:
    """A 10,000-line file: a Model with its inputs, 150 other modules and many helper functions."""
    out = [MODEL_SRC]
    i = 0
    while sum(part.count("\n") for part in out) < lines:
        if i % 6 == 0:
            out.append(f"\n\nclass Block{i}(nn.Module):\n    def __init__(self, n: int = {i}):\n"
                       f"        super().__init__()\n        self.n = n\n\n    def forward(self, x):\n"
                       f"        return torch.relu(x) * self.n + {i}.0\n")
        else:
            out.append(f"\n\ndef helper_{i}(x, scale={i}.5):\n    \"\"\"Helper {i}.\"\"\"\n    y = x * scale\n"
                       f"    for _ in range(3):\n        y = y + {i}\n    return y - x\n")
        i += 1
    return "".join(out)


def _p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]


async def test_editing_a_large_file_does_not_hold_up_other_documents(tmp_path: Path, cache_dir: Path) -> None:
    async with lsp_session(tmp_path, cache_dir) as client:
        small = types.TextDocumentIdentifier(await open_doc(client, tmp_path / "relu.py", MODEL_SRC))
        text = big_source()
        assert text.count("\n") >= 10_000
        big_uri = await open_doc(client, tmp_path / "big.py", text)
        big = types.TextDocumentIdentifier(big_uri)
        stop = asyncio.Event()
        on_big: list[asyncio.Future] = []
        lens_answers: list[asyncio.Future] = []

        async def edit_the_big_file() -> None:
            for version in range(2, 40):  # an edit every 50 ms ...
                client.text_document_did_change(types.DidChangeTextDocumentParams(
                    types.VersionedTextDocumentIdentifier(uri=big_uri, version=version),
                    [types.TextDocumentContentChangePartial(
                        range=types.Range(types.Position(3, 0), types.Position(3, 0)), text=f"# edit {version}\n")]))
                # ... each followed, as in VS Code, by requests on the edited file that need its new analysis
                on_big.append(asyncio.ensure_future(client.text_document_code_action_async(types.CodeActionParams(
                    big, types.Range(types.Position(6, 0), types.Position(6, 0)),
                    types.CodeActionContext(diagnostics=[])))))
                if version % 5 == 0:  # VS Code asks for lenses again after a pause of ~250 ms
                    lens_answers.append(asyncio.ensure_future(client.text_document_code_lens_async(
                        types.CodeLensParams(big))))
                await asyncio.sleep(0.05)
            stop.set()

        editing = asyncio.create_task(edit_the_big_file())
        took: list[float] = []
        while not stop.is_set():
            t0 = time.perf_counter()
            await client.text_document_hover_async(types.HoverParams(small, types.Position(4, 8)))
            took.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            await client.text_document_code_action_async(types.CodeActionParams(
                small, types.Range(types.Position(6, 0), types.Position(6, 0)), types.CodeActionContext(diagnostics=[])))
            took.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.01)
        await editing
        await asyncio.wait_for(asyncio.gather(*on_big), 60)  # every request on the large file is answered
        assert all(await asyncio.wait_for(asyncio.gather(*lens_answers), 60))  # with the file's lenses
        # The goal is 50 ms p99 (measured by the benchmark); this bound is loose for a loaded 2-core CI machine but
        # far below the 0.7-1.5 s such requests waited when the large file was analysed on the event loop.
        assert len(took) >= 40 and _p99(took) < 250, sorted(took)[-5:]
        info = await run_command(client, "kernel-lsp.debugInfo")
        assert info["analyser"]["analysed"] >= 2 and info["analyser"]["pids"]  # done in its own process
        assert set(info["analyser"]["pids"]) <= set(info["children"])

        # The large file's own requests wait for its analysis, not for anything else: its lenses are there.
        lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(big_uri)))
        titles = [(lens.range.start.line, lens.command.title) for lens in lenses if lens.command]
        model_line = MODEL_SRC.splitlines().index("class Model(nn.Module):") + 38  # each edit added a line above
        assert (model_line, "⚡ Generate kernel") in titles
        assert sum(1 for _, t in titles if t == "⚡ Generate kernel") == 1 + text.count("class Block")
