"""The sweep's mechanics through `run_bench` with a stand-in evaluator: resume, baselines, outputs."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lsp.bench import main as bench_main
from kernel_lsp.bench.baselines import BASELINE_NS
from kernel_lsp.bench.ledger import RESULT_NS
from kernel_lsp.bench.selection import select_tasks
from kernel_lsp.cli import build_parser, settings_from_args
from kernel_lsp.history import History

from .fakes import COMPILED_MS, EAGER_MS, TASKS, FakeEvaluator, ScriptedBackend, fake_candidate

REPO = Path(__file__).resolve().parents[2]

VERDICTS = {
    "level1/1_add.py": fake_candidate("correct", 2.0, 1.5),
    "level1/2_relu.py": fake_candidate("correct", 0.7, 0.5),
    "level1/3_scale.py": fake_candidate("incorrect"),
    "level2/1_add_relu.py": fake_candidate("correct", 1.2, 0.9),
    "2_double_relu.py": fake_candidate("infra_error"),  # flat layout; not the candidate's fault: retried
}


def write_candidates(folder: Path, files: dict[str, str]) -> Path:
    for rel, src in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(src)
    return folder


def counts(ev: FakeEvaluator) -> tuple[int, int]:
    return ev.calls["candidate"], ev.calls["baseline"]


def bench(monkeypatch: pytest.MonkeyPatch, ev: FakeEvaluator, argv: list[str]) -> int:
    monkeypatch.setattr(bench_main, "make_evaluator", lambda settings, ray: ev)
    args = build_parser().parse_args(["bench", *argv])
    return bench_main.run_bench(settings_from_args(args, Path.cwd()), args)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    cands = write_candidates(tmp_path / "mine", VERDICTS)
    return cands, tmp_path / "out"


def test_sweep_outputs_and_resume(setup, monkeypatch, capsys) -> None:
    cands, out = setup
    argv = ["--kernelbench", str(TASKS), "--level", "1", "--level", "2", "--candidates", str(cands), "--out", str(out)]
    ev = FakeEvaluator()
    assert bench(monkeypatch, ev, argv) == 1  # one unit unfinished (infra error)
    stdout = capsys.readouterr().out
    assert stdout == (out / "bench.md").read_text()  # stdout carries the tables and nothing else
    assert "baselines measured live on this device (eager and torch.compile)" in stdout
    assert counts(ev) == (5, 1)  # 3_scale is incorrect: its baseline is measured alone
    assert ev.closed

    data = json.loads((out / "bench.json").read_text())
    l1, l2 = data["summaries"]
    assert (l1["level"], l1["tasks"], l1["correct"], l1["attempted"]) == (1, 4, 2, 3)  # 4_tanh: no candidate
    assert l1["fast_p_eager"] == {"0.0": 0.5, "0.5": 0.5, "0.8": 0.25, "1.0": 0.25, "1.5": 0.25, "2.0": 0.0}
    assert l1["geomean_speedup_eager"] == pytest.approx((2.0 * 0.7) ** 0.5)
    assert l1["geomean_speedup_compiled"] == pytest.approx((1.5 * 0.5) ** 0.5)
    assert (l2["tasks"], l2["correct"], l2["fast_p_eager"]["1.0"]) == (2, 1, 0.5)
    assert l1["strategy"] == "candidates" and l1["model"] == "mine"
    # CSV and Markdown say the same
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [float(r["fast_0.8"]) for r in rows] == [0.25, 0.5]
    assert [float(r["geomean_speedup_eager"]) for r in rows] == pytest.approx([(2.0 * 0.7) ** 0.5, 1.2])
    assert "| 1 | candidates | mine | 4 | 50.0 | 0.50 | 0.50 | 0.25 | 0.25 | 0.25 | 0.00 | 0.00 | 1.18× faster | 1.15× slower |" in stdout
    tasks = {r["task"]: r for r in csv.DictReader((out / "tasks.csv").open())}
    assert tasks["level1/4_tanh"]["status"] == "missing"
    assert tasks["level2/2_double_relu"]["status"] == "error"
    assert float(tasks["level1/3_scale"]["live_eager_ms"]) == EAGER_MS  # baseline from the reference run
    assert float(tasks["level1/1_add"]["live_compiled_ms"]) == COMPILED_MS
    assert (out / "speedups.png").stat().st_size > 10_000
    assert (out / "speedups.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # resume: only the unfinished unit runs again; the fixed one now finishes
    (cands / "2_double_relu.py").write_text(fake_candidate("correct", 3.0, 2.0))
    ev2 = FakeEvaluator()
    assert bench(monkeypatch, ev2, argv) == 0
    assert counts(ev2) == (1, 0)
    assert "correct 3.0" in ev2.sources[0]
    data = json.loads((out / "bench.json").read_text())
    assert data["meta"]["skipped"] == 4 and data["meta"]["ran"] == 1 and data["meta"]["missing"] == 1
    assert data["summaries"][1]["fast_p_eager"]["2.0"] == 0.5

    # and a third time nothing runs at all
    ev3 = FakeEvaluator()
    assert bench(monkeypatch, ev3, argv) == 0 and sum(ev3.calls.values()) == 0
    with History(out / ".kernel-lsp") as h:
        done = [j for j in h.jobs() if j.kind == "bench" and j.state == "done"]
        assert len(done) == 5 and len({j.settings["bench_key"] for j in done}) == 5
        assert len([j for j in h.jobs() if j.state == "failed"]) == 1  # the infra error of the first sweep
        assert h.get(RESULT_NS, done[0].settings["bench_key"])["result"]["task"] == "level1/1_add"


def test_changed_candidate_or_device_runs_again(setup, monkeypatch, capsys) -> None:
    cands, out = setup
    argv = ["--kernelbench", str(TASKS), "--level", "1", "--candidates", str(cands), "--out", str(out)]
    bench(monkeypatch, FakeEvaluator(), argv)
    (cands / "level1" / "2_relu.py").write_text(fake_candidate("correct", 5.0, 4.0))
    ev = FakeEvaluator()
    bench(monkeypatch, ev, argv)
    assert counts(ev) == (1, 0)  # new source hash, cached baseline
    other = FakeEvaluator(device="Another GPU")
    capsys.readouterr()
    bench(monkeypatch, other, [*argv, "--set", "time_compiled=false"])
    assert "measured live on this device (eager only: torch.compile timing was off)" in capsys.readouterr().out
    assert counts(other) == (3, 1)  # results and baselines are per device
    with History(out / ".kernel-lsp") as h:
        # the baseline cache holds one entry per (device, torch, task): 3 tasks had a verdict or reference run
        keys = {h.get(BASELINE_NS, f"{d}|2.99-fake|{t.fingerprint}") is not None
                for d in ("Fake GPU 9000", "Another GPU")
                for t in select_tasks(TASKS, [1], {1, 2, 3})}
        assert keys == {True}


def test_other_runs_in_the_same_history_are_reported(setup, monkeypatch, capsys) -> None:
    cands, out = setup
    theirs = write_candidates(cands.parent / "theirs", {"level1/1_add.py": fake_candidate("correct", 4.0, 3.0)})
    base = ["--kernelbench", str(TASKS), "--level", "1", "--out", str(out)]
    bench(monkeypatch, FakeEvaluator(), [*base, "--candidates", str(cands)])
    bench(monkeypatch, FakeEvaluator(), [*base, "--candidates", str(theirs)])
    data = json.loads((out / "bench.json").read_text())
    by_model = {s["model"]: s for s in data["summaries"]}
    assert set(by_model) == {"mine", "theirs"}
    assert by_model["theirs"]["fast_p_eager"]["2.0"] == 0.25 and by_model["theirs"]["correct"] == 1
    assert by_model["mine"]["correct"] == 2


def test_usage_errors(tmp_path, monkeypatch, capsys) -> None:
    ev = FakeEvaluator()
    assert bench(monkeypatch, ev, ["--candidates", str(tmp_path)]) == 2
    assert "no tasks" in capsys.readouterr().err
    assert bench(monkeypatch, ev, ["--kernelbench", str(TASKS), "--candidates", str(tmp_path / "x")]) == 2
    assert bench(monkeypatch, ev, ["--kernelbench", str(TASKS), "--tasks", "x-y", "--candidates", str(tmp_path)]) == 2
    err = capsys.readouterr()
    assert err.out == "" and "--tasks" in err.err and len(err.err.strip().splitlines()) == 2
    assert sum(ev.calls.values()) == 0


def test_task_folder_copied_with_own_candidates(tmp_path, monkeypatch, capsys) -> None:
    """A folder of a user's modules that each hold their own ModelNew: --candidates can be the same folder."""
    src = tmp_path / "proj"
    shutil.copytree(TASKS / "level2", src)
    for f in src.glob("*.py"):
        f.write_text(f.read_text() + "\n\nclass ModelNew(Model):\n    pass\n# fake-verdict: correct 1.5 1.1\n")
    ev = FakeEvaluator()
    assert bench(monkeypatch, ev, ["--kernelbench", str(src), "--candidates", str(src), "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["summaries"][0]["level"] is None and data["summaries"][0]["fast_p_eager"]["1.0"] == 1.0
    assert all("class ModelNew" in s for s in ev.sources)


def test_ray_missing_is_a_one_line_usage_error(tmp_path: Path) -> None:
    code = ("import sys, builtins\nreal = builtins.__import__\n"
            "def fake(name, *a, **k):\n    if name == 'ray' or name.startswith('ray.'):\n"
            "        raise ImportError('No module named ray')\n    return real(name, *a, **k)\n"
            "builtins.__import__ = fake\nfrom kernel_lsp.cli import main\n"
            f"sys.exit(main(['bench', '--kernelbench', {str(TASKS)!r}, '--candidates', {str(tmp_path)!r}, "
            f"'--out', {str(tmp_path)!r}, '--ray', 'auto']))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                         check=False)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().count("\n") == 0 and "Ray" in res.stderr


def test_generation_sweep_with_a_scripted_model(tmp_path, monkeypatch, capsys) -> None:
    """Without --candidates the engine generates (here: a scripted model), and the sweep resumes the same way."""
    import kernel_lsp.generation

    monkeypatch.setattr(kernel_lsp.generation, "open_backend", lambda settings: ScriptedBackend())
    argv = ["--kernelbench", str(TASKS), "--level", "2", "--out", str(tmp_path), "--strategy", "zero-shot",
            "-n", "1", "--rounds", "1"]
    ev = FakeEvaluator()
    assert bench(monkeypatch, ev, argv) == 0
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["summaries"][0]["strategy"] == "zero-shot n=1 r=1"
    assert data["summaries"][0]["fast_p_eager"]["1.0"] == 1.0
    assert [t["status"] for t in data["tasks"]] == ["correct", "correct"]
    assert counts(ev)[0] == 2
    with History(tmp_path / ".kernel-lsp") as h:
        kinds = sorted(j.kind for j in h.jobs())
        assert kinds.count("bench") == 2 and len(kinds) == 4  # a bench job wraps each engine job
    ev2 = FakeEvaluator()
    assert bench(monkeypatch, ev2, argv) == 0 and counts(ev2) == (0, 0)


def test_generation_with_a_missing_model_is_a_usage_error(tmp_path, monkeypatch, capsys) -> None:
    ev = FakeEvaluator()
    argv = ["--kernelbench", str(TASKS), "--out", str(tmp_path), "--model", str(tmp_path / "nope.gguf")]
    assert bench(monkeypatch, ev, argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.gguf" in err and sum(ev.calls.values()) == 0


def test_without_out_the_tables_go_to_the_state_folder_not_the_current_one(setup, monkeypatch, capsys) -> None:
    cands, _ = setup
    work = cands.parent / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    ev = FakeEvaluator()
    assert bench(monkeypatch, ev, ["--kernelbench", str(TASKS), "--level", "1", "--candidates", str(cands)]) == 0
    assert [p.name for p in work.iterdir()] == [".kernel-lsp"]
    written = sorted(p.name for p in (work / ".kernel-lsp" / "bench").iterdir())
    assert {"bench.md", "bench.json", "summary.csv", "tasks.csv"} <= set(written)
    err = capsys.readouterr().err
    assert f"tables and figure in {work / '.kernel-lsp' / 'bench'}" in err


def test_a_relative_out_keeps_the_log_in_its_own_state_folder(setup, monkeypatch, capsys) -> None:
    """`kernel-lsp bench --out bout` from the folder above: the history and the log go to bout/.kernel-lsp/,
    not to bout/bout/.kernel-lsp/ (the relative folder joined twice)."""
    cands, _ = setup
    work = cands.parent / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    ev = FakeEvaluator()
    assert bench(monkeypatch, ev, ["--kernelbench", str(TASKS), "--level", "1", "--candidates", str(cands),
                                   "--out", "bout"]) == 0
    assert sorted(p.name for p in work.iterdir()) == ["bout"]
    assert not (work / "bout" / "bout").exists()
    state = work / "bout" / ".kernel-lsp"
    assert (state / "kernel-lsp.log").is_file() and (state / "history.sqlite").is_file()
    assert (work / "bout" / "bench.md").is_file()


def test_a_task_the_oracle_could_not_profile_runs_again_and_is_no_models_failure(tmp_path, monkeypatch) -> None:
    """The evaluator failing on a task's reference (a worker lost) is the oracle's failure: the task is an error
    that the next sweep runs again, never a task the model failed."""
    import kernel_lsp.generation
    from evaluator.errors import EvaluatorError

    class LosesAWorker(FakeEvaluator):
        def profile(self, ref_src, cancel=None, on_stage=None):  # type: ignore[no-untyped-def]
            if "x * 2.0" in ref_src:  # level2/2_double_relu
                raise EvaluatorError("profiling the reference: worker is gone")
            return super().profile(ref_src, cancel, on_stage)

    monkeypatch.setattr(kernel_lsp.generation, "open_backend", lambda settings: ScriptedBackend())
    argv = ["--kernelbench", str(TASKS), "--level", "2", "--out", str(tmp_path), "--strategy", "zero-shot",
            "-n", "1", "--rounds", "1"]
    ev = LosesAWorker()
    assert bench(monkeypatch, ev, argv) == 1  # a unit unfinished
    tasks = {t["task"]: t for t in json.loads((tmp_path / "bench.json").read_text())["tasks"]}
    lost = [t for t in tasks.values() if t["status"] == "error"]
    assert len(lost) == 1 and "could not profile" in lost[0]["message"], tasks
    assert "does not run" not in lost[0]["message"]
    ev2 = FakeEvaluator()  # the next sweep, the evaluator whole again: only that task runs
    assert bench(monkeypatch, ev2, argv) == 0
    assert ev2.calls["profile"] == 1
    assert {t["status"] for t in json.loads((tmp_path / "bench.json").read_text())["tasks"]} == {"correct"}
