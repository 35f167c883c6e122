"""Bad input to the installed `kernel-lsp` command, as a new user types it: one line, exit 2, no traceback
(issue 12, items 7, 8, 10, 11); and what `optimize` leaves behind (item 9)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lsp.history import History

REPO = Path(__file__).resolve().parents[2]
KERNEL_LSP = Path(sys.executable).parent / "kernel-lsp"
GOOD_REF = (REPO / "examples" / "relu_scale.py").read_text()
CANDIDATE = "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
FAST = {"KERNEL_LSP_DEVICE": "cpu", "KERNEL_LSP_TRIALS": "1", "KERNEL_LSP_TIMING_CALLS": "5",
        "KERNEL_LSP_TIME_COMPILED": "false"}


def kernel_lsp(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
    assert KERNEL_LSP.exists(), "the kernel-lsp console script is not installed next to python"
    # PYTHONPATH: this checkout's code, also where the virtualenv's editable install maps another checkout
    path = os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    return subprocess.run([str(KERNEL_LSP), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": path, **(env or {})})


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""
    return lines[0]


def write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


# --- item 7: eval ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("reference", "says"), [
    (b"# caf\xe9 au lait\nimport torch\n", "not UTF-8 text (byte 0xe9 at offset 5)"),
    ("class Model(nn.Module:\n    pass\n", "syntax error"),
    ("def f():\n    return 1\n", "no nn.Module subclass"),
    (GOOD_REF.replace("def get_inputs", "def no_inputs"), "has no get_inputs()"),
    ("", "the file is empty"),
    ("\n\n   \n", "the file is empty"),
], ids=["not-utf8", "syntax-error", "no-model", "no-get-inputs", "empty", "blank"])
def test_eval_refuses_a_reference_that_is_not_one(tmp_path: Path, reference: str | bytes, says: str) -> None:
    ref = write(tmp_path / "ref.py", reference)
    cand = write(tmp_path / "cand.py", CANDIDATE)
    line = one_line(kernel_lsp("eval", str(ref), str(cand)))
    assert line.startswith(f"kernel-lsp: error: reference {ref}") and says in line, line


def test_eval_refuses_a_candidate_it_cannot_read(tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.py", GOOD_REF)
    cand = write(tmp_path / "cand.py", b"\xff\xfeclass ModelNew: pass\n")
    assert "candidate" in one_line(kernel_lsp("eval", str(ref), str(cand))) and "not UTF-8" in kernel_lsp(
        "eval", str(ref), str(cand)).stderr


@pytest.mark.parametrize(("data", "says"), [
    (b"# caf\xe9 au lait\nimport torch\n", "not UTF-8 text (byte 0xe9 at offset 5)"),
    ("", "the file is empty"),
], ids=["not-utf8", "empty"])
def test_optimize_and_eval_word_a_mistake_the_same_way(tmp_path: Path, data: str | bytes, says: str) -> None:
    f = write(tmp_path / "m.py", data)
    cand = write(tmp_path / "cand.py", CANDIDATE)
    assert one_line(kernel_lsp("optimize", str(f))) == f"kernel-lsp: error: file {f}: {says}"
    assert one_line(kernel_lsp("eval", str(f), str(cand))) == f"kernel-lsp: error: reference {f}: {says}"


@pytest.mark.parametrize("command", ["optimize", "bench"])
def test_a_state_folder_that_cannot_be_written(tmp_path: Path, command: str) -> None:
    ref = write(tmp_path / "ref.py", GOOD_REF)
    args = [str(ref)] if command == "optimize" else ["--kernelbench", str(REPO / "tests/bench/data/tasks")]
    line = one_line(kernel_lsp(command, *args, "--set", "stateDir=/proc/nope", cwd=tmp_path, env=FAST))
    assert line == ("kernel-lsp: error: the state folder /proc/nope (setting state_dir) cannot be written: "
                    "No such file or directory")
    write(tmp_path / "taken", "a file, not a folder")
    line = one_line(kernel_lsp(command, *args, "--set", "stateDir=taken", cwd=tmp_path, env=FAST))
    assert line.endswith("(setting state_dir) cannot be written: not a folder"), line


@pytest.mark.slow
def test_eval_checks_the_reference_before_compiling_the_candidate(tmp_path: Path) -> None:
    """A reference whose forward raises: one line naming the user's error, exit 2, nothing compiled (no stage
    was reached: the one line is all there is), and no class name of ours in it."""
    broken = GOOD_REF.replace("return torch.relu(x) * self.scale", "raise ValueError('no forward today')")
    assert broken != GOOD_REF
    ref = write(tmp_path / "ref.py", broken)
    cand = write(tmp_path / "cand.py", CANDIDATE.replace("def forward", "def __init__(self, scale):\n"
                                                         "        super().__init__()\n\n    def forward"))
    line = one_line(kernel_lsp("eval", str(ref), str(cand), env=FAST))
    assert line == (f"kernel-lsp: error: reference {ref}: Model does not run: ValueError: no forward today — fix "
                    "the module so the file runs (its imports, get_inputs(), get_init_inputs()), then try again")


# --- item 11: settings and flags ---------------------------------------------------------------------------------
def test_bad_values_name_their_flag_or_variable(tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.py", GOOD_REF)
    line = one_line(kernel_lsp("optimize", str(ref), "--set", "rounds=abc"))
    assert line == "kernel-lsp: bad setting: --set rounds=abc: rounds = 'abc' is not an integer"
    line = one_line(kernel_lsp("optimize", str(ref), "--samples", "0"))
    assert line.startswith("kernel-lsp: bad setting: --samples: samples = 0 is out of range")
    line = one_line(kernel_lsp("optimize", str(ref), env={"KERNEL_LSP_TRIALS": "many"}))
    assert line == "kernel-lsp: bad setting: environment variable KERNEL_LSP_TRIALS: trials = 'many' is not an integer"


def test_unknown_flags_point_to_the_subcommands_help(tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.py", GOOD_REF)
    line = one_line(kernel_lsp("eval", str(ref), str(ref), "--samples", "3"))
    assert "unrecognized arguments: --samples 3" in line and "(see `kernel-lsp eval --help`)" in line
    line = one_line(kernel_lsp("optimize", str(ref), "--frobnicate"))
    assert "(see `kernel-lsp optimize --help`)" in line


def test_eval_help_lists_only_the_oracles_flags() -> None:
    r = kernel_lsp("eval", "--help")
    assert r.returncode == 0
    for flag in ("--device", "--atol", "--rtol", "--trials", "--seed", "--set", "--json", "--profile"):
        assert flag in r.stdout
    for flag in ("--model", "--endpoint", "--strategy", "--samples", "--rounds", "--max-tokens"):
        assert flag not in r.stdout
    assert "--samples" in kernel_lsp("optimize", "--help").stdout


# --- item 10: bench ----------------------------------------------------------------------------------------------
def test_bench_with_an_empty_candidates_folder(tmp_path: Path) -> None:
    (tmp_path / "cands").mkdir()
    line = one_line(kernel_lsp("bench", "--kernelbench", str(REPO / "tests/bench/data/tasks"), "--candidates",
                               str(tmp_path / "cands"), cwd=tmp_path))
    assert "no candidate files" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cands"]  # nothing written


@pytest.mark.slow
def test_bench_without_a_matching_candidate_writes_nothing(tmp_path: Path) -> None:
    write((tmp_path / "cands").mkdir() or tmp_path / "cands" / "99_unrelated.py", CANDIDATE)
    r = kernel_lsp("bench", "--kernelbench", str(REPO / "tests/bench/data/tasks"), "--candidates",
                   str(tmp_path / "cands"), cwd=tmp_path, env=FAST)
    assert r.returncode == 2 and "no tables written" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""
    assert not list(tmp_path.glob("*.md")) and not list(tmp_path.glob("*.csv")) and not list(tmp_path.glob("*.json"))
    assert not (tmp_path / ".kernel-lsp" / "bench").exists()


# --- items 8 and 9: optimize --------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("broken", [
    GOOD_REF.replace("def get_inputs():\n", "def get_inputs():\n    raise ValueError('no inputs today')\n"),
    "import torch_that_does_not_exist\n" + GOOD_REF,
    GOOD_REF.replace("return torch.relu(x) * self.scale", "raise ValueError('no inputs today')"),
], ids=["get_inputs-raises", "import-fails", "forward-raises"])
def test_optimize_checks_that_the_module_runs_before_asking_the_model(tmp_path: Path, broken: str) -> None:
    f = write(tmp_path / "broken.py", broken)
    r = kernel_lsp("optimize", str(f), "--samples", "1", "--rounds", "1", "--strategy", "zero-shot", cwd=tmp_path,
                   env=FAST)
    line = one_line(r)
    assert f"kernel-lsp: error: file {f}: Model does not run: " in line and "fix the module" in line
    assert "no inputs today" in line or "torch_that_does_not_exist" in line
    assert "Error_" not in line and "ReferenceFailed" not in line  # no class name of ours
    with History(tmp_path / ".kernel-lsp") as h:
        assert h.jobs() == []  # no generation started: the model was asked nothing


@pytest.mark.slow
def test_optimize_says_why_each_attempt_failed_where_the_log_is_and_what_it_did_not_write(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "tests" / "server"))
    from endpoint_double import ScriptedEndpoint

    f = write(tmp_path / "relu_scale.py", GOOD_REF)
    with ScriptedEndpoint("prose") as ep:
        args = ("optimize", str(f), "--samples", "2", "--rounds", "1", "--strategy", "best-of-n", "--endpoint", ep.url)
        r = kernel_lsp(*args, cwd=tmp_path, env=FAST)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        rows = [line for line in r.stdout.splitlines() if line.lstrip().startswith("-") and "no kernel" in line]
        assert len(rows) == 2 and all("the answer holds no code" in row for row in rows), r.stdout
        log = tmp_path / ".kernel-lsp" / "kernel-lsp.log"
        assert f"log: {log}" in r.stderr and log.is_file() and log.read_text()

        out = tmp_path / "best.py"
        r = kernel_lsp(*args, "--json", "--out", str(out), cwd=tmp_path, env=FAST)
        assert r.returncode == 1 and not out.exists()
        assert f"no correct candidate: {out} was not written" in r.stderr
        data = json.loads(r.stdout)
        assert data["out"] is None and [a["problem"] for a in data["no_kernel"]] == ["the answer holds no code"] * 2
