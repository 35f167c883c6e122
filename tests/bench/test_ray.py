"""The Ray path on CPU: a local Ray cluster, one actor per CPU, each with its own Evaluator; the verdicts land in
the sweep's History like the local pool's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lsp.history import History

from .fakes import DATA, TASKS

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_ray_evaluator_streams_from_actors(local_ray) -> None:
    """Two CPU actors evaluate concurrently (different processes) and answer like the local Evaluator."""
    from evaluator import EvalSettings
    from kernel_lsp.bench.distributed import RayEvaluator

    ref = (TASKS / "level1" / "2_relu.py").read_text()
    good = (DATA / "candidates" / "level1" / "2_relu.py").read_text()
    bad = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    ev = RayEvaluator("auto", EvalSettings(device="cpu", trials=1, timing_calls=5, time_compiled=False,
                                           warm_workers=0))
    try:
        assert ev.parallelism == 2 and ev.actor_options == {"num_cpus": 1}
        info = ev.device_info()
        assert info["name"] == "cpu" and info["pid"] > 0
        verdicts = ev.evaluate_many(ref, [good, bad])
        assert [v.status for v in verdicts] == ["correct", "incorrect"]  # pure PyTorch, then wrong
        assert verdicts[0].library_only, verdicts[0].kernel  # right results from PyTorch's operators
        assert verdicts[0].timing is not None and verdicts[0].timing.eager is not None
        prof = ev.profile(ref)  # profile-guided generation asks the evaluator for the reference's profile
        assert prof.ops and prof.total_ms > 0
    finally:
        ev.close()
    assert ray.is_initialized()  # it joined the test's cluster, so it leaves it running


def test_ray_sweep_from_the_cli_starts_a_local_cluster_and_fills_the_history(tmp_path: Path) -> None:
    """`--ray auto` with no cluster running: a local one is started (said on stderr), one actor per CPU evaluates
    the units, their verdicts land in the sweep's History like the local pool's, and stdout stays the table."""
    if ray.is_initialized():
        pytest.skip("a Ray cluster is attached to this process")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tests.bench.cli_runner", "bench", "--kernelbench", str(TASKS), "--level", "1",
           "--tasks", "2-3", "--candidates", str(DATA / "candidates"), "--out", str(out), "--device", "cpu",
           "--trials", "1", "--set", "timing_calls=5", "--ray", "auto"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "starting a local one" in res.stderr
    assert res.stdout == (out / "bench.md").read_text()
    data = json.loads((out / "bench.json").read_text())
    assert data["meta"]["ray"] == "auto" and data["meta"]["device"] == "cpu"
    assert {t["task"]: (t["status"], t["kernel"]) for t in data["tasks"]} == {
        "level1/2_relu": ("correct", "library_only"), "level1/3_scale": ("incorrect", "")}
    assert data["summaries"][0]["fast_p_eager"]["0.0"] == 0.0  # right results from torch alone do not count
    with History(out / ".kernel-lsp") as h:
        jobs = [j for j in h.jobs() if j.kind == "bench"]
        assert [j.state for j in jobs] == ["done", "done"]
        cands = [c for j in jobs for c in h.candidates(j.task_key)]
        assert sorted(c.status for c in cands) == ["correct", "incorrect"]
        assert all(c.verdict and c.verdict.device == "cpu" for c in cands)
