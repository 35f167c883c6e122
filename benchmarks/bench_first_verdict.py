"""How long a user waits in the editor (not a test): the click on a module's best-of-n lens to the first verdict's
diagnostic, and to the job's end; then `kernel-lsp optimize` on the same file, whole.

    python benchmarks/bench_first_verdict.py [--device auto|cpu|cuda] [--samples 3] [--idle 15] [--task NAME]
                                             [--binding torch|ctypes]

Starts `kernel-lsp serve` over stdio with the product's settings (the evaluator started at start-up), pointed at a
stand-in OpenAI-compatible endpoint in this process whose answers take no time: each kernel request gets the
project's fixture kernel for the task (tests/fixtures/kernels), its kernels made distinct per answer so every
candidate's kernel unit compiles cold (its wrapper is the same in every answer, as in samples of one model that differ
in their kernels: the first build of it is reused by the others that come after it). The file is the KernelBench
reference of `--task`. After `--idle` seconds (a user reading the file while the server warms up), four clicks in a
row: the first on the file as opened, the second on the same version (its reference's profile known), the third at
once after an edit (a line of code added: a new version, and a new reference for the oracle, which keeps its referee
across edits of comments or layout only), the fourth `--pause` seconds after another edit (the server, with
`warmStart`, prepares a quiet document's reference meanwhile). `--binding ctypes`: the setting of that name (the model is asked for
kernels called through ctypes, no torch headers), and the stand-in answers the fixture's own kernels in that form
(its CUDA source as it is, then `CTYPES_CALLS`' Python for the task). Prints, for each click, the seconds to the first verdict's
diagnostic and to the job's end, each candidate's stages as its verdict says, and the server's preparations.

Needs the KernelBench data ($KERNELBENCH_DIR or ../shared/kernelbench); on a machine without CUDA the fixture
kernels do not build, so it runs on a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
sys.path.insert(0, str(ROOT / "tests" / "server"))

import fixturelib  # noqa: E402
from bench_study import FixtureEndpoint  # noqa: E402
from lsp_helpers import diags, judged_in_history, lsp_session, open_doc, run_command, wait_job  # noqa: E402
from lsprotocol import types  # noqa: E402

from kernel_lsp.config import Settings  # noqa: E402

VERDICT_CODES = ("candidate", "candidate-not-faster", "candidate-failed")

# The ctypes binding's Python for a task, after its fixture's CUDA source (`cuda_src`: kernels and an `extern "C"`
# launcher, no torch headers): the library built without a C++ wrapper and opened with ctypes; then the fixture's
# `ModelNew` with this `forward`, which does in Python what the fixture's wrapper did (its checks, the library GEMM).
CTYPES_CALLS = {"9_Matmul_Subtract_Multiply_ReLU": ('''
import ctypes

_lib = ctypes.CDLL(load_inline(name="kb_l2_9_sub_mul_relu_ctypes", cpp_sources="", cuda_sources=cuda_src,
                               is_python_module=False, no_implicit_headers=True, extra_cuda_cflags=["-O3"]))
_lib.sub_mul_relu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_float, ctypes.c_float, ctypes.c_void_p]
_lib.sub_mul_relu_launch.restype = ctypes.c_char_p
''', '''
    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias.contiguous()
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 2 and x.size(1) == w.size(1)):
            raise ValueError("sub_mul_relu: expected a 2-D float32 CUDA input matching the weight")
        y = torch.mm(x, w.t())  # contiguous: the kernel runs in place on it
        err = _lib.sub_mul_relu_launch(y.data_ptr(), b.data_ptr(), y.numel(), w.size(0), w.size(0),
                                       float(self.subtract_value), float(self.multiply_value),
                                       torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"sub_mul_relu: kernel launch failed: {err.decode()}")
        return y
''')}


def ctypes_answer(fixture: Path, calls: tuple[str, str]) -> str:
    """The fixture in the ctypes binding: its text up to its C++ wrapper (imports, `cuda_src`), the library's setup,
    then its `ModelNew` up to its `forward`, and the ctypes `forward`."""
    text = fixture.read_text()
    model = text[text.index("class ModelNew"):]
    return (text[:text.index('cpp_src = r"""')].rstrip() + "\n\n" + calls[0].strip("\n") + "\n\n\n"
            + model[:model.index("    def forward")] + calls[1].lstrip("\n"))


