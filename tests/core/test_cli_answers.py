"""`kernel-lsp answers`, run as a user runs it: the model's answers of a job read back from the history, also the
ones that held no usable ModelNew (they leave no candidate file)."""

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
PROSE = "I would fuse the operators, but I cannot write the code today."
KERNEL = "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
FAST = {"KERNEL_LSP_DEVICE": "cpu", "KERNEL_LSP_TRIALS": "1", "KERNEL_LSP_TIMING_CALLS": "5",
        "KERNEL_LSP_TIME_COMPILED": "false"}


def kernel_lsp(*args: str, cwd: Path, env: dict[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
    assert KERNEL_LSP.exists(), "the kernel-lsp console script is not installed next to python"
    return subprocess.run([str(KERNEL_LSP), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, **(env or {})})


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""
    return lines[0]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace whose history holds what a run of `optimize` leaves: a job with an answer without code (no
    candidate file) and one with a kernel (candidate 1), and a verify job that asked the model nothing."""
    (tmp_path / "relu_scale.py").write_text(GOOD_REF)
    with History(tmp_path / ".kernel-lsp") as h:
        key = f"{tmp_path / 'relu_scale.py'}::Model"
        h.start_job(key, "f0", "verify")
        job = h.start_job(key, "f0", "optimize", strategy="best-of-n n=2 r=1", model="SmolLM2-135M-Instruct")
        h.add_step(job, round=1, sample=1, prompt="[]", completion=PROSE, completion_tokens=14,
                   extra={"finish_reason": "stop", "seconds": 31.5, "extraction_error": "no code block",
                          "extraction_problem": "the answer holds no code"})
        step = h.add_step(job, round=1, sample=2, prompt="[]", completion=f"Here.\n```python\n{KERNEL}```\n",
                          completion_tokens=2048, extra={"finish_reason": "length", "seconds": 102.0})
        cand = h.add_candidate(key, "f0", KERNEL, job_id=job, round=1, sample=2, strategy="best-of-n")
        h.update_step(step, candidate_id=cand.id)
        h.finish_job(job, "done", "no correct candidate")
    return tmp_path


def test_lists_the_jobs_that_asked_the_model(workspace: Path) -> None:
    r = kernel_lsp("answers", cwd=workspace)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"history: {workspace / '.kernel-lsp' / 'history.sqlite'}"
    jobs = [line for line in lines if line.startswith("job ")]
    assert len(jobs) == 1 and "job   2" in jobs[0] and "2 answers, 1 candidate" in jobs[0]
    assert "relu_scale.py::Model" in jobs[0] and "SmolLM2-135M-Instruct" in jobs[0]
    assert "1 other job asked the model nothing" in r.stdout
    assert lines[-1] == "one job's answers: kernel-lsp answers --job 2"
    data = json.loads(kernel_lsp("answers", "--json", cwd=workspace).stdout)
    assert [(j["id"], j["answers"], j["candidates"]) for j in data["jobs"]] == [(2, 2, 1)]


def test_prints_a_jobs_raw_answers_and_what_became_of_each(workspace: Path) -> None:
    for args in (("answers", "--job", "last"), ("answers", "relu_scale.py", "--job", "2")):  # the module's file
        r = kernel_lsp(*args, cwd=workspace)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        out = r.stdout
        assert out.startswith("job 2 (optimize, ") and "model: SmolLM2-135M-Instruct" in out
        assert "── answer 1 · round 1, sample 1 · 14 tokens · 31.5 s ──\n" + PROSE in out
        assert "── no candidate: the answer holds no code" in out
        assert "answer 2 · round 1, sample 2 · 2048 tokens · cut off at max_tokens · 102.0 s" in out
        assert KERNEL in out
        cand = workspace / ".kernel-lsp" / "candidates"
        assert "── extracted as candidate 1 (pending): " + str(next(cand.rglob("candidate_1.py"))) in out
    data = json.loads(kernel_lsp("answers", "--job", "2", "--json", cwd=workspace).stdout)
    a1, a2 = data["answers"]
    assert (a1["completion"], a1["problem"], a1["candidate"]) == (PROSE, "the answer holds no code", None)
    assert (a2["candidate"]["number"], a2["candidate"]["source"], a2["problem"]) == (1, KERNEL, None)


def test_writes_a_jobs_answers_and_candidates_to_files(workspace: Path) -> None:
    r = kernel_lsp("answers", "--job", "2", "--out", "answers", cwd=workspace)
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr == "kernel-lsp: wrote 4 files for job 2 to answers\n"
    out = workspace / "answers"
    assert sorted(p.name for p in out.iterdir()) == ["01-answer-r1s1.txt", "02-answer-r1s2.txt",
                                                     "02-candidate-1.py", "answers.json"]
    assert (out / "01-answer-r1s1.txt").read_text() == PROSE
    assert (out / "02-candidate-1.py").read_text() == KERNEL
    assert json.loads((out / "answers.json").read_text())["job"]["id"] == 2


def test_mistakes_are_one_line(workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    empty = tmp_path_factory.mktemp("empty")
    line = one_line(kernel_lsp("answers", cwd=empty))
    assert f"no history in {empty / '.kernel-lsp'}" in line
    assert not (empty / ".kernel-lsp").exists()  # reading never creates a history
    assert "--job 9: no such job" in one_line(kernel_lsp("answers", "--job", "9", cwd=workspace))
    assert "expected a job number or 'last'" in one_line(kernel_lsp("answers", "--job", "x", cwd=workspace))
    assert "nope.py: no such file or folder" in one_line(kernel_lsp("answers", "nope.py", cwd=workspace))
    assert "--out needs --job" in one_line(kernel_lsp("answers", "--out", "o", cwd=workspace))
    (workspace / "afile").write_text("")
    assert "is a file, not a folder" in one_line(kernel_lsp("answers", "--job", "2", "--out", "afile",
                                                            cwd=workspace))


@pytest.mark.slow
def test_after_optimize_the_answers_without_code_can_be_read(tmp_path: Path) -> None:
    """The first run of a small model: its answers hold no code, so no candidate file is written, and
    `kernel-lsp answers` is where a user reads what the model said."""
    sys.path.insert(0, str(REPO / "tests" / "server"))
    from endpoint_double import ScriptedEndpoint, reply_text

    f = tmp_path / "relu_scale.py"
    f.write_text(GOOD_REF)
    with ScriptedEndpoint("prose") as ep:
        r = kernel_lsp("optimize", str(f), "--samples", "1", "--rounds", "1", "--strategy", "zero-shot",
                       "--endpoint", ep.url, cwd=tmp_path, env=FAST)
    assert r.returncode == 1, r.stderr
    assert not (tmp_path / ".kernel-lsp" / "candidates").exists()
    r = kernel_lsp("answers", str(f), "--job", "last", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert reply_text("prose") in r.stdout and "── no candidate: the answer holds no code" in r.stdout
