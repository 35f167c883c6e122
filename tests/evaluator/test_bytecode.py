"""The workers' bytecode cache: where the installed packages carry no bytecode, the evaluator primes a folder once
(our code only) and every sandboxed worker imports torch and the profiler from it instead of compiling their source
at each start. Here the installation has its bytecode, so `KLSP_BYTECODE=always` stands in for one without."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from eval_helpers import REF_ADD, py_candidate

from evaluator import EvalSettings, Evaluator
from evaluator.processes import bytecode
from evaluator.processes.environment import scrubbed_env


@pytest.fixture(scope="module")
def primed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    cache = str(tmp_path_factory.mktemp("klsp-bytecode"))
    mp = pytest.MonkeyPatch()
    mp.setenv("KLSP_BYTECODE", "always")
    try:
        prefix = bytecode.prime(cache, scrubbed_env({"KLSP_DEVICE": "cpu"}))
    finally:
        mp.undo()
    assert prefix is not None, "priming failed (see the log)"
    return cache, prefix


def test_an_installation_without_bytecode_is_seen(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for rel in bytecode.SAMPLE:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("x = 1\n")
    assert bytecode.missing(site) == list(bytecode.SAMPLE)
    for rel in bytecode.SAMPLE:  # compiled beside their source, as pip does
        subprocess.run([sys.executable, "-m", "py_compile", str(site / rel)], check=True)
    assert bytecode.missing(site) == []
    stale = site / bytecode.SAMPLE[0]
    future = time.time() + 100
    os.utime(stale, (future, future))  # the source changed after its bytecode was written
    assert bytecode.missing(site) == [bytecode.SAMPLE[0]]


def test_a_primed_cache_serves_a_workers_imports(primed: tuple[str, str]) -> None:
    cache, prefix = primed
    env = scrubbed_env({"PYTHONPYCACHEPREFIX": prefix})  # as a worker gets it (PYTHONDONTWRITEBYTECODE set)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    p = subprocess.run([sys.executable, "-v", "-c", "import torch.profiler, torch.utils.cpp_extension, "
                        "evaluator.sandboxed.runner"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    from_cache = [ln for ln in p.stderr.splitlines() if ln.startswith(f"# code object from '{prefix}")]
    names = " ".join(from_cache)
    for mod in ("torch/__init__", "torch/profiler/profiler", "torch/utils/cpp_extension", "evaluator/sandboxed/runner"):
        assert f"{mod}." in names, f"{mod} was not read from the cache"
    # nothing was written by the worker: the cache is the primer's alone
    assert not list(Path(prefix).rglob("*.tmp*"))
    # made once: a second call finds it whole and runs nothing
    os.environ["KLSP_BYTECODE"] = "always"
    try:
        t0 = time.monotonic()
        assert bytecode.prime(cache, {}) == prefix
        assert time.monotonic() - t0 < 1.0
        assert bytecode.ready_prefix(cache) == prefix
    finally:
        del os.environ["KLSP_BYTECODE"]


def test_workers_keep_the_installed_bytecode_unless_asked(primed: tuple[str, str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cache, _ = primed
    monkeypatch.setenv("KLSP_BYTECODE", "never")
    assert bytecode.ready_prefix(cache) is None and bytecode.prime(cache, {}) is None
    if bytecode.missing():
        pytest.skip("this installation carries no bytecode: 'auto' primes here")
    monkeypatch.setenv("KLSP_BYTECODE", "auto")  # this installation has its bytecode: a prefix would hide it
    assert bytecode.ready_prefix(cache) is None and bytecode.prime(cache, {}) is None


def test_the_evaluators_sandboxed_runners_start_from_the_cache(primed: tuple[str, str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cache, prefix = primed
    monkeypatch.setenv("KLSP_BYTECODE", "always")
    with Evaluator(EvalSettings(device="cpu", cache_dir=cache, trials=2, warm_workers=1)) as ev:
        v = ev.evaluate(REF_ADD, py_candidate("return args[0] + 2 * args[1]"), time=False)
        assert v.status == "correct", v.message
        w = ev._runners.acquire()  # a runner as the next verdict gets it: sandboxed, reading the cache
        try:
            r = w.wait_ready()
        finally:
            ev._runners.release(w, tainted=True)
    assert dict(ev._runners.spec.env)["PYTHONPYCACHEPREFIX"] == prefix
    assert r.bytecode == "cache", r