class DistinctAnswers(FixtureEndpoint):
    """The fixture kernel, its kernels marked with a number of its own per answer (a cold kernel build each)."""

    def __init__(self, answer: str = "") -> None:
        super().__init__()
        self.count = itertools.count(1)
        self.answer = answer  # the kernel in another form than the fixture's ("": the fixture's)

    def kernel_text(self, kind: str, body: dict[str, Any]) -> str:
        text = super().kernel_text(kind, body)
        if self.answer and "```python\n" in text:
            text = text[:text.index("```python\n")] + f"```python\n{self.answer.rstrip()}\n```\n"
        return text.replace("__global__", f"// answer {next(self.count)}\n__global__", 1)


async def click(client: Any, uri: str, work: Path, timeout: float) -> dict[str, Any]:
    """One best-of-n job from the lens's command: seconds to its first verdict and to the job's end. The first
    verdict: a diagnostic of a new candidate, or (a candidate no faster than the one shown keeps the diagnostic as
    it was; the lens and the hover show it) a new candidate's verdict in the history."""
    def numbers() -> list[int]:
        return [int((d.data or {}).get("candidate") or 0) for d in diags(client, uri) if d.code in VERDICT_CODES]

    # candidates are numbered on per module: a new verdict has a new number
    before = max(max(numbers(), default=0), judged_in_history(work, "MAX(number)"))
    t0 = time.monotonic()
    job = (await run_command(client, "kernel-lsp.bestOfN", {"uri": uri, "module": "Model"}))["jobId"]
    first = None
    polls = 0
    while first is None and time.monotonic() - t0 < timeout:
        polls += 1
        if max(numbers(), default=0) > before or (polls % 5 == 0 and judged_in_history(work, "MAX(number)") > before):
            first = time.monotonic() - t0
            break
        await asyncio.sleep(0.05)
    final = await wait_job(client, job, timeout=max(10.0, timeout - (time.monotonic() - t0)))
    rows = await run_command(client, "kernel-lsp.listCandidates", {"uri": uri, "module": "Model"})
    return {"first_verdict_s": first, "job_s": time.monotonic() - t0, "state": final["state"],
            "first": next((d.message for d in diags(client, uri) if d.code in VERDICT_CODES), ""), "rows": rows}


