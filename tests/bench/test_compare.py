"""`bench --compare`: several regimes over a folder of task files with a scripted model and the stand-in
evaluator (tests/bench/fakes.py), the pass@k estimate, resume and the output files."""

from __future__ import annotations

import csv
import json
from math import comb
from pathlib import Path

import pytest

from kernel_lsp.bench import compare as compare_mod
from kernel_lsp.bench.compare import first_per_level
from kernel_lsp.bench.metrics import TaskResult, pass_at_k, pass_at_k_share
from kernel_lsp.bench.selection import select_tasks

from .fakes import TASKS, FakeEvaluator, ScriptedBackend
from .test_sweep_fake import bench

# per regime, what each of the 4 samples of a task gets in round 1 (seed = sample - 1); refinement rounds
# (seed >= 1000) answer wrong kernels, so a sample's count comes from its first round
SCRIPT = {
    "zero-shot": ["correct 1.5 1.2", "incorrect", "incorrect", "compile_error"],  # c=1, fast=1
    "profile-guided": ["correct 0.8 0.6", "correct 0.9 0.7", "correct 1.3 1.0", "incorrect"],  # c=3, fast=1
    "refine": ["incorrect"] * 4,
}


class RegimeBackend(ScriptedBackend):
    """Answers by regime (a profile in the prompt: profile-guided; a later round: refine) and sample (seed)."""

    def __init__(self) -> None:
        super().__init__()
        self.regimes: list[str] = []

    def chat(self, messages, *, max_tokens, temperature, seed, stop=None, cancel=None):  # type: ignore[no-untyped-def]
        text = messages[-1]["content"]
        regime = "refine" if seed >= 1000 else "profile-guided" if "## Profile of the reference" in text \
            else "zero-shot"
        with self.generating:  # the marker, the answer and the count of one request together
            self.marker = SCRIPT[regime][seed % 1000] + f" seed{seed}"
            before = self.kernel_calls
            comp = super().chat(messages, max_tokens=max_tokens, temperature=temperature, seed=seed)
            if self.kernel_calls > before:
                self.regimes.append(regime)
            return comp


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> RegimeBackend:
    import kernel_lsp.generation

    backend = RegimeBackend()
    monkeypatch.setattr(kernel_lsp.generation, "open_backend", lambda settings: backend)
    return backend


def argv(out: Path, regimes: str, samples: str = "1,2,4") -> list[str]:
    return ["--kernelbench", str(TASKS), "--out", str(out), "--compare", regimes, "--samples", samples,
            "--rounds", "2"]


def test_pass_at_k_by_hand() -> None:
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(8, 3, 4) == pytest.approx(13 / 14)  # 1 - C(5,4)/C(8,4) = 1 - 5/70
    assert pass_at_k(10, 2, 3) == pytest.approx(1 - comb(8, 3) / comb(10, 3)) == pytest.approx(8 / 15)
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(3, 3, 1) == 1.0 and pass_at_k(4, 3, 2) == 1.0
    for bad in ((4, 1, 5), (4, 5, 1), (4, 1, 0)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)
    # averaged over the selection: a task without sample counts (missing, error) is a failure
    rs = [TaskResult(task="a", level=1, strategy="s", status="correct", extra={"samples": {"drawn": 4, "correct": 1,
                                                                                          "fast_1": 0}}),
          TaskResult(task="b", level=1, strategy="s", status="correct", extra={"samples": {"drawn": 4, "correct": 2,
                                                                                          "fast_1": 2}})]
    assert pass_at_k_share(rs, ["a", "b", "c"], 2) == pytest.approx((0.5 + 5 / 6) / 3)
    assert pass_at_k_share(rs, ["a", "b", "c"], 2, "fast_1") == pytest.approx((5 / 6) / 3)
    assert pass_at_k_share(rs, ["a", "b"], 4) == pytest.approx(1.0)


