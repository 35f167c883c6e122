"""A device another process never leaves idle (a training job beside the oracle; skipped without a GPU): an honest
kernel is `correct`, its figures uncertain and naming that process; never `infra_error`, never the candidate's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from eval_helpers import fast_settings, reference

from evaluator import Evaluator

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
RELU_REF = reference("torch.relu(args[0])", "[torch.randn(1024, 4096)]")

# matrix products queued back to back, never a synchronisation: the device is never idle while it runs
NEIGHBOUR = r'''
import sys, time, torch
a = torch.randn(4096, 4096, device="cuda")
end = time.time() + float(sys.argv[1])
print("ready", flush=True)
while time.time() < end:
    a = (a @ a).clamp_(-1, 1)
'''


@pytest.fixture(scope="module")
def ev(cache_dir):
    with Evaluator(fast_settings(cache_dir, device="cuda", run_timeout=120.0)) as e:
        yield e


def test_an_honest_kernel_beside_a_device_never_idle_is_correct_and_its_figures_uncertain(ev):
    src = (ROOT / "evaluator" / "examples" / "fast_form_example.py").read_text()
    nb = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, "300"], stdout=subprocess.PIPE, text=True)
    try:
        assert nb.stdout is not None and "ready" in nb.stdout.readline()
        t0 = time.monotonic()
        v = ev.evaluate(RELU_REF, src, time=True)
        took = time.monotonic() - t0
    finally:
        nb.kill()
        nb.wait()
    print(f"beside a device never idle: {v.status} in {took:.1f} s: {v.message[:200]}")
    assert v.status == "correct", (v.status, v.message, v.detail)
    t = v.timing
    assert t is not None and t.candidate is not None and t.uncertain, t
    assert any(f"pid {nb.pid}" in c for c in t.contention), t.contention
    print(f"  {t.candidate.median_ms:.4g} ms, speedup {t.speedup_eager:.3f} +-{t.speedup_ci_pct}%: {t.noise[:200]}")
