"""The oracle's fixtures: hand-written candidates that must be judged correct.

* GPU (``@pytest.mark.gpu``): every kernel fixture in tests/fixtures/kernels/{level1,level2,standard} against
  its KernelBench reference from ../shared/kernelbench must be ``correct``, all evaluated side by side. Skipped
  without CUDA or without the KernelBench data. Set KLSP_FIXTURE_REPORT=path to get a JSON table of the verdicts
  (status, error, timings); KLSP_FIXTURE_TIME=1 also times each kernel, and KLSP_FIXTURE_TIME_COMPILED=1
  torch.compile of each reference (slow).
* CPU: every tests/fixtures/cpu/<name>_new.py (C++) against <name>_ref.py must be ``correct``.
* No GPU needed: the CUDA sources of every kernel fixture compile with ``nvcc -c``
  (tests/fixtures/check_cuda_sources.py; skipped without nvcc), and the oracle's own no-GPU path
  compile-checks them too.
* Static checks of the fixture files themselves (form, signatures, task names).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import check_cuda_sources
import fixturelib

from evaluator import EvalSettings, Evaluator

LEVEL1 = fixturelib.kernel_fixtures("level1")
LEVEL2 = fixturelib.kernel_fixtures("level2")
STANDARD = fixturelib.kernel_fixtures("standard")
KERNELS = LEVEL1 + LEVEL2 + STANDARD
FAST = LEVEL1 + LEVEL2
# Standard-form sources include torch's headers: one takes over three minutes with nvcc on a 2-core machine. The
# GPU tests build and run every one, the CPU emulation runs their kernels and the g++ check parses their wrappers;
# KLSP_ALL_STANDARD=1 also compiles them here with nvcc.
ALL_STANDARD = os.environ.get("KLSP_ALL_STANDARD") == "1"
CPU_NAMES = fixturelib.cpu_fixture_names()
REPORT: list[dict] = []


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.stem}"


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


needs_nvcc = pytest.mark.skipif(check_cuda_sources.nvcc_path() is None, reason="nvcc not installed")


@pytest.fixture(scope="module")
def build_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The session's shared build cache when the evaluator's conftest provides one, else our own."""
    try:
        return request.getfixturevalue("cache_dir")
    except pytest.FixtureLookupError:
        env = os.environ.get("KLSP_TEST_CACHE")
        if env:
            Path(env).mkdir(parents=True, exist_ok=True)
            return env
        return str(tmp_path_factory.mktemp("fixture-builds"))


# -- static checks of the fixture files (fast, no compiler) ------------------------------------------------------
def test_fixture_counts():
    assert len(LEVEL1) >= 10, [p.name for p in LEVEL1]
    assert len(LEVEL2) >= 5, [p.name for p in LEVEL2]
    assert len(STANDARD) >= 3, [p.name for p in STANDARD]
    assert len(CPU_NAMES) >= 4, CPU_NAMES


def _init_params(tree: ast.Module, cls_name: str) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return [a.arg for a in item.args.args[1:]]
            return []
    return None


@pytest.mark.parametrize("path", KERNELS, ids=_id)
def test_kernel_fixture_form(path: Path):
    src = path.read_text()
    tree = ast.parse(src)
    assert _init_params(tree, "ModelNew") is not None, "no class ModelNew"
    calls = fixturelib.inline_calls(src)
    assert calls and all(c.cuda_sources for c in calls), "expected load_inline with cuda_sources"
    text = src.lower()
    assert not re.search(r"-arch\b|-gencode|sm_\d\d|compute_\d\d", text), "never hard-code a GPU arch"
    for c in calls:
        if path.parent.name == "standard":
            assert c.torch_in_cuda, "standard form: the .cu includes torch headers"
        else:
            assert not c.torch_in_cuda, "fast form: no torch headers in cuda_sources"
            assert c.no_implicit_headers, "fast form needs no_implicit_headers=True"
            assert c.cpp_text().lstrip().startswith("#include <torch/extension.h>"), "torch/extension.h first (PCH)"
    # the task exists (visible) and ModelNew takes the same constructor arguments as Model
    ref = fixturelib.fixture_reference(path)
    if fixturelib.kernelbench_dir() is None:
        pytest.skip("KernelBench data not found (../shared/kernelbench or $KERNELBENCH_DIR)")
    assert ref is not None, f"{path.stem} is not a visible KernelBench task"
    assert _init_params(tree, "ModelNew") == _init_params(ast.parse(ref), "Model")