def test_compare_two_regimes_and_resume(tmp_path, model, monkeypatch, capsys) -> None:
    out = tmp_path / "out"
    ev = FakeEvaluator()
    assert bench(monkeypatch, ev, argv(out, "zero-shot,profile-guided")) == 0
    stdout = capsys.readouterr().out
    assert stdout == (out / "compare.md").read_text()
    # 6 tasks x 4 samples per regime and round; zero-shot stays one round, profile-guided refines (2 rounds)
    assert [model.regimes.count(r) for r in SCRIPT] == [24, 24, 24]
    data = json.loads((out / "compare.json").read_text())
    assert data["meta"]["rounds"] == {"zero-shot": 1, "profile-guided": 2} and data["meta"]["samples"] == 4
    rows = {(r["regime"], r["level"]): r for r in data["rows"]}
    assert set(rows) == {(s, lv) for s in ("zero-shot", "profile-guided") for lv in (1, 2, "all")}
    z, p = rows["zero-shot", 1], rows["profile-guided", "all"]
    assert (z["tasks"], z["correct"], z["correct_pct"], z["fast_1"], z["fast_1.2"]) == (4, 4, 100.0, 1.0, 1.0)
    assert z["geomean_speedup_eager"] == pytest.approx(1.5) and z["faster_than_eager_pct"] == 100.0
    assert z["solved"] == [f"level1/{n}" for n in ("1_add", "2_relu", "3_scale", "4_tanh")]
    assert (p["tasks"], p["correct"], p["fast_1"], p["fast_1.2"]) == (6, 6, 1.0, 1.0)
    assert p["geomean_speedup_eager"] == pytest.approx(1.3) and p["solved"] == data["meta"]["task_names"]
    # against n: zero-shot has 1 correct (and fast) sample of 4 per task, profile-guided 3 correct, 1 fast
    assert z["pass_at_k"] == {"1": {"correct_pct": 25.0, "fast_1": 0.25}, "2": {"correct_pct": 50.0, "fast_1": 0.5},
                              "4": {"correct_pct": 100.0, "fast_1": 1.0}}
    assert p["pass_at_k"] == {"1": {"correct_pct": 75.0, "fast_1": 0.25}, "2": {"correct_pct": 100.0, "fast_1": 0.5},
                              "4": {"correct_pct": 100.0, "fast_1": 1.0}}
    assert "## Against n" in stdout and "| zero-shot | 1 | 25.0 | 50.0 | 100.0 | 0.25 | 0.50 | 1.00 |" in stdout
    assert "| zero-shot | 1 | 4 | 100.0 | 100.0 | 1.00 | 1.00 | 0.00 | 1.50× faster | 4: 1_add, 2_relu, 3_scale, 4_tanh |" \
        in stdout

    # resume: the same comparison again redoes nothing; one more regime runs only its own units
    calls = len(model.regimes)
    ev2 = FakeEvaluator()
    assert bench(monkeypatch, ev2, argv(out, "zero-shot,profile-guided")) == 0
    assert len(model.regimes) == calls and sum(ev2.calls.values()) == 0
    assert json.loads((out / "compare.json").read_text())["rows"] == data["rows"]
    assert json.loads((out / "compare.json").read_text())["meta"]["skipped"] == 12
    ev3 = FakeEvaluator()
    assert bench(monkeypatch, ev3, argv(out, "zero-shot,one-shot", "1,2,4")) == 0
    assert model.regimes[calls:] == ["zero-shot"] * 24  # one-shot's prompt has no profile: scripted as zero-shot
    assert ev3.calls["candidate"] == 24 and ev3.calls["baseline"] == 0  # baselines cached per task
    regimes = [r["regime"] for r in json.loads((out / "compare.json").read_text())["rows"]]
    assert regimes == ["zero-shot"] * 3 + ["one-shot"] * 3


