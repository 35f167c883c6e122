"""How the Ray path shapes its actors (pure; no cluster needed)."""

from __future__ import annotations

from evaluator import EvalSettings
from kernel_lsp.bench.distributed import actor_plan


def test_one_actor_per_gpu_with_its_share_of_cpus_for_compiles() -> None:
    opts, n, eff = actor_plan({"GPU": 8.0, "CPU": 128.0}, EvalSettings(device="cuda:3", gpu=3))
    assert (opts, n) == ({"num_gpus": 1, "num_cpus": 16}, 8)
    assert (eff.device, eff.gpu, eff.compile_workers) == ("cuda", 0, 16)  # Ray's CUDA_VISIBLE_DEVICES: cuda:0
    _, _, eff = actor_plan({"GPU": 4.0, "CPU": 2.0}, EvalSettings(compile_workers=3))
    assert eff.device == "auto" and eff.compile_workers == 3  # an explicit setting wins; at least 1 CPU each


def test_cpu_cluster_gets_one_single_cpu_actor_per_cpu() -> None:
    opts, n, eff = actor_plan({"CPU": 6.0}, EvalSettings(device="cpu"))
    assert (opts, n, eff.device, eff.compile_workers) == ({"num_cpus": 1}, 6, "cpu", 1)
    assert actor_plan({}, EvalSettings())[1] == 1
