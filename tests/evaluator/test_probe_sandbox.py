"""`scripts/probe_sandbox.py`, the tool the READMEs give users to see what the sandbox enforces, runs and passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_probe_sandbox_runs_on_the_cpu() -> None:
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "probe_sandbox.py"), "--device", "cpu"],
                       capture_output=True, text=True, timeout=220, check=False)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "PROBE OK" in out
    assert "enforced:" in out and "child ready after" in out
