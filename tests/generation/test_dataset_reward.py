"""`kernel-lsp export` and `kernel-lsp reward` where no oracle is needed: the check of prompts for chain of thought,
a missing history, bad input lines and answers without code. With the real oracle (its evaluator shared with the
engine's tests): test_engine.py, test_export_* and test_reward_*."""

from __future__ import annotations

import json

import pytest

from kernel_lsp.cli import main
from kernel_lsp.history import History

from .conftest import ROOT

REF = (ROOT / "examples" / "relu_scale.py").read_text()
PROSE = "I would write a CUDA kernel here, but not today."
THOUGHTS = ["SECRET-1: the scale could be folded into the comparison, which would skip one multiply per element.",
            "SECRET-2: I keep going back and forth on how to vectorise this loop across the channels of x.",
            "SECRET-3: a single pass over the buffer with the scale applied in registers should be the fastest."]


def think(i: int, text: str) -> str:
    return f"<think>\n{THOUGHTS[i]}\n</think>\n{text}"


def test_export_flags_a_prompt_that_holds_an_earlier_steps_reasoning(tmp_path, capsys):
    with History(tmp_path) as h:
        job = h.start_job("t.py::Model", "f0", "optimize", strategy="refine", model="m")
        first = [{"role": "user", "content": "write a kernel"}]
        h.add_step(job, round=1, prompt=json.dumps(first), completion=think(0, "no code"))
        clean = [{"role": "user", "content": "fix it; earlier: no kernel"}]
        h.add_step(job, round=2, prompt=json.dumps(clean), completion="<thinking>short</thinking>none")
        leaked = [{"role": "user", "content": f"fix it; earlier you thought: {THOUGHTS[0]}"}]
        h.add_step(job, round=3, prompt=json.dumps(leaked), completion="none")
        h.add_step(job, round=4, prompt=json.dumps([{"role": "user", "content": "a <thinking> marker"}]))
    out = tmp_path / "d.jsonl"
    assert main(["export", "--from", str(tmp_path), "--out", str(out)]) == 1
    assert "hold an earlier step's chain of thought" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reasoning_in_prompt"] for r in rows] == [False, False, True, True]
    assert [r["status"] for r in rows] == ["no_kernel"] * 4


def test_export_without_a_history_is_one_line(tmp_path, capsys):
    assert main(["export", "--from", str(tmp_path), "--out", str(tmp_path / "d.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no history there" in err[0]


def test_reward_cli_reports_each_bad_line_and_keeps_the_rest(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join([json.dumps({"reference": REF, "completion": PROSE, "id": 7}), "{not json", "",
                              json.dumps([1, 2]), json.dumps({"reference": REF, "completion": "```python\nx = 1\n```"})])
                   + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["reward", str(src), "--out", str(out), "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(": ")[1].rsplit(":", 1)[1] for line in err[:2]] == ["2", "4"]
    assert "not JSON" in err[0] and "got list" in err[1] and len(err) == 3
    res = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["line"], r["status"]) for r in res] == [(1, "no_kernel"), (2, "bad_input"), (4, "bad_input"),
                                                       (5, "no_kernel")]
    assert res[0]["id"] == 7 and res[0]["reward"] == pytest.approx(-0.05)


def test_reward_cli_writes_each_result_as_it_comes_so_an_interrupted_batch_keeps_them(tmp_path, capsys,
                                                                                     monkeypatch):
    """The second kernel's evaluation is interrupted (a batch cut by its time limit, a Ctrl-C) only once the first
    row's result is on disk: that row stays written, in order, and the command says it was interrupted."""
    import threading
    import time as clock

    from evaluator.verdict import Verdict
    from kernel_lsp import reward

    from .conftest import KERNELS

    code = (KERNELS / "fast.py").read_text()
    out = tmp_path / "out.jsonl"
    first_written = threading.Event()

    class Oracle:
        parallelism = 4

        def evaluate(self, ref, kernel, time=True):  # noqa: A002
            if "SECOND" not in kernel:
                return Verdict("incorrect", message="wrong values")
            t_end = clock.monotonic() + 30
            while not (out.is_file() and out.read_text().count("\n") >= 2):
                assert clock.monotonic() < t_end, "the first results never reached the file"
                clock.sleep(0.02)
            first_written.set()
            raise KeyboardInterrupt

        def close(self):
            pass

    monkeypatch.setattr(reward, "open_oracle", lambda *a, **k: Oracle())
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps({"reference": REF, "completion": c}) for c in [
        PROSE, f"```python\n{code}```", f"```python\n# SECOND\n{code}```"]) + "\n")
    t0 = clock.monotonic()
    assert main(["reward", str(src), "--out", str(out), "--device", "cpu"]) == 130
    assert first_written.is_set() and clock.monotonic() - t0 < 60
    res = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["line"], r["status"]) for r in res] == [(1, "no_kernel"), (2, "incorrect")]
    assert "interrupted" in capsys.readouterr().err
