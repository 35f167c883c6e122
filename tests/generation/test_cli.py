"""`kernel-lsp optimize` through kernel_lsp.cli.main (the lead's entry point) into run_optimize."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernel_lsp.cli import main

from .conftest import ROOT

EXAMPLE = str(ROOT / "examples" / "relu_scale.py")


def test_bad_model_path_is_one_line_and_exit_2(tmp_path, capsys):
    rc = main(["optimize", EXAMPLE, "--model", str(tmp_path / "nope.gguf"), "--set", f"state_dir={tmp_path}"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "model file not found" in err


def test_endpoint_down_fails_with_exit_1(tmp_path, capsys):
    from .conftest import free_port

    port = free_port()
    rc = main(["optimize", EXAMPLE, "--endpoint", f"http://127.0.0.1:{port}/v1", "--device", "cpu", "--json",
               "--set", f"state_dir={tmp_path}"])
    out, _ = capsys.readouterr()
    data = json.loads(out)
    assert rc == 1 and data["state"] == "failed" and "connection refused" in data["message"]


@pytest.mark.model
@pytest.mark.slow
def test_optimize_headless_with_the_small_model(tmp_path):
    """The whole loop with the real small model and the real evaluator: progress on stderr, JSON on stdout."""
    env = {**os.environ, "KERNEL_LSP_STATE_DIR": str(tmp_path / "state")}
    p = subprocess.run([sys.executable, "-m", "kernel_lsp", "optimize", EXAMPLE, "--device", "cpu", "--strategy",
                        "zero-shot", "--max-tokens", "96", "--json", "--trials", "1"],
                       capture_output=True, text=True, timeout=900, check=False, env=env, cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    data = json.loads(p.stdout)  # stdout holds the JSON and nothing else
    assert data["state"] == "done" and len(data["prompt_tokens_per_round"]) == 1
    assert data["prompt_tokens_per_round"][0] > 200
    assert (tmp_path / "state" / "history.sqlite").exists()
    assert len(data["candidates"]) + len(data["no_kernel"]) == 1  # zero-shot: one round, one sample
