"""`kernel-lsp optimize` through kernel_lsp.cli.main (the lead's entry point) into run_optimize."""

from __future__ import annotations

import json
import os
import re
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


@pytest.mark.slow
def test_a_kernel_slower_than_eager_is_not_the_result(tmp_path):
    """Issue 27 item 1, run as a user runs it: the model's only kernel is correct and many times slower than eager.
    `optimize` offers nothing (no `*` in the table, `--out` not written), says how close the kernel came and
    where its source is, and exits 1."""
    endpoint = subprocess.Popen([sys.executable, "-u", str(ROOT / "tests" / "server" / "endpoint_double.py"),
                                 "slowkernel"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        url = endpoint.stdout.readline().strip()
        model = tmp_path / "relu.py"
        model.write_text((ROOT / "tests" / "server" / "relu2_model.py").read_text())
        out = tmp_path / "relu_kernel.py"
        env = {**os.environ, "KERNEL_LSP_STATE_DIR": str(tmp_path / "state"), "KERNEL_LSP_TIME_COMPILED": "0",
               "COLUMNS": "120"}
        p = subprocess.run([sys.executable, "-m", "kernel_lsp", "optimize", str(model), "--endpoint", url,
                            "--endpoint-model", "scripted", "--device", "cpu", "--strategy", "zero-shot",
                            "--samples", "1", "--rounds", "1", "--trials", "3", "--out", str(out)],
                           capture_output=True, text=True, timeout=600, check=False, env=env, cwd=tmp_path)
    finally:
        endpoint.stdin.close()
        endpoint.wait(30)
    assert p.returncode == 1, p.stdout + p.stderr[-3000:]
    print(p.stdout)
    lines = p.stdout.splitlines()
    closing = next(line for line in lines if line.startswith("no kernel "))
    assert closing.startswith("no kernel faster than eager: the fastest correct one, candidate 1, is "), closing
    # how close it came: '50.1× slower than eager (4.92 ms vs 0.0982 ms)', with its interval when the machine is busy
    assert re.search(r"is [\d.]+×( ± \d+ %)? slower than eager \([\d.]+ ms vs [\d.]+ ms\)(, uncertain)?; 1/1 correct$",
                     closing), closing
    row = next(line for line in lines if line.lstrip().startswith("1 "))  # the table's row: not marked as the result
    assert "*" not in row and "correct" in row and "slower" in row, p.stdout
    assert "best" not in p.stdout, p.stdout
    assert any(line.startswith("candidate 1's source: ") and line.endswith("candidate_1.py") for line in lines)
    assert f"no candidate faster than eager: {out} was not written" in p.stderr
    assert not out.exists()