@pytest.mark.parametrize("name", CPU_NAMES)
def test_cpu_fixture_form(name: str):
    ref, new = ast.parse(fixturelib.cpu_reference(name)), fixturelib.cpu_candidate(name)
    calls = fixturelib.inline_calls(new)
    assert calls and all(c.cpp_sources and not c.cuda_sources for c in calls), "C++ only (runs without a GPU)"
    assert _init_params(ast.parse(new), "ModelNew") == _init_params(ref, "Model")
    names = {n.name for n in ref.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert {"Model", "get_inputs", "get_init_inputs"} <= names


# -- nvcc / g++ compile checks (no GPU needed) ------------------------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("path", FAST, ids=_id)
def test_cuda_sources_compile_with_nvcc(path: Path, tmp_path: Path):
    if not has_cuda() and fixturelib.fixture_reference(path) is not None:
        pytest.skip("compiled with nvcc through the oracle instead (test_oracle_compile_checks_cuda_fixture_without_gpu)")
    results = check_cuda_sources.check_cuda_file(path, tmp_path)
    assert results, "no cuda_sources found"
    for r in results:
        assert r.ok, f"nvcc failed for {r.call}:\n{r.log[-3000:]}"


@needs_nvcc
@pytest.mark.slow
@pytest.mark.skipif(not ALL_STANDARD, reason="built and run by the GPU tests; KLSP_ALL_STANDARD=1 compiles them "
                                             "here with nvcc (over three minutes each on two cores)")
@pytest.mark.parametrize("path", STANDARD, ids=_id)
def test_standard_form_cuda_sources_compile_with_nvcc(path: Path, tmp_path: Path):
    """Standard form: the .cu includes torch headers, so this takes minutes per file."""
    pytest.importorskip("torch")
    results = check_cuda_sources.check_cuda_file(path, tmp_path)
    assert results
    for r in results:
        assert r.ok, f"nvcc failed for {r.call}:\n{r.log[-3000:]}"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_cpp_sources_of_kernel_fixtures_compile():
    """The torch wrappers (cpp_sources) of every kernel fixture, syntax-checked in one g++ run."""
    pytest.importorskip("torch")
    results = check_cuda_sources.check_cpp_sources(KERNELS)
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.fixture.name} [{r.call}]:\n{r.log[-2000:]}" for r in bad)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_kernel_logic_under_cpu_emulation(tmp_path: Path):
    """Every kernel fixture's CUDA code, run on the CPU under tests/fixtures/cuda_emu (a std::thread per CUDA
    thread, real barriers for __syncthreads and warp shuffles) on small shapes, matches its reference. Runs in
    a subprocess: it builds one C++ extension of all fixtures (about a minute)."""
    import subprocess

    if fixturelib.kernelbench_dir() is None:
        pytest.skip("KernelBench data not found (../shared/kernelbench or $KERNELBENCH_DIR)")
    out = tmp_path / "emulation.json"
    p = subprocess.run([sys.executable, str(fixturelib.FIXTURES / "emulate.py"), "--json", str(out),
                        "--build-dir", str(tmp_path)], capture_output=True, text=True, timeout=1800, check=False)
    assert out.is_file(), f"emulation did not finish (rc {p.returncode}):\n{(p.stdout + p.stderr)[-4000:]}"
    rows = json.loads(out.read_text())
    bad = [r for r in rows if r["ok"] is False]
    assert not bad, "\n".join(f"{r['fixture']} case {r['case']} {r['shape']}: max abs err {r['max_abs_err']}" for r in bad)
    covered = {r["fixture"] for r in rows if r["ok"]}
    assert covered == {_id(p) for p in KERNELS}, f"not emulated: {sorted({_id(p) for p in KERNELS} - covered)}"


# -- the oracle on the CPU ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_ev(build_cache: str):
    settings = EvalSettings(device="cpu", cache_dir=build_cache, compile_timeout=300.0, run_timeout=60.0,
                            time_compiled=False, timing_calls=20, timing_budget_s=2.0, warmup_calls=2)
    with Evaluator(settings) as ev:
        yield ev


@pytest.mark.slow
@pytest.mark.parametrize("name", CPU_NAMES)
def test_cpu_fixture_is_correct(cpu_ev: Evaluator, name: str):
    v = cpu_ev.evaluate(fixturelib.cpu_reference(name), fixturelib.cpu_candidate(name))
    assert v.status == "correct", f"{name}: {v.status}: {v.message}\n{v.compiler_log[-2000:]}"
    assert v.correctness is not None and v.correctness.trials >= 5 and v.correctness.passed == v.correctness.trials
    assert not [f for f in v.findings if f.severity == "reject"]
    assert v.timing is not None and v.timing.candidate is not None, "timed on the CPU"