async def editor(a: argparse.Namespace, ref: str, ep: DistinctAnswers, work: Path, cache: Path) -> list[dict]:
    defaults = Settings()
    env = {"KERNEL_LSP_DEVICE": a.device, "KERNEL_LSP_WARM_START": "1", "KERNEL_LSP_TRIALS": str(defaults.trials),
           "KERNEL_LSP_TIMING_CALLS": str(defaults.timing_calls), "KERNEL_LSP_LOG_LEVEL": "warning"}
    settings = {"samples": a.samples, "rounds": 1, "strategy": "zero-shot", "binding": a.binding, **ep.settings()}
    out = []
    async with lsp_session(work, cache, init_options=settings, env=env) as client:
        path = work / f"{a.task}.py"
        uri = await open_doc(client, path, ref)
        await asyncio.sleep(a.idle)
        version = 1
        for name in ("first click", "same version again", "after an edit, clicked at once",
                     f"after an edit, clicked {a.pause:g} s later"):
            if name.startswith("after an edit"):
                version += 1
                text = ref + f"\nEDITED = {version}\n"  # its code, not a comment: a new reference for the oracle
                client.text_document_did_change(types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
                if "later" in name:
                    await asyncio.sleep(a.pause)
            r = await click(client, uri, work, a.timeout)
            r["click"] = name
            out.append(r)
            first = f"{r['first_verdict_s']:.1f} s" if r["first_verdict_s"] is not None else "none"
            print(f"  {name}: first verdict {first}, job {r['job_s']:.1f} s ({r['state']}); "
                  f"{r['first'][:160]}", flush=True)
            r["stages"] = stages(work)
            for line in r["stages"][-a.samples:]:
                print(f"    {line}", flush=True)
            prep = (await run_command(client, "kernel-lsp.debugInfo")).get("prepared") or []
            print(f"    reference prepared ahead: {[(p['outcome'], p['seconds']) for p in prep]}", flush=True)
            r["prepared"] = prep
    return out


def stages(work: Path) -> list[str]:
    """Each candidate's stages in seconds, as its verdict in the history says (the newest job's last)."""
    db = work / ".kernel-lsp" / "history.sqlite"
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
        rows = con.execute("SELECT number, verdict FROM candidates WHERE verdict IS NOT NULL ORDER BY id").fetchall()
    out = []
    for number, verdict in rows:
        v = json.loads(verdict)
        parts = ", ".join(f"{st.get('name')} {float(st.get('seconds') or 0):.2f}" for st in v.get("stages") or [])
        built = next((st.get("message", "") for st in v.get("stages") or [] if st.get("name") == "compile"), "")
        timed = next((st.get("message", "") for st in v.get("stages") or [] if st.get("name") == "time"), "")
        pending = "not timed (not compiled yet)" in timed  # the editor's verdict did not wait for torch.compile
        timed = timed[timed.index("seconds: "):] if "seconds: " in timed else ""
        timed += "; torch.compile's figure not waited for" if pending else ""
        checked = next((st.get("message", "") for st in v.get("stages") or [] if st.get("name") == "verify"), "")
        checked = checked[checked.index("seconds: "):] if "seconds: " in checked else ""
        out.append(f"candidate {number}: {v.get('status')} in {float(v.get('seconds') or 0):.1f} s ({parts}); "
                   f"compile: {built[:200]}" + (f"; verify's {checked}" if checked else "")
                   + (f"; time's {timed}" if timed else ""))
    return out


def optimize(a: argparse.Namespace, ref: str, ep: DistinctAnswers, work: Path, cache: Path) -> dict[str, Any]:
    path = work / f"{a.task}_cli.py"
    path.write_text(ref)
    env = dict(os.environ, XDG_CACHE_HOME=str(cache),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "kernel_lsp", "optimize", str(path), "--endpoint", ep.url, "--endpoint-model",
           ep.model, "--strategy", "zero-shot", "-n", str(a.optimize_samples), "--rounds", "1", "--device", a.device,
           "--set", f"binding={a.binding}", "--json"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=a.timeout, check=False)
    secs = time.monotonic() - t0
    line = (p.stdout.strip().splitlines() or [""])[-1]
    print(f"  kernel-lsp optimize, {a.optimize_samples} candidates, one round: {secs:.1f} s, rc {p.returncode}",
          flush=True)
    if p.returncode:
        print(p.stderr[-2000:], flush=True)
    return {"optimize_s": secs, "rc": p.returncode, "tail": line[:400]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--optimize-samples", type=int, default=4, help="0: no `kernel-lsp optimize` run")
    ap.add_argument("--idle", type=float, default=15.0)
    ap.add_argument("--pause", type=float, default=3.0, help="edit to click, for the last click (a user's move "
                    "to the lens: with warmStart the server prepares the new version's reference meanwhile)")
    ap.add_argument("--task", default="9_Matmul_Subtract_Multiply_ReLU")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--binding", choices=("torch", "ctypes"), default="torch",
                    help="how the model is asked to call its kernels (the setting), and the form the stand-in answers")
    ap.add_argument("--json")
    a = ap.parse_args()
    fixture = next((p for p in fixturelib.all_kernel_fixtures() if p.stem == a.task), None)
    ref = fixturelib.fixture_reference(fixture) if fixture else None
    if ref is None:
        print(f"no fixture kernel or no KernelBench reference for {a.task} (set KERNELBENCH_DIR)")
        return 2
    answer = ""
    if a.binding == "ctypes":
        if a.task not in CTYPES_CALLS or 'cpp_src = r"""' not in fixture.read_text():
            print(f"no ctypes answer for {a.task} (CTYPES_CALLS)")
            return 2
        answer = ctypes_answer(fixture, CTYPES_CALLS[a.task])
    with tempfile.TemporaryDirectory(prefix="first-verdict-") as tmp, DistinctAnswers(answer) as ep:
        work, cache = Path(tmp) / "work", Path(tmp) / "cache"
        work.mkdir()
        cache.mkdir()
        print(f"editor: {a.samples} candidates a click, the stand-in's answers take no time, {a.binding} binding",
              flush=True)
        clicks = asyncio.run(editor(a, ref, ep, work, cache))
        opt = optimize(a, ref, ep, work, cache) if a.optimize_samples > 0 else {}
    if a.json:
        Path(a.json).write_text(json.dumps({"clicks": clicks, "optimize": opt}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
