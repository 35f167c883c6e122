"""Honest kernels timed on a GPU that other work shares: what the oracle says, and how long it takes.

    python benchmarks/contention.py [--deadline S] [--json FILE] [--only idle,burst,turns,two]

- idle:  each honest kernel alone on the device (the reference figures);
- burst: the same while another process decodes in bursts (bf16 matmuls 15 ms on / 15 ms off, 14 GB held), as a
         local model or a notebook beside the oracle would: every verdict must be `correct`, its speedup within
         ±5 % of the idle one or marked uncertain with the neighbour named;
- turns: the same neighbour taking a turn of the device's host-wide lease per burst, as the language server's
         in-process model does: it pauses while a kernel is timed, so the figures should match the idle ones;
- two:   two evaluator processes timing the same honest kernel at once: both `correct`, the one that waited says so.

Writes every result as it comes (--json), so a run cut short keeps what it measured. Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

KERNELS = ("cu_then_kit_honest", "cu_valid_elu_signed", "cu_valid_row_sum_block")

NEIGHBOUR = r'''
import os, sys, time, torch
sys.path.insert(0, os.environ["KLSP_ROOT"])
turns = sys.argv[1] == "turns"
hold = torch.empty(int(14e9) // 2, dtype=torch.bfloat16, device="cuda")  # 14 GB held, as a 7B model's weights
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
lease = None
if turns:
    from evaluator.processes import lease as L
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    lease = L.for_device(f"cuda:{uuid}")
print("ready", flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.015:  # a burst: 15 ms of matmuls (a turn each, like tokens)
        if lease is not None:
            with lease.turn():
                (a @ a).sum().item()
        else:
            (a @ a).sum().item()
    time.sleep(0.015)
'''


def _record(results: dict, path: str | None) -> None:
    if path:
        Path(path).write_text(json.dumps(results, indent=1))


def _verdicts(kernels: tuple[str, ...], label: str, deadline: float) -> list[dict]:
    import fixturelib

    from evaluator import EvalSettings, Evaluator

    cases = {c.id: c for c in fixturelib.load_adversarial_manifest()}
    out = []
    with Evaluator(EvalSettings(device="cuda")) as ev:
        for cid in kernels:
            if time.time() > deadline:
                out.append({"case": cid, "skipped": "deadline"})
                continue
            c = cases[cid]
            t0 = time.time()
            v = ev.evaluate(fixturelib.adversarial_reference(c.reference), c.source(), time=True)
            t = v.timing
            row = {"case": cid, "label": label, "status": v.status, "seconds": round(time.time() - t0, 1),
                   "message": v.message[:300], "warnings": v.warnings[:4]}
            if t is not None and t.candidate is not None:
                row.update(speedup=t.speedup_eager, ci_pct=t.speedup_ci_pct, uncertain=t.uncertain, noise=t.noise,
                           contention=t.contention, cand_ms=t.candidate.median_ms,
                           eager_ms=t.eager.median_ms if t.eager else None)
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def _with_neighbour(mode: str, seconds: float, fn):
    env = dict(os.environ, KLSP_ROOT=str(ROOT), PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, mode, str(seconds)], env=env, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"the neighbour did not start: {line!r}")
        return fn()
    finally:
        p.kill()
        p.wait()


def _two(deadline: float) -> list[dict]:
    code = ("import sys, json; sys.argv=['x']; sys.path.insert(0, %r); import contention as C; "
            "print('RESULT', json.dumps(C._verdicts(('cu_then_kit_honest',), 'two', %r)))") % (
        str(Path(__file__).parent), deadline)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    rows = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(10.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            out = "RESULT [{\"status\": \"killed at the deadline\"}]"
        line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), "RESULT []")
        rows += json.loads(line[7:]) or [{"status": "no result", "log": out[-800:]}]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deadline", type=float, default=400.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default="idle,burst,turns,two")
    a = ap.parse_args()
    end = time.time() + a.deadline
    parts = a.only.split(",")
    results: dict = {}
    if "idle" in parts:
        results["idle"] = _verdicts(KERNELS, "idle", end)
        _record(results, a.json)
    if "burst" in parts and time.time() < end - 30:
        results["burst"] = _with_neighbour("burst", end - time.time(), lambda: _verdicts(KERNELS, "burst", end))
        _record(results, a.json)
    if "turns" in parts and time.time() < end - 30:
        results["turns"] = _with_neighbour("turns", end - time.time(), lambda: _verdicts(KERNELS, "turns", end))
        _record(results, a.json)
    if "two" in parts and time.time() < end - 30:
        results["two"] = _two(end)
        _record(results, a.json)
    idle = {r["case"]: r.get("speedup") for r in results.get("idle", [])}
    for part in ("burst", "turns", "two"):
        for r in results.get(part, []):
            base = idle.get(r.get("case"))
            sp = r.get("speedup")
            dev = f"{(sp / base - 1) * 100:+.1f} % vs idle" if sp and base else ""
            print(f"{part:6s} {r.get('case', '')}: {r.get('status')} {sp and round(sp, 3)} ±{r.get('ci_pct')} % "
                  f"{'uncertain ' if r.get('uncertain') else ''}{dev} in {r.get('seconds')} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