@pytest.fixture(scope="module")
def no_gpu_verdicts(cpu_ev: Evaluator) -> dict[Path, object]:
    """Every fast-form fixture through the oracle's no-GPU path at once: `evaluate` is thread-safe and each nvcc
    check runs in a builder of its own, so the compiles share the machine's cores as a batch of candidates does
    (one after another they took minutes). A verdict, or the exception its evaluation raised."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = {p: fixturelib.fixture_reference(p) for p in FAST}

    def one(path: Path) -> object:
        try:
            return cpu_ev.evaluate(jobs[path], path.read_text())
        except Exception as e:  # noqa: BLE001 - reported by that fixture's own test
            return e

    todo = [p for p, ref in jobs.items() if ref is not None]
    with ThreadPoolExecutor(max_workers=max(1, min(len(todo), 2 * (os.cpu_count() or 1)))) as ex:
        return dict(zip(todo, ex.map(one, todo), strict=True))


@needs_nvcc
@pytest.mark.slow
@pytest.mark.skipif(has_cuda(), reason="checks the no-GPU path; with a GPU the fixtures really run (gpu tests)")
@pytest.mark.parametrize("path", FAST, ids=_id)
def test_oracle_compile_checks_cuda_fixture_without_gpu(no_gpu_verdicts: dict, path: Path):
    """Without a GPU the oracle cannot run a CUDA candidate, but it must nvcc-check it and say so."""
    if path not in no_gpu_verdicts:
        pytest.skip("KernelBench data not found")
    v = no_gpu_verdicts[path]
    if isinstance(v, Exception):
        raise v
    assert v.status == "infra_error", f"{v.status}: {v.message}\n{v.compiler_log[-2000:]}"
    assert any("nvcc" in c for c in v.checked), (v.checked, v.not_checked, v.message)
    assert "verify" in v.not_checked


# -- the oracle on the GPU ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_ev(build_cache: str):
    if not has_cuda():
        pytest.skip("needs a CUDA device")
    settings = EvalSettings(device="cuda", cache_dir=build_cache, compile_timeout=600.0, run_timeout=600.0,
                            time_compiled=os.environ.get("KLSP_FIXTURE_TIME_COMPILED") == "1",
                            compile_workers=min(16, os.cpu_count() or 1), warm_workers=3)
    with Evaluator(settings) as ev:
        yield ev


@pytest.fixture(scope="module")
def gpu_verdicts(gpu_ev: Evaluator) -> dict[Path, object]:
    """Every kernel fixture evaluated side by side, as a batch of candidates is: compiles in parallel on the CPU,
    verifications sharing the device, each admitted only when the device memory its task needs is there (one after
    another they took over five minutes). Correctness only, unless KLSP_FIXTURE_TIME=1 (the corpora time kernels).
    A verdict, or the exception its evaluation raised."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = {p: fixturelib.fixture_reference(p) for p in KERNELS}
    timed = os.environ.get("KLSP_FIXTURE_TIME") == "1"

    def one(path: Path) -> object:
        try:
            return gpu_ev.evaluate(jobs[path], path.read_text(), time=timed)
        except Exception as e:  # noqa: BLE001 - reported by that fixture's own test
            return e

    todo = [p for p, ref in jobs.items() if ref is not None]
    with ThreadPoolExecutor(max_workers=max(1, min(len(todo), 12))) as ex:
        return dict(zip(todo, ex.map(one, todo), strict=True))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("path", KERNELS, ids=_id)
def test_kernel_fixture_is_correct_on_gpu(gpu_verdicts: dict, path: Path):
    if path not in gpu_verdicts:
        pytest.skip("KernelBench data not found (../shared/kernelbench or $KERNELBENCH_DIR)")
    v = gpu_verdicts[path]
    if isinstance(v, Exception):
        raise v
    row = {"fixture": _id(path), "status": v.status, "message": v.message,
           "max_abs_err": v.correctness.max_abs_err if v.correctness else None,
           "max_rel_err": v.correctness.max_rel_err if v.correctness else None,
           "compile_s": next((s.seconds for s in v.stages if s.name == "compile"), None),
           "candidate_ms": v.timing.candidate.median_ms if v.timing and v.timing.candidate else None,
           "eager_ms": v.timing.eager.median_ms if v.timing and v.timing.eager else None,
           "speedup_eager": v.timing.speedup_eager if v.timing else None,
           "speedup_compiled": v.timing.speedup_compiled if v.timing else None,
           "warnings": list(v.warnings)}
    REPORT.append(row)
    _write_report()
    if v.status == "infra_error" and "of device memory and the device has" in v.message:
        pytest.skip(f"this device is too small for the task: {v.message}")  # a 16 GB card and a 6 GB-a-side task
    assert v.status == "correct", (f"{path.stem}: {v.status}: {v.message}\n"
                                   f"{v.correctness.message if v.correctness else ''}\n{v.compiler_log[-3000:]}")


def _write_report() -> None:
    out = os.environ.get("KLSP_FIXTURE_REPORT")
    if out:
        Path(out).write_text(json.dumps(REPORT, indent=2))
