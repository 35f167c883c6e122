"""The study's three commands end to end on this machine's device, with a stand-in model that answers the project's
own fixture kernels: the table is a test of the system (generation loop, oracle, comparison, dataset, reward), not
of a model.

1. `kernel-lsp bench --compare zero-shot,profile-guided,refine,agent` over the first tasks of levels 1 and 2: the
   stand-in (an OpenAI-compatible endpoint in this process) answers a kernel request with a `<think>` block and the
   fixture kernel of the task in the prompt (tests/fixtures/kernels), or with reasoning and no code where the
   project has no fixture for that task. Prints the comparison and its wall time.
2. `kernel-lsp export` of that sweep: rows, bytes, and the check that no prompt holds the stand-in's reasoning.
3. `kernel-lsp reward` over a batch: every fixture kernel against its reference, one kernel against the wrong task's
   reference, one completion without code; prints candidates per minute and the statuses.

    python benchmarks/bench_study.py [--device cuda] [--levels 1,2] [--tasks 1-10] [--samples 1] [--rounds 2]
        [--only compare,export,reward] [--out DIR] [--deadline SECONDS]

Needs the KernelBench data ($KERNELBENCH_DIR or ../shared/kernelbench). On a machine without CUDA every fixture
kernel is a compile error: the run then checks the mechanics only.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
sys.path.insert(0, str(ROOT / "tests" / "server"))

import fixturelib  # noqa: E402
from endpoint_double import ScriptedEndpoint  # noqa: E402

REGIMES = "zero-shot,profile-guided,refine,agent"
# the stand-in's reasoning: it must reach the dataset's completions and never a later prompt
REASONING = "STAND-IN-REASONING: the reference reads each element once; one fused pass writes each output once."


def fixture_answers() -> dict[str, tuple[str, str]]:
    """KernelBench code (rstripped) -> (task name, fixture kernel source), for every fixture with its reference."""
    out: dict[str, tuple[str, str]] = {}
    for path in fixturelib.all_kernel_fixtures():
        ref = fixturelib.fixture_reference(path)
        if ref:
            out.setdefault(ref.rstrip(), (path.stem, path.read_text()))
    return out


class FixtureEndpoint(ScriptedEndpoint):
    """Answers a kernel request with the fixture kernel of the task whose reference is in the prompt."""

    def __init__(self) -> None:
        super().__init__("fixture", model="stand-in-fixtures")
        self.answers = fixture_answers()
        self.asked: collections.Counter[str] = collections.Counter()

    def kernel_text(self, kind: str, body: dict[str, Any]) -> str:
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages") or [])
        hit = next(((name, src) for code, (name, src) in self.answers.items() if code in text), None)
        with self._lock:
            self.asked[hit[0] if hit else "(no fixture)"] += 1
        if hit is None:
            return f"<think>{REASONING}</think>\nI would fuse these operators, but I have no kernel for this task."
        return f"<think>{REASONING}</think>\nHere is the kernel.\n```python\n{hit[1].rstrip()}\n```\n"


def run(cmd: list[str], cwd: Path, limit: float) -> tuple[int, float, str]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=max(5.0, limit))
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, f"(timed out after {limit:.0f} s)\n{e.stdout or ''}{e.stderr or ''}"
    return rc, time.monotonic() - t0, out if isinstance(out, str) else out.decode(errors="replace")


def tail(text: str, n: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def reward_rows() -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    answers = fixture_answers()
    for code, (name, src) in sorted(answers.items(), key=lambda kv: kv[1][0]):
        rows.append({"id": name, "reference": code,
                     "completion": f"<think>{REASONING}</think>\n```python\n{src.rstrip()}\n```\n"})
    by_name = {name: (code, src) for code, (name, src) in answers.items()}
    if "19_ReLU" in by_name and "26_GELU_" in by_name:  # a ReLU kernel for GELU: wrong wherever x is near 0
        rows.append({"id": "wrong:relu-for-gelu", "reference": by_name["26_GELU_"][0],
                     "completion": f"```python\n{by_name['19_ReLU'][1].rstrip()}\n```\n"})
    if rows:
        rows.append({"id": "no-code", "reference": rows[0]["reference"],
                     "completion": f"<think>{REASONING}</think>\nI cannot write this kernel."})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--tasks", default="1-10")
    ap.add_argument("--samples", default="1")
    ap.add_argument("--rounds", default="2")
    ap.add_argument("--only", default="compare,export,reward")
    ap.add_argument("--out", help="folder for the sweep, the dataset and the reward batch (default: a temporary one)")
    ap.add_argument("--deadline", type=float, default=450.0, help="seconds for the whole run")
    a = ap.parse_args(argv)
    kb = fixturelib.kernelbench_dir()
    if kb is None:
        print("no KernelBench data ($KERNELBENCH_DIR or ../shared/kernelbench): nothing to run")
        return 0
    t_end = time.monotonic() + a.deadline
    out = Path(a.out or tempfile.mkdtemp(prefix="kl-study-")).resolve()
    ws = out / "workspace"  # the commands' working folder: their history and build cache settings live here
    ws.mkdir(parents=True, exist_ok=True)
    only = set(a.only.split(","))
    py = [sys.executable, "-m", "kernel_lsp"]
    env_note = f"device {a.device}, levels {a.levels}, tasks {a.tasks}, samples {a.samples}, rounds {a.rounds}"
    print(f"study: {env_note}; out {out}", flush=True)
    code = 0
    study = out / "study"
    with FixtureEndpoint() as ep:
        if "compare" in only:
            levels = [x for lv in a.levels.split(",") for x in ("--level", lv.strip())]
            cmd = py + ["bench", "--kernelbench", str(kb), *levels, "--tasks", a.tasks, "--compare", REGIMES,
                        "--samples", a.samples, "--rounds", a.rounds, "--endpoint", ep.url, "--endpoint-model",
                        ep.model, "--device", a.device, "--set", "time_compiled=false", "--out", str(study)]
            rc, secs, text = run(cmd, ws, t_end - time.monotonic() - 60)
            print(f"compare: rc={rc} in {secs:.0f} s; kernel requests {ep.kernel_requests} "
                  f"({dict(ep.asked)})", flush=True)
            (out / "compare.log").write_text(text)
            md = study / "compare.md"
            print(md.read_text() if md.is_file() else tail(text, 30), flush=True)
            code = code or rc
    if "export" in only and study.is_dir():
        data = out / "dataset.jsonl"
        rc, secs, text = run(py + ["export", "--from", str(study), "--out", str(data)], ws,
                             min(120.0, t_end - time.monotonic()))
        rows = [json.loads(x) for x in data.read_text().splitlines() if x.strip()] if data.is_file() else []
        in_prompt = sum(REASONING in json.dumps(r.get("prompt", "")) for r in rows)
        in_completion = sum(REASONING in str(r.get("completion", "")) for r in rows)
        statuses = collections.Counter(str(r.get("status")) for r in rows)
        size = data.stat().st_size if data.is_file() else 0
        print(f"export: rc={rc} in {secs:.1f} s: {len(rows)} rows, {size / 1024:.0f} KiB; statuses {dict(statuses)}; "
              f"reasoning in prompts: {in_prompt} rows (must be 0), in completions: {in_completion} rows",
              flush=True)
        if rc or in_prompt:
            print(tail(text, 10))
            code = code or rc or 1
    if "reward" in only:
        rows = reward_rows()
        batch = out / "reward_in.jsonl"
        batch.write_text("".join(json.dumps(r) + "\n" for r in rows))
        scored = out / "reward_out.jsonl"
        rc, secs, text = run(py + ["reward", str(batch), "--out", str(scored), "--device", a.device], ws,
                             t_end - time.monotonic() - 5)
        got = [json.loads(x) for x in scored.read_text().splitlines() if x.strip()] if scored.is_file() else []
        statuses = collections.Counter(f"{r['status']}/{r.get('kernel_finding') or '-'}" for r in got)
        print(f"reward: rc={rc}: {len(got)} of {len(rows)} rows in {secs:.0f} s = "
              f"{len(got) / max(secs, 1e-9) * 60:.1f} candidates per minute; {dict(statuses)}", flush=True)
        for r in got:
            sp = r.get("speedup_eager")
            print(f"  {str(r.get('id'))[:40]:40} {r['status']:14} {str(r.get('kernel_finding') or '-'):13} "
                  f"{'' if sp is None else f'{sp:.2f}x'} reward {r.get('reward')}")
        if rc:
            print(tail(text, 10))
            code = code or rc
    return code


if __name__ == "__main__":
    raise SystemExit(main())