def test_output_files_schema_and_no_matplotlib(tmp_path, model, monkeypatch, capsys) -> None:
    out = tmp_path / "out"
    assert bench(monkeypatch, FakeEvaluator(), [*argv(out, "zero-shot", "1,4"), "--level", "2"]) == 0
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "compare.json").read_text())
    assert set(data) == {"meta", "samples", "rows", "tasks"} and data["samples"] == [1, 4]
    assert {"device", "model", "strategies", "samples", "rounds", "tasks", "task_names", "figure"} <= set(data["meta"])
    assert data["meta"]["figure"] == "compare.png" and data["meta"]["task_names"] == ["level2/1_add_relu",
                                                                                        "level2/2_double_relu"]
    assert set(data["rows"][0]) == {"regime", "label", "level", "tasks", "correct", "correct_pct",
                                    "faster_than_eager_pct", "fast_1", "fast_1.2", "fast_1_library_only",
                                    "geomean_speedup_eager", "solved", "pass_at_k"}
    assert [t["task"] for t in data["tasks"]] == data["meta"]["task_names"]
    assert data["tasks"][0]["extra"]["samples"] == {"drawn": 4, "correct": 1, "fast_1": 1}
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert list(rows[0]) == ["regime", "label", "level", "tasks", "correct", "correct_pct", "faster_than_eager_pct",
                             "fast_1", "fast_1.2", "fast_1_library_only", "geomean_speedup_eager", "solved",
                             "correct_pct_n1",
                             "correct_pct_n4", "fast_1_n1", "fast_1_n4"]
    assert len(rows) == 1 and rows[0]["level"] == "2" and rows[0]["solved"] == "level2/1_add_relu;level2/2_double_relu"
    assert (float(rows[0]["correct_pct_n1"]), float(rows[0]["fast_1_n4"])) == (25.0, 1.0)
    assert "![the regimes compared](compare.png)" in (out / "compare.md").read_text()

    # without matplotlib: one line says so, the rest is written
    def no_mpl(*a, **k):  # type: ignore[no-untyped-def]
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(compare_mod, "plot_comparison", no_mpl)
    (out / "compare.png").unlink()
    capsys.readouterr()
    assert bench(monkeypatch, FakeEvaluator(), [*argv(out, "zero-shot", "1,4"), "--level", "2"]) == 0
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if "matplotlib" in ln] == [
        "kernel-lsp: no figure: matplotlib is not installed (pip install 'kernel-lsp[bench]')"]
    assert not (out / "compare.png").exists() and json.loads((out / "compare.json").read_text())["meta"]["figure"] == ""
    assert "compare.png" not in (out / "compare.md").read_text() and (out / "compare.csv").is_file()


def test_selection_and_usage_errors(tmp_path, model, monkeypatch, capsys) -> None:
    tasks = select_tasks(TASKS, None, None)
    assert [t.name for t in first_per_level(tasks, 2)] == ["level1/1_add", "level1/2_relu", "level2/1_add_relu",
                                                            "level2/2_double_relu"]
    ev = FakeEvaluator()
    for extra in (["--compare", "zero-shot,fastest"], ["--compare", "zero-shot", "--candidates", str(tmp_path)],
                  ["--samples", "1,2"], ["--compare", ","], ["--compare", "zero-shot", "--samples", "0,2"]):
        capsys.readouterr()
        assert bench(monkeypatch, ev, ["--kernelbench", str(TASKS), "--out", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
    assert sum(ev.calls.values()) == 0 and model.kernel_calls == 0


def test_study_default_selection_from_kernelbench_rows(tmp_path) -> None:
    """Without --level and --tasks: the first 10 tasks of levels 1-3 (those the data folder has)."""
    from argparse import Namespace

    from kernel_lsp.bench.main import _select

    code = (TASKS / "level1" / "2_relu.py").read_text()
    for level, count in ((1, 12), (2, 3), (4, 2)):
        rows = [{"level": level, "problem_id": i, "name": f"{i}_Relu", "code": code} for i in range(1, count + 1)]
        (tmp_path / f"level{level}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    names = [t.name for t in _select(tmp_path, Namespace(compare="zero-shot", level=None, tasks=None))]
    assert names == [f"level1/{i}_Relu" for i in range(1, 11)] + [f"level2/{i}_Relu" for i in (1, 2, 3)]
    names = [t.name for t in _select(tmp_path, Namespace(compare="zero-shot", level=[1], tasks="11-12"))]
    assert names == ["level1/11_Relu", "level1/12_Relu"]
    assert len(_select(tmp_path, Namespace(compare=None, level=None, tasks=None))) == 12  # a sweep: level 1, all
