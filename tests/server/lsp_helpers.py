"""End-to-end helpers: a real `kernel-lsp serve` over stdio, driven by pytest-lsp's client (imported by tests as
`lsp_helpers`: pytest puts this folder on sys.path)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

REPO = Path(__file__).resolve().parents[2]
SERVER_CMD = [sys.executable, "-m", "kernel_lsp", "serve"]
NOISY_SERVER_CMD = [sys.executable, str(Path(__file__).parent / "noisy_server.py")]  # writes to fd 1 (TEST ONLY)

# relu(x) * 2, whose stand-in kernel (endpoint_double.py) is relu2; the editor test opens the same file
MODEL_SRC = (Path(__file__).parent / "relu2_model.py").read_text()

# ONE C++ source for every test that compiles: the evaluator's build cache (keyed by the source hash) makes every
# build after the first one fast.
CPP_SRC = r"""
#include <torch/extension.h>
torch::Tensor relu2(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) py[i] = px[i] > 0.f ? px[i] * 2.0f : 0.0f;
    return y;
}
"""

# The same kernel made deliberately slow (each output is 64 additions of a 64th of it: correct within the tolerance,
# many times slower than eager's relu and multiply): a correct kernel that is no faster than eager (issue 27).
SLOW_CPP_SRC = r"""
#include <torch/extension.h>
torch::Tensor relu2(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) {
        const float v = px[i] > 0.f ? px[i] : 0.0f;
        float acc = 0.0f;
        for (int k = 0; k < 64; ++k) acc += v * (2.0f / 64.0f);
        py[i] = acc;
    }
    return y;
}
"""

MODEL_NEW_TEMPLATE = '''

from torch.utils.cpp_extension import load_inline

relu2_cpp = r"""{cpp}"""
relu2_ext = load_inline(name="{name}", cpp_sources=relu2_cpp, functions=["relu2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu2_ext.relu2(x){tail}
'''


def model_new(wrong: bool = False, slow: bool = False) -> str:
    return MODEL_NEW_TEMPLATE.format(cpp=SLOW_CPP_SRC if slow else CPP_SRC, name="relu2_slow" if slow else "relu2_ext",
                                     tail=" + 1.0" if wrong else "")


def candidate_source(wrong: bool = False, slow: bool = False) -> str:
    """A full candidate file as the engine would store it (imports + kernel + ModelNew); `slow`: correct, and many
    times slower than eager."""
    return "import torch\nimport torch.nn as nn\n" + model_new(wrong, slow)


def has_evaluator() -> bool:
    try:
        from evaluator import Evaluator  # noqa: F401
    except ImportError:
        return False
    return True


needs_evaluator = pytest.mark.skipif(not has_evaluator(), reason="evaluator.Evaluator has not landed yet")


def server_env(cache: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"XDG_CACHE_HOME": str(cache), "KERNEL_LSP_LOG_LEVEL": "info", "PYTHONPATH": os.pathsep.join([str(REPO), str(Path(__file__).parent), *filter(None, [env.get("PYTHONPATH")])]),
                "KERNEL_LSP_DEVICE": "cpu", "KERNEL_LSP_TRIALS": "3", "KERNEL_LSP_TIMING_CALLS": "10",
                # sessions start their evaluator on the first job (the 2-core CI box runs latency checks meanwhile);
                # test_warm_start_begins_before_any_job turns it back on
                "KERNEL_LSP_WARM_START": "0"})
    env.update(extra)
    return env


@asynccontextmanager
async def lsp_session(root: Path, cache: Path, *, init_options: dict[str, Any] | None = None,
                      env: dict[str, str] | None = None, capabilities: types.ClientCapabilities | None = None,
                      configuration: dict[str, Any] | None = None,
                      server_cmd: list[str] | None = None) -> AsyncIterator[LanguageClient]:
    cfg = ClientServerConfig(server_command=server_cmd or SERVER_CMD, server_env=server_env(cache, **(env or {})))
    client = await cfg.start()
    assert isinstance(client, LanguageClient)
    client.jobs_seen = []  # every kernelLsp/jobs notification's job list
    client.edits = []  # every workspace/applyEdit
    client.apply_edit_result = True
    if configuration is not None:
        client.set_configuration(configuration)

    @client.feature("kernelLsp/jobs")
    def on_jobs(params: Any) -> None:
        jobs = params["jobs"] if isinstance(params, dict) else getattr(params, "jobs", [])
        client.jobs_seen.append([_plain(j) for j in jobs])

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def on_apply(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        client.edits.append(params)
        return types.ApplyWorkspaceEditResult(applied=client.apply_edit_result)

    client.lens_refreshes = []  # when each workspace/codeLens/refresh came (time.monotonic())

    @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def on_lens_refresh(params: Any) -> None:
        client.lens_refreshes.append(time.monotonic())
        return None

    caps = capabilities or client_capabilities("visual-studio-code")
    await client.initialize_session(types.InitializeParams(
        capabilities=caps, root_uri=root.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
        initialization_options=init_options))
    try:
        yield client
    finally:
        try:
            server = client._server
            if server is None or server.returncode is None:  # a test may have ended the server itself
                await asyncio.wait_for(client.shutdown_session(), 15)
        finally:
            await client.stop()


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return [_plain(v) for v in obj]
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if hasattr(obj, "__dict__") and not isinstance(obj, (str, int, float)):
        return {k: _plain(v) for k, v in vars(obj).items()}
    return obj


async def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


async def open_doc(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    if text is None:
        text = path.read_text()
    else:
        path.write_text(text)
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))
    return uri


async def run_command(client: LanguageClient, command: str, *args: Any) -> Any:
    return await asyncio.wait_for(client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=command, arguments=list(args))), 30)


def job_final(client: LanguageClient, job_id: int) -> dict[str, Any] | None:
    for jobs in reversed(client.jobs_seen):
        for j in jobs:
            if j["id"] == job_id:
                return j if j["state"] in ("done", "failed", "cancelled") else None
    return None


async def wait_job(client: LanguageClient, job_id: int, timeout: float = 240.0) -> dict[str, Any]:
    return await wait_until(lambda: job_final(client, job_id), timeout=timeout, interval=0.1)


def judged_in_history(root: Path, what: str = "COUNT(*)") -> int:
    """Over the candidates whose verdict is in the workspace's history, read from the database file as another
    process would: how many (`COUNT(*)`), or the highest number (`MAX(number)`); 0 when there is none yet."""
    db = root / ".kernel-lsp" / "history.sqlite"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return int(con.execute(f"SELECT {what} FROM candidates WHERE verdict IS NOT NULL").fetchone()[0] or 0)
    except sqlite3.Error:
        return 0


def diags(client: LanguageClient, uri: str) -> list[types.Diagnostic]:
    return [d for d in client.diagnostics.get(uri, []) if d.source == "kernel-lsp"]


def progress_percentages(client: LanguageClient) -> dict[str, list[int]]:
    """Every $/progress token's percentages, in the order they were reported."""
    return {str(token): [r.percentage for r in reports if getattr(r, "percentage", None) is not None]
            for token, reports in client.progress_reports.items()}


def assert_progress_forward(client: LanguageClient) -> None:
    for token, pcts in progress_percentages(client).items():
        assert pcts == sorted(pcts), f"{token}: progress went back: {pcts}"


def messages_seen(client: LanguageClient, job_id: int) -> list[str]:
    """Every message a job showed (kernelLsp/jobs and $/progress)."""
    out = [j["message"] for js in client.jobs_seen for j in js if j["id"] == job_id]
    for r in client.progress_reports.get(f"kernel-lsp/job/{job_id}", []):
        if getattr(r, "message", None):
            out.append(r.message)
    return out


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """The text after non-overlapping LSP text edits, applied as an editor does (last first)."""
    lines = text.splitlines(keepends=True)

    def off(p: types.Position) -> int:
        return sum(len(line) for line in lines[: p.line]) + p.character

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: off(e.range.start)] + e.new_text + text[off(e.range.end):]
    return text
