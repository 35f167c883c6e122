"""The roofline's inputs: bytes the reference really reads and writes, FLOPs of its matmuls, for problems of known
traffic (the referee's code, run here on the CPU), and its bound never beaten by construction (peaks, not
measurements)."""

from __future__ import annotations

import pytest
from eval_helpers import reference

torch = pytest.importorskip("torch")

from evaluator import messages as M  # noqa: E402
from evaluator.stages.device.time import faster_than_hardware  # noqa: E402
from evaluator.trusted.referee import Referee  # noqa: E402

LIMITS = {"roofline_bandwidth_gbs": 100.0, "roofline_tflops": 1.0, "roofline_source": "test",
          "physical_bandwidth_gbs": 1000.0}


def _report(src: str) -> M.RooflineReport:
    r = Referee(torch.device("cpu"))
    r.load(M.LoadReference(reference_src=src, settings={"atol": 1e-4, "rtol": 1e-4}, init_seed=1))
    return r.roofline(M.RooflineAsk(limits=LIMITS))


def _roofline(src: str) -> dict:
    return _report(src).to_wire()


def test_copy_reads_and_writes_its_size():
    n = 256 * 1024
    rl = _roofline(reference("args[0].clone()", f"[torch.rand({n})]"))
    assert rl["bytes_read"] == 4 * n and rl["bytes_written"] == 4 * n and rl["flops"] == 0
    assert rl["roofline_ms"] == pytest.approx(8 * n / 100e9 * 1e3) and rl["bound"] == "memory"


def test_reduction_reads_everything_writes_little():
    rl = _roofline(reference("torch.mean(args[0], dim=1)", "[torch.rand(8, 512, 64)]"))
    assert rl["bytes_read"] == 4 * 8 * 512 * 64 and rl["bytes_written"] == 4 * 8 * 64


def test_a_slice_is_not_counted_as_reading_the_whole_input():
    rl = _roofline(reference("args[0][:, :16] * 2", "[torch.rand(64, 1024)]"))
    assert rl["bytes_read"] == 4 * 64 * 16  # the multiply reads the slice; slicing itself reads nothing


def test_gemm_flops_and_bytes():
    m, k, n = 64, 128, 32
    rl = _roofline(reference("args[0] @ args[1]", f"[torch.rand({m}, {k}), torch.rand({k}, {n})]"))
    assert rl["flops"] == 2 * m * n * k
    assert rl["bytes_read"] == 4 * (m * k + k * n) and rl["bytes_written"] == 4 * m * n
    t_comp = 2 * m * n * k / 1e12 * 1e3
    t_mem = 4 * (m * k + k * n + m * n) / 100e9 * 1e3
    assert rl["roofline_ms"] == pytest.approx(max(t_comp, t_mem))


def test_the_physical_floor_is_the_inputs_bytes_at_the_highest_bandwidth():
    n = 256 * 1024
    rl = _report(reference("args[0].clone()", f"[torch.rand({n})]"))
    assert rl.floor_ms == pytest.approx(4 * n / 1000e9 * 1e3)
    assert faster_than_hardware(rl.floor_ms, rl) == ""  # at the floor: possible
    assert faster_than_hardware(rl.floor_ms * 0.6, rl) == ""  # a valid algorithm may skip some input
    assert "faster than the hardware allows" in faster_than_hardware(rl.floor_ms * 0.4, rl)


def test_device_specs_are_peaks_by_name():
    from evaluator.trusted.devinfo import spec_limits

    assert spec_limits("NVIDIA H200") == (4800.0, 494.7)
    assert spec_limits("NVIDIA H100 PCIe")[0] == 2000.0 and spec_limits("NVIDIA H100 80GB HBM3")[0] == 3350.0
    assert spec_limits("Tesla V100-SXM2-32GB")[0] == 900.0
    assert spec_limits("Some Future GPU") == (None, None)
