"""The bad-candidate corpus (tests/fixtures/bad/manifest.toml): every case gets its expected verdict, and the
same evaluators keep serving correct verdicts afterwards.

Most cases are C++ or pure-Python candidates against our small CPU references, so CI (no GPU) runs them on a
CPU Evaluator; the CUDA-only ones (needs_gpu) run on a GPU Evaluator when CUDA is present. All cases of one
device share one module-scoped Evaluator; a case with its own settings (e.g. a short compile_timeout) gets an
Evaluator for those settings, kept for the module as well. Set KLSP_CORPUS_REPORT=path for a JSON table.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import check_cuda_sources
import fixturelib

from evaluator import EvalSettings, Evaluator

CASES = fixturelib.load_manifest()
CONTROL_CPU = ("cpu:scale_bias_relu", fixturelib.CPU / "scale_bias_relu_new.py")
CONTROL_GPU = ("cpu:scale_bias_relu", fixturelib.FIXTURES / "controls" / "scale_bias_relu_cuda.py")
SLOW_STATUSES = {"timeout", "compile_timeout", "compile_error", "crashed"}
RESULTS: list[dict] = []


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def _param(case: fixturelib.BadCase):
    marks = []
    if case.needs_gpu:
        marks.append(pytest.mark.gpu)
    if case.needs_nvcc:
        marks.append(pytest.mark.skipif(check_cuda_sources.nvcc_path() is None, reason="nvcc not installed"))
    compiles = "load_inline" in case.source() and not set(case.expect) <= {"parse_error", "rejected"}
    if compiles or set(case.expect) & SLOW_STATUSES:
        marks.append(pytest.mark.slow)
    return pytest.param(case, marks=marks, id=case.id)


def base_settings(device: str, cache_dir: str, **overrides) -> EvalSettings:
    kw = {"device": device, "cache_dir": cache_dir, "compile_timeout": 300.0, "run_timeout": 20.0,
          "time_compiled": False, "timing_calls": 20, "timing_budget_s": 2.0, "warmup_calls": 2,
          "kernel_check": False}
    kw.update(overrides)
    return EvalSettings(**kw)


@pytest.fixture(scope="module")
def build_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    try:
        return request.getfixturevalue("cache_dir")
    except pytest.FixtureLookupError:
        env = os.environ.get("KLSP_TEST_CACHE")
        if env:
            Path(env).mkdir(parents=True, exist_ok=True)
            return env
        return str(tmp_path_factory.mktemp("corpus-builds"))


class Evaluators:
    """One Evaluator per (device, settings overrides), created on first use, closed with the module."""

    def __init__(self, cache_dir: str) -> None:
        self.cache_dir = cache_dir
        self.pool: dict[tuple, Evaluator] = {}

    def get(self, device: str, overrides: dict | None = None) -> Evaluator:
        key = (device, tuple(sorted((overrides or {}).items())))
        if key not in self.pool:
            if device == "cuda" and not has_cuda():
                pytest.skip("needs a CUDA device")
            self.pool[key] = Evaluator(base_settings(device, self.cache_dir, **(overrides or {})))
        return self.pool[key]

    def close(self) -> None:
        for ev in self.pool.values():
            ev.close()


@pytest.fixture(scope="module")
def evaluators(build_cache: str):
    evs = Evaluators(build_cache)
    yield evs
    evs.close()


def processes_matching(token: str) -> list[tuple[int, str]]:
    """Live processes (zombies excluded) whose command line contains `token`."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token in cmd and state != "Z":
            found.append((int(d.name), cmd[:160]))
    return found


def _record(case: fixturelib.BadCase, v) -> None:
    RESULTS.append({"id": case.id, "expect": case.expect, "status": v.status, "message": v.message[:300],
                    "warnings": v.warnings[:3], "findings": [f"{f.severity}:{f.rule}" for f in v.findings],
                    "speedup_eager": v.timing.speedup_eager if v.timing else None})
    out = os.environ.get("KLSP_CORPUS_REPORT")
    if out:
        Path(out).write_text(json.dumps(RESULTS, indent=2))


