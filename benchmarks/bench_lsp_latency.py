"""Latency of hover, codeAction and codeLens on an idle server, while a 10,000-line file is being edited, and while
a best-of-8 job runs.

    python benchmarks/bench_lsp_latency.py [--requests 150] [--samples 8] [--cache DIR]

Starts `kernel-lsp serve` over stdio, pointed (the `endpoint` setting) at the stand-in OpenAI-compatible endpoint
of the server tests (tests/server/endpoint_double.py), with the real evaluator on this machine's device. The
large-file phase edits a 10,000-line file (an edit every 50 ms, each followed by a codeAction on it and, every
250 ms, a codeLens, as VS Code asks) while the requests on the small file are measured. The job generates 8
candidates (one shared C++ kernel, so after the first build they come from the build cache) that the evaluator
verifies and times while the requests are measured. Prints p50/p99 per request kind for each phase; the goal is
p99 <= 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "server"))

from endpoint_double import ScriptedEndpoint
from lsp_helpers import MODEL_SRC, SERVER_CMD, _plain, server_env
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities
from test_large_files import big_source


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


async def measure(client, uri: str, n: int, until=None) -> dict[str, list[float]]:
    doc = types.TextDocumentIdentifier(uri)
    kinds = {
        "hover": lambda: client.text_document_hover_async(types.HoverParams(doc, types.Position(4, 8))),
        "codeAction": lambda: client.text_document_code_action_async(types.CodeActionParams(
            doc, types.Range(types.Position(6, 0), types.Position(6, 0)), types.CodeActionContext(diagnostics=[]))),
        "codeLens": lambda: client.text_document_code_lens_async(types.CodeLensParams(doc)),
    }
    out: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(n):
        if until is not None and until():
            break
        for name, call in kinds.items():
            t0 = time.perf_counter()
            await call()
            out[name].append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0.02)  # ~ a user moving the cursor, not a flood
    return out


async def while_editing_a_large_file(client, work: Path, small_uri: str) -> dict[str, list[float]]:
    """hover / codeAction / codeLens on the small file while a 10,000-line file gets an edit every 50 ms."""
    text = big_source()
    path = work / "big.py"
    path.write_text(text)
    big = types.TextDocumentIdentifier(path.as_uri())
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=big.uri, language_id="python", version=1, text=text)))
    done = asyncio.Event()
    pending: list = []

    async def edit() -> None:
        for version in range(2, 82):  # 4 s of typing
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(uri=big.uri, version=version),
                [types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(3, 0), types.Position(3, 0)), text=f"# edit {version}\n")]))
            pending.append(client.text_document_code_action_async(types.CodeActionParams(
                big, types.Range(types.Position(6, 0), types.Position(6, 0)), types.CodeActionContext(diagnostics=[]))))
            if version % 5 == 0:
                pending.append(client.text_document_code_lens_async(types.CodeLensParams(big)))
            await asyncio.sleep(0.05)
        done.set()

    task = asyncio.ensure_future(edit())
    kinds = await measure(client, small_uri, 1_000_000, until=done.is_set)
    await task
    await asyncio.gather(*pending)
    return kinds


def report(title: str, data: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    print(f"  {'request':<11} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, vals in data.items():
        if vals:
            print(f"  {name:<11} {len(vals):>4} {statistics.median(vals):>8.2f} {pct(vals, 99):>8.2f} "
                  f"{max(vals):>8.2f}")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=150, help="rounds of (hover, codeAction, codeLens) per phase")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--cache", help="build cache (XDG_CACHE_HOME) to reuse across runs")
    ap.add_argument("--max-seconds", type=float, default=180.0, help="stop measuring under load after this long")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="klsp-bench-"))
    cache = Path(args.cache) if args.cache else work / "cache"
    endpoint = ScriptedEndpoint("good")
    endpoint.start()
    # the product's defaults: the evaluator starts with the server (warmStart), as it does for users
    env = server_env(cache, KERNEL_LSP_TRIALS="5", KERNEL_LSP_TIMING_CALLS="100", KERNEL_LSP_WARM_START="1")
    client = await ClientServerConfig(server_command=SERVER_CMD, server_env=env).start()
    jobs: list[dict] = []

    @client.feature("kernelLsp/jobs")
    def on_jobs(params) -> None:
        jobs[:] = _plain(params["jobs"] if isinstance(params, dict) else params.jobs)

    @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def on_refresh(params) -> None:
        return None

    await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=work.as_uri(),
        initialization_options={"samples": args.samples, "rounds": 1, "strategy": "best-of-n",
                                **endpoint.settings()}))
    path = work / "relu.py"
    path.write_text(MODEL_SRC)
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=MODEL_SRC)))
    await measure(client, uri, 10)  # warm-up
    idle = await measure(client, uri, args.requests)
    editing = await while_editing_a_large_file(client, work, uri)

    res = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="kernel-lsp.bestOfN", arguments=[{"uri": uri, "module": "Model"}]))
    job_id = res["jobId"]

    def state() -> str:
        return next((j["state"] for j in jobs if j["id"] == job_id), "queued")

    def evaluating() -> bool:
        j = next((j for j in jobs if j["id"] == job_id), None)
        return bool(j) and any(w in j["message"] for w in ("verifying", "timing", "compiling", "candidate"))

    t0 = time.monotonic()
    while not evaluating() and state() not in ("done", "failed", "cancelled") and time.monotonic() - t0 < 600:
        await asyncio.sleep(0.1)  # the first build of the shared kernel (cold cache) is not what we measure
    t_load = time.monotonic()
    stop_at = time.monotonic() + args.max_seconds
    loaded = await measure(client, uri, 1_000_000, until=lambda: state() in ("done", "failed", "cancelled")
                           or time.monotonic() > stop_at)
    t_measured = time.monotonic() - t_load
    while state() not in ("done", "failed", "cancelled"):
        await asyncio.sleep(0.2)
    final = next(j for j in jobs if j["id"] == job_id)
    cands = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="kernel-lsp.listCandidates", arguments=[{"uri": uri, "module": "Model"}]))
    await client.shutdown_session()
    await client.stop()
    endpoint.stop()

    print(f"kernel-lsp latency benchmark ({args.samples} candidates, scripted model, real evaluator)")
    report("idle server", idle)
    report("while a 10,000-line file is edited (requests on another file)", editing)
    report(f"while the job ran ({t_measured:.1f} s measured, job {final['state']}: "
           f"{final['message']}; {len(cands)} candidates)", loaded)
    for name, data in (("while editing a large file", editing), ("under load", loaded)):
        worst = max(pct(v, 99) for v in data.values() if v) if any(data.values()) else float("nan")
        print(f"goal p99 <= 50 ms {name}: {'met' if worst <= 50 else 'NOT met'} (worst p99 {worst:.1f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
