"""What `kernel-lsp eval` and `optimize` print: at the terminal's width (COLUMNS when stdout is not a terminal,
80 at least), each thing said once, a failure with the trial that failed, the tolerance applied and why, and only
what was really not checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator.cli import correctness_line, terminal_width
from evaluator.verdict import Correctness, Stage, Timing, TimingStats, Verdict
from kernel_lsp.cli.eval import render_verdict
from kernel_lsp.cli.optimize import fit

REPO = Path(__file__).resolve().parents[2]
FAST = {"KERNEL_LSP_DEVICE": "cpu", "KERNEL_LSP_TRIALS": "5", "KERNEL_LSP_TIMING_CALLS": "5",
        "KERNEL_LSP_TIME_COMPILED": "false"}
BUSY = "the machine was busy (load 3.2 on 2 cores)"


def _uncertain_verdict() -> Verdict:
    t = Timing(method="perf-counter", candidate=TimingStats(0.41, 0.02, 0.4, 30), eager=TimingStats(0.86, 0.05, 0.8, 30),
               compiled=TimingStats(0.53, 0.03, 0.5, 30), speedup_eager=2.1, speedup_compiled=1.3, speedup_ci_pct=25.0,
               uncertain=True, noise=BUSY)
    stages = [Stage("parse", True, 0.001, "ModelNew found"), Stage("compile", True, 7.0, "built 1 extension(s)"),
              Stage("verify", True, 1.0, "7/7 trials passed"),
              Stage("time", True, 3.0, "median 0.41 ms over 30 requests of 8 call(s) (5 checked); 2.10x eager ± 25 %, "
                                       "1.30x torch.compile")]
    return Verdict("correct", message="correct", stages=stages, device="cpu",
                   correctness=Correctness(trials=7, planned=7, passed=7, atol=1e-4, rtol=1e-4, max_abs_err=1e-6,
                                           max_rel_err=2e-6), timing=t)


def test_why_a_speedup_is_uncertain_is_said_once_and_every_line_fits_80_columns() -> None:
    text = render_verdict(_uncertain_verdict(), width=80)
    flat = " ".join(text.split())
    assert flat.count("the machine was busy") == 1, text
    assert "2.10× ± 25 % faster than eager" in flat and "(uncertain)" in flat
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "None" not in text


def test_a_failed_trial_is_named_with_how_many_were_planned() -> None:
    c = Correctness(trials=1, planned=7, passed=0, atol=1e-4, rtol=1e-4, max_abs_err=0.094, max_rel_err=None,
                    failed_trial=0, where="output[7, 13503]")
    line = correctness_line(c)
    assert line == ("correctness: trial 1 of 7 failed; max abs err 0.094 at output[7, 13503]; settings atol=0.0001 "
                    "rtol=0.0001")
    c = Correctness(trials=4, planned=7, passed=3, atol=1e-4, rtol=1e-4, max_abs_err=0.5, failed_trial=3)
    assert correctness_line(c).startswith("correctness: trial 4 of 7 failed (3 passed before it); ")
    ok = Correctness(trials=7, planned=7, passed=7, atol=1e-4, rtol=1e-4, max_abs_err=1e-6, max_rel_err=None)
    assert correctness_line(ok) == "correctness: 7 trials passed; max abs err 1e-06; settings atol=0.0001 rtol=0.0001"


def test_the_width_is_the_terminals_else_columns_at_least_80(monkeypatch: pytest.MonkeyPatch) -> None:
    class Pipe:
        def isatty(self) -> bool:
            return False

    monkeypatch.setenv("COLUMNS", "132")
    assert terminal_width(Pipe()) == 132
    monkeypatch.setenv("COLUMNS", "40")
    assert terminal_width(Pipe()) == 80
    monkeypatch.delenv("COLUMNS")
    assert terminal_width(Pipe()) == 80


def test_a_live_line_is_cut_between_words() -> None:
    msg = "round 2/3: sample 4/4 from SmolLM2-135M-Instruct (1024 tokens, 20 tok/s) extracting the kernel"
    short = fit(msg, 30)
    assert len(short) <= 30 and short.endswith("…") and msg.startswith(short[:-1])
    assert msg[len(short) - 1] == " "  # the cut falls between two words
    assert fit("a  short\nline", 30) == "a short line"


def _eval(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-m", "kernel_lsp", "eval", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": path, **env})


@pytest.mark.slow
def test_eval_of_a_wrong_candidate_at_80_columns(tmp_path: Path) -> None:
    """The wrong candidate (1 % off) as a user sees it with stdout in a pipe and COLUMNS=80."""
    ref = tmp_path / "ref.py"
    ref.write_text((REPO / "examples" / "relu_scale.py").read_text())
    cand = tmp_path / "cand.py"
    cand.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                    "    def __init__(self, scale):\n        super().__init__()\n        self.scale = scale\n\n"
                    "    def forward(self, x):\n        return torch.relu(x) * self.scale * 1.01\n")
    r = _eval(str(ref), str(cand), env={**FAST, "COLUMNS": "80"})
    assert r.returncode == 1, (r.stdout, r.stderr)
    out = r.stdout
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80, out
    flat = " ".join(out.split())
    assert "correctness: trial 1 of 7 failed" in flat, out
    assert "None" not in out and "0/1 trials" not in out
    assert "the absolute part is atol 0.0001 times" in flat and \
        "the output's typical magnitude: the median of |expected| over its finite nonzero elements" in flat, out
    assert flat.count("elements outside the tolerance") == 1, out  # the verify stage points to the verdict
    checked, not_checked = flat.split("checked: ", 1)[1].split("; not checked: ")
    assert not_checked.strip() == "time" and checked.rstrip().endswith("compile, verify"), out


@pytest.mark.slow
def test_optimize_at_80_columns_wraps_its_sentences_between_words(tmp_path: Path) -> None:
    """The table, the closing sentence and the log lines on stderr fit 80 columns (COLUMNS, stdout in a pipe), and
    the closing sentence is whole: wrapped between words, not cut."""
    sys.path.insert(0, str(REPO / "tests" / "server"))
    from endpoint_double import ScriptedEndpoint

    f = tmp_path / "relu_scale.py"
    f.write_text((REPO / "examples" / "relu_scale.py").read_text())
    path = os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    with ScriptedEndpoint("prose") as ep:
        r = subprocess.run([sys.executable, "-m", "kernel_lsp", "optimize", str(f), "--samples", "2", "--rounds", "1",
                            "--strategy", "best-of-n", "--endpoint", ep.url], capture_output=True, text=True,
                           timeout=600, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": path, **FAST, "KERNEL_LSP_TRIALS": "1", "COLUMNS": "80"})
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert max(len(line.rstrip()) for line in r.stdout.splitlines()) <= 80, r.stdout
    live = [line for line in r.stderr.splitlines() if not line.startswith("kernel-lsp: log:")]
    assert max(len(line.rstrip()) for line in live) <= 80, r.stderr
    assert "try a stronger code model (setting `model` or `endpoint`; the embedded 135M model rarely writes " \
        "kernels), or more `samples`." in " ".join(r.stdout.split()), r.stdout