def test_manifest_is_complete():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert len(CASES) >= 25
    from evaluator.verdict import STATUSES

    for c in CASES:
        assert c.path.is_file(), c.file
        assert c.expect and set(c.expect) <= set(STATUSES), (c.id, c.expect)
        assert "not_a_kernel" not in c.expect, f"{c.id}: the evaluator no longer produces not_a_kernel"
        assert set(c.expect_kernel) <= {"own_code", "library_only", "not_checked"}, (c.id, c.expect_kernel)
        assert c.description, c.id
        kind = c.reference.partition(":")[0]
        assert kind in ("cpu", "kb"), c.reference
        if kind == "cpu":
            assert (fixturelib.CPU / f"{c.reference[4:]}_ref.py").is_file(), c.reference
    on_cpu = [c for c in CASES if not c.needs_gpu]
    assert len(on_cpu) >= 25, "most cases must run in CI (no GPU)"
    files = {p.name for p in fixturelib.BAD.glob("*.py")}
    assert files == {c.file for c in CASES}, f"files without a case or cases without a file: {files ^ {c.file for c in CASES}}"


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_case_gets_expected_verdict(evaluators: Evaluators, case: fixturelib.BadCase):
    ref = fixturelib.reference_source(case.reference)
    if ref is None:
        pytest.skip(f"reference {case.reference} not available")
    if case.must_not_create:
        Path(case.must_not_create).unlink(missing_ok=True)
    ev = evaluators.get("cuda" if case.needs_gpu else "cpu", case.settings)
    v = ev.evaluate(ref, case.source(), time=case.time)
    _record(case, v)
    detail = (f"{case.id}: got {v.status!r} ({v.message}); expected {case.expect}\n"
              f"findings: {[(f.rule, f.severity) for f in v.findings]}\nwarnings: {v.warnings}\n"
              f"stages: {[(s.name, s.ok, s.message[:120]) for s in v.stages]}")
    assert v.status in case.expect, detail
    if v.status == "correct" and case.expect_kernel:
        finding = v.kernel.finding if v.kernel else None
        assert finding in case.expect_kernel, f"kernel finding {finding!r}, expected {case.expect_kernel}\n{detail}"
    if case.expect_warning:
        assert v.warnings or any(f.severity == "warn" for f in v.findings), f"expected a warning\n{detail}"
    if case.expect_log:
        assert v.compiler_log.strip(), f"expected a compiler log\n{detail}"
        assert any(ch.isdigit() for ch in v.compiler_log), "the compiler log should carry line numbers"
    if case.must_not_create:
        assert not Path(case.must_not_create).exists(), f"{case.must_not_create} was written"
    if case.no_leftover_processes:
        deadline = time.monotonic() + 10.0
        left = processes_matching(case.no_leftover_processes)
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = processes_matching(case.no_leftover_processes)
        for pid, _ in left:  # started by this test (through the evaluator): clean up, then fail
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # torch's build lock (FileBaton `lock`) of the killed build must not stay in the shared build cache:
        # every later build of the same source would wait on it until its own compile_timeout.
        stale = [str(p) for p in Path(evaluators.cache_dir).glob(f"**/{case.no_leftover_processes}/lock")]
        problems = ([f"processes outlived the verdict: {left}"] if left else []) + (
            [f"stale build lock left in the build cache: {stale}"] if stale else [])
        assert not problems, "\n".join(problems)
    if case.max_speedup is not None and v.status == "correct" and v.timing and v.timing.speedup_eager is not None:
        assert v.timing.speedup_eager < case.max_speedup, (
            f"speedup {v.timing.speedup_eager:.3g} >= {case.max_speedup}: work on another stream escaped the timer")


@pytest.mark.slow
def test_pool_keeps_serving(evaluators: Evaluators):
    """After the corpus (crashes, timeouts, hangs, illegal addresses), every evaluator it used still works."""
    devices = {device for device, _ in evaluators.pool} or {"cpu"}
    for device in sorted(devices):  # default settings first: they build the control (cold builds need time)
        evaluators.get(device)
    for (device, _), ev in sorted(evaluators.pool.items(), key=lambda kv: (kv[0][0], len(kv[0][1]))):
        ref_name, cand = CONTROL_GPU if device == "cuda" else CONTROL_CPU
        v = ev.evaluate(fixturelib.reference_source(ref_name), cand.read_text(), time=False)
        assert v.status == "correct", f"{device} evaluator after the corpus: {v.status}: {v.message}"
