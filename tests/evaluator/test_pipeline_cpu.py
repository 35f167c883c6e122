"""The whole pipeline on the CPU with real C++ (cpp_sources) candidates: compile, cache, verify, time."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
from pathlib import Path

import pytest
from eval_helpers import CPP_ADD, CPP_COMPILE_ERROR, CTYPES_ADD, REF_ADD, py_candidate

from evaluator import Verdict
from evaluator.verdict import STAGES


def test_cpp_candidate_correct_with_stages(ev):
    seen: list[tuple[str, str]] = []
    v = ev.evaluate(REF_ADD, CPP_ADD, on_stage=lambda s, m: seen.append((s, m)))
    assert v.status == "correct", (v.message, v.compiler_log, v.detail)
    names = [s.name for s in v.stages]
    assert names == ["parse", "screen", "compile", "verify", "time"]
    assert all(s.name in STAGES and s.seconds >= 0 for s in v.stages)
    assert v.correctness.passed == v.correctness.trials == 7  # 5 of the task's inputs, signed, wide
    assert "signed" in v.correctness.message
    verify = v.stage("verify").message  # where its seconds went: the first trial apart from the six others
    assert verify.startswith(v.correctness.message + "; seconds: trial 1 ") and ", 6 other(s) " in verify, verify
    assert v.timing.method == "outside-cpu-time" and v.timing.candidate.calls >= 5 and v.timing.batch_calls >= 1
    assert v.timing.checked_calls >= 2 and v.timing.interleaved
    assert any(c.startswith("time(the sandbox's CPU time per request") for c in v.checked), v.checked
    assert any(c.startswith("sandbox:") for c in v.checked + v.not_checked)
    assert v.timing.speedup_eager and v.timing.speedup_eager > 0
    assert {s for s, _ in seen} >= {"parse", "screen", "compile", "verify", "time"}
    assert v.device == "cpu"
    # JSON round trip
    assert Verdict.from_json(v.to_json()).to_dict() == v.to_dict()


def test_second_evaluation_uses_the_build_cache(ev):
    ev.evaluate(REF_ADD, CPP_ADD, time=False)  # built (or cached) by the test above
    t0 = time.perf_counter()
    v = ev.evaluate(REF_ADD, CPP_ADD, time=False)
    wall = time.perf_counter() - t0
    comp = v.stage("compile")
    assert v.status == "correct"
    assert "cached" in comp.message, comp.message
    assert comp.seconds < 5.0 and wall < 15.0
    assert v.stage("time").skipped


def test_a_source_seen_before_needs_no_recorder_until_its_build_is_gone(ev, monkeypatch):
    src = CPP_ADD.replace("klsp_test_add", "klsp_test_add_seen")  # its own extension: its own build folder
    assert ev.evaluate(REF_ADD, src, time=False).status == "correct"
    recorders = ev._recorders
    real_acquire = recorders.acquire

    def no_recorder(*a, **k):
        raise AssertionError("a recorder was started for a source the evaluator already recorded")

    monkeypatch.setattr(recorders, "acquire", no_recorder)
    v = ev.evaluate(REF_ADD, src, time=False)
    assert v.status == "correct", v.message
    assert "cached build" in v.stage("compile").message
    # its library gone from the build cache: the recording is not trusted any more, the source goes through
    # the recorder (and a builder) again
    key = next(c.key for r in ev._recordings._items.values() for c in r.calls if c.name == "klsp_test_add_seen")
    import shutil

    shutil.rmtree(ev.cache.folder(key))
    with pytest.raises(AssertionError, match="already recorded"):
        ev.evaluate(REF_ADD, src, time=False)
    monkeypatch.setattr(recorders, "acquire", real_acquire)
    v = ev.evaluate(REF_ADD, src, time=False)
    assert v.status == "correct" and "built 1 extension" in v.stage("compile").message, v.stage("compile").message


def test_an_evaluation_joins_the_build_started_early_for_its_source(ev, monkeypatch):
    """`prebuild` (a model still writing after its code block): the evaluation of the same source, started while
    that build runs, waits for it and replays its recording: one recorder and one build for both."""
    src = CPP_ADD.replace("klsp_test_add", f"klsp_test_add_early_{time.time_ns()}")  # never built before
    assert ev.evaluate(REF_ADD, CPP_ADD, time=False).status == "correct"  # the evaluator started, spares ready
    recorders = ev._recorders
    real_acquire = recorders.acquire
    taken: list[float] = []

    def counted(*a, **k):
        taken.append(time.monotonic())
        return real_acquire(*a, **k)

    monkeypatch.setattr(recorders, "acquire", counted)
    ended: list[float] = []
    pre = threading.Thread(target=lambda: (ended.append(0.0), ev.prebuild(REF_ADD, src),
                                           ended.__setitem__(0, time.monotonic())))
    pre.start()
    deadline = time.monotonic() + 30
    while src not in ev._prebuilds:  # under way
        assert pre.is_alive() and time.monotonic() < deadline, "the early build never started"
        time.sleep(0.01)
    started = time.monotonic()
    v = ev.evaluate(REF_ADD, src, time=False)
    pre.join(60)
    assert v.status == "correct", v.message
    assert ended[0] > started, "the early build ended before the evaluation began: nothing was joined"
    assert len(taken) == 1, f"{len(taken)} recorders for one source"
    assert "cached build" in v.stage("compile").message, v.stage("compile").message
    assert "built as [C++" in v.stage("compile").message, v.stage("compile").message  # how the early build went
    assert ev.prebuild(REF_ADD, src) == "ok"  # again: the recording answers at once


def test_compile_error_log_has_line_numbers(ev):
    v = ev.evaluate(REF_ADD, CPP_COMPILE_ERROR)
    assert v.status == "compile_error", v.message
    assert "main.cpp:" in v.compiler_log and "error" in v.compiler_log
    assert "[cpp_sources line" in v.compiler_log
    assert len(v.compiler_log) < 4500
    assert v.stage("compile").ok is False


def test_parse_error_stops_early_and_the_screen_only_warns(ev):
    v = ev.evaluate(REF_ADD, "class ModelNew(:\n")
    assert v.status == "parse_error" and "syntax error" in v.message
    assert [s.name for s in v.stages] == ["parse"]
    # valid code is never refused by a pattern: it runs (in the sandbox) and the screen's finding is a warning
    odd = py_candidate("return args[0] + 2 * args[1]", extra="import subprocess\nimport inspect")
    v = ev.evaluate(REF_ADD, odd, time=False)
    assert v.status == "correct", v.message
    assert any(f.rule == "process" and f.severity == "warn" for f in v.findings)


def test_pure_pytorch_candidate_is_correct_and_library_only(kc_ev):
    v = kc_ev.evaluate(REF_ADD, py_candidate("return args[0] + 2 * args[1]"), time=False)
    assert v.status == "correct", (v.message, v.warnings, v.kernel)
    assert v.kernel is not None and v.kernel.finding == "library_only" and v.library_only, v.kernel
    assert "none of its own code ran" in v.kernel.message and "Measured:" in v.kernel.message
    assert "library operators only" in v.message
    assert any(f.rule == "torch_only_forward" for f in v.findings)
    # every figure of the judgement reaches the verdict (none dropped on the way from the device stage)
    assert v.kernel.reference_classes and v.kernel.reference_ms > 0, v.kernel
    assert Verdict.from_json(v.to_json()).kernel == v.kernel


def test_cpp_kernel_is_own_code_and_an_aten_wrapper_is_library_only(kc_ev):
    v = kc_ev.evaluate(REF_ADD, CPP_ADD, time=False)
    assert v.status == "correct", v.message
    assert v.kernel.finding == "own_code" and v.kernel.custom_share > 0.5, v.kernel
    assert "own code" in v.message
    wrapper = CPP_ADD.replace("""    auto out = torch::empty_like(ac);
    const float* pa = ac.data_ptr<float>(); const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < ac.numel(); ++i) po[i] = pa[i] + 2.0f * pb[i];
    return out;""", "    return at::add(ac, bc, 2.0);").replace("klsp_test_add", "klsp_test_add_aten")
    assert "at::add" in wrapper
    big = REF_ADD.replace("64, 128", "512, 1024")  # CPU calls long enough that calling overheads do not count
    v = kc_ev.evaluate(big, wrapper, time=False)
    assert v.status == "correct", v.message
    assert v.kernel.finding == "library_only" and "aten::add" in v.kernel.message, v.kernel


def test_a_kernel_off_the_cpu_for_part_of_its_call_is_still_a_kernel(kc_ev):
    # The profile's events are wall time; the CPU clock is the worker's CPU time, which is less whenever the worker
    # is off the cores (other processes' load, as in best-of-8 on two cores, where 2 of 16 honest candidates were
    # once refused as "tampered": profile 9.3 ms against 7.7 ms of CPU time). A kernel that waits halfway through
    # its own loop makes that deterministic: its profile must be bounded by the evaluator's wall clock, not its CPU
    # time, and the evaluator's sampling must place the wait in its own code (the thread came back there).
    waits = CPP_ADD.replace("#include <torch/extension.h>", "#include <torch/extension.h>\n#include <chrono>\n"
                            "#include <thread>").replace(
        "    for (int64_t i = 0; i < ac.numel(); ++i) po[i] = pa[i] + 2.0f * pb[i];",
        "    const int64_t n = ac.numel(), half = n / 2;\n"
        "    for (int64_t i = 0; i < half; ++i) po[i] = pa[i] + 2.0f * pb[i];\n"
        "    std::this_thread::sleep_for(std::chrono::milliseconds(15));\n"
        "    for (int64_t i = half; i < n; ++i) po[i] = pa[i] + 2.0f * pb[i];"
    ).replace("klsp_test_add", "klsp_test_add_waits")
    assert "sleep_for" in waits and "half" in waits
    big = REF_ADD.replace("64, 128", "2048, 1024")  # each half of the loop runs longer than a sampling period
    v = kc_ev.evaluate(big, waits, time=False)
    assert v.status == "correct", v.message
    assert v.kernel.finding == "own_code", v.kernel
    assert "off the CPU inside its own code" in v.kernel.message, v.kernel.message


def test_wrong_values_are_incorrect_with_location(ev):
    v = ev.evaluate(REF_ADD, py_candidate("out = args[0] + 2 * args[1]\nout[3, 5] += 1.0\nreturn out"), time=False)
    assert v.status == "incorrect"
    assert v.correctness.where == "output[3, 5]"
    assert v.correctness.max_abs_err == pytest.approx(1.0, rel=1e-3)
    assert v.correctness.failed_trial == 0 and "trial 1 of 7" in v.correctness.message
    assert "trial 0" not in v.correctness.message


def test_evaluate_many_and_threads(ev):
    good = py_candidate("return args[0] + 2 * args[1]")
    wrong = py_candidate("return args[0] + args[1]")
    vs = ev.evaluate_many(REF_ADD, [good, wrong, CPP_ADD], time=False)
    assert [v.status for v in vs] == ["correct", "incorrect", "correct"]
    results: list[str] = []

    def worker() -> None:
        results.append(ev.evaluate(REF_ADD, good, time=False).status)

    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert results == ["correct"] * 3


def test_cancel_stops_within_two_seconds(ev):
    slow = py_candidate("import time as _t\n_t.sleep(60)\nreturn args[0] + 2 * args[1]")
    cancel = threading.Event()
    out: list = []
    th = threading.Thread(target=lambda: out.append(ev.evaluate(REF_ADD, slow, cancel=cancel)))
    th.start()
    time.sleep(4.0)  # well into verify
    t0 = time.perf_counter()
    cancel.set()
    th.join(timeout=10)
    assert time.perf_counter() - t0 < 2.0
    assert out and out[0].status == "cancelled"
    # the pool still serves
    assert ev.evaluate(REF_ADD, py_candidate("return args[0] + 2 * args[1]"), time=False).status == "correct"


def test_profile_of_reference(ev):
    p = ev.profile(REF_ADD)
    assert p.ops and p.ops[0].name.startswith("aten::")
    assert 0 < sum(o.share for o in p.ops) <= 1.0001
    assert p.bytes_moved == 3 * 64 * 128 * 4
    assert p.gpu.get("bandwidth_gbs", 0) > 0
    assert p.roofline_ms and p.bound == "memory"


def test_candidate_profile_when_asked(ev):
    v = ev.evaluate(REF_ADD, py_candidate("return args[0] + 2 * args[1]"), profile=True, time=False)
    assert v.status == "correct" and v.profile is not None and v.profile.ops


def test_device_info_cpu(ev):
    assert ev.device_info() == {"name": "cpu"}


def test_cuda_candidate_without_gpu_is_nvcc_checked(ev):
    pytest.importorskip("shutil").which("nvcc") or pytest.skip("no nvcc")
    src = (Path(__file__).resolve().parents[2] / "evaluator" / "examples" / "fast_form_example.py").read_text()
    ref = REF_ADD.replace("a + 2 * b", "torch.relu(a)").replace("def forward(self, a, b)", "def forward(self, a)")
    ref = ref.replace("return [torch.rand(64, 128), torch.rand(64, 128)]", "return [torch.rand(64, 128)]")
    v = ev.evaluate(ref, src)
    assert v.status == "infra_error"
    assert "compiled with nvcc; not run: no CUDA device" in v.message
    assert "verify" in v.not_checked and any("nvcc" in c for c in v.checked)
    broken = src.replace("float v = x[i];", "float v = x[i]")
    v = ev.evaluate(ref, broken)
    assert v.status == "compile_error" and "cuda.cu(" in v.compiler_log and "[cuda_sources line" in v.compiler_log


def test_cli_json_and_exit_codes(cache_dir, tmp_path, capsys):
    from eval_helpers import fast_settings

    from evaluator.cli import run_eval

    ref, good, bad = tmp_path / "ref.py", tmp_path / "good.py", tmp_path / "bad.py"
    ref.write_text(REF_ADD)
    good.write_text(py_candidate("print('noise from the candidate')\nreturn args[0] + 2 * args[1]"))
    bad.write_text(py_candidate("return args[0]"))
    s = fast_settings(cache_dir, warm_workers=0)
    assert run_eval(ref, good, s, as_json=True, profile=False) == 0
    out = capsys.readouterr().out
    d = json.loads(out)  # stdout holds the JSON and nothing else
    assert d["status"] == "correct"
    assert run_eval(ref, bad, s, as_json=False, profile=False) == 1
    text = capsys.readouterr().out
    assert "verdict: INCORRECT" in text and "stages" in text


def test_a_reference_waiting_for_its_profile_is_not_evicted_by_another(ev, monkeypatch):
    """Two tasks profiled at once (a sweep's tasks side by side): the first one's referee waits for the device while
    the second loads. It is held meanwhile: the second's load may not evict it (that killed the first's worker, and
    its task was reported as "Model does not run")."""
    from evaluator.processes import referees as referees_mod

    monkeypatch.setattr(referees_mod, "MAX_REFEREES", 1)  # every load evicts the referees nobody holds
    ref1, ref2 = REF_ADD + "\nTASK = 1\n", REF_ADD + "\nTASK = 2\n"
    key1 = referees_mod.reference_key(ref1)
    got: dict = {}

    def profile_one() -> None:
        try:
            got["profile"] = ev.profile(ref1)
        except Exception as e:  # noqa: BLE001
            got["error"] = e

    with ev._gate.exclusive():  # the device busy (another candidate timed): the profile waits for it
        t = threading.Thread(target=profile_one)
        t.start()
        deadline = time.monotonic() + 120
        while key1 not in ev._referees._kept:
            assert time.monotonic() < deadline and t.is_alive(), got
            time.sleep(0.05)
        time.sleep(0.3)  # it now waits for the device, its referee loaded
        ev.check_reference(ref2)  # the other task's reference loads meanwhile
    t.join(120)
    assert "error" not in got, got.get("error")
    assert got["profile"].ops


def _compiled(src: str, name: str) -> str:
    """CPP_ADD under its own extension name, its forward compiled by torch.compile (the candidate's own kernel
    inside: dynamo loads and compiles in the runner's process)."""
    return src.replace("klsp_test_add", name).replace(
        "    def forward(self, a, b):\n        return ext.add2(a, b)",
        "    @torch.compile(backend=\"eager\")\n    def forward(self, a, b):\n        return ext.add2(a, b) * 1.0")


def test_torch_compile_around_the_candidates_kernel_is_not_tampering(ev):
    """Loading dynamo wraps torch.manual_seed and its first compile patches nn.Module.__init__: torch's own
    replacements, of the very functions they wrap, are not the candidate's tampering."""
    v = ev.evaluate(REF_ADD, _compiled(CPP_ADD, "klsp_test_add_compiled"), time=False)
    assert v.status == "correct", (v.status, v.message)


def test_the_candidates_own_wrapper_of_a_torch_function_is_still_tampering(ev):
    src = _compiled(CPP_ADD, "klsp_test_add_compiled").replace(
        "class ModelNew(", "import functools\n_seed = torch.manual_seed\n"
        "@functools.wraps(_seed)\ndef inner(*a, **k):\n    return _seed(*a, **k)\n"
        "torch.manual_seed = inner\n\nclass ModelNew(")
    v = ev.evaluate(REF_ADD, src, time=False)
    assert v.status == "tampered" and "torch.manual_seed" in v.message, (v.status, v.message)


def test_the_reference_is_compiled_ahead_of_its_first_candidates_timing(cache_dir):
    """With torch.compile's timing on, the reference's compile starts once its profile is taken (while a model
    would write its candidates), not inside the first candidate's time stage; that candidate is timed against it.
    A reference nothing has loaded yet is loaded and compiled in the background from its first candidate's build,
    by a new referee that takes the graphs the first one compiled from the evaluator's shared compile cache."""
    from eval_helpers import fast_settings

    from evaluator import Evaluator

    with Evaluator(fast_settings(str(cache_dir), time_compiled=True, compile_reference_ahead=True)) as e:
        e.profile(REF_ADD)
        h = next(iter(e._referees._kept.values()))
        first = h.key
        deadline = time.monotonic() + 300
        while not (h.compiled or h.compile_error) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert h.compiled, h.compile_error or "not compiled ahead"
        # the reference's other facts follow, ahead of its first candidate too: its roofline and its summary
        while (h.roofline is None or h.summary is None) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert h.roofline is not None and h.summary, (h.roofline, h.summary)
        roofline, summary = h.roofline, h.summary
        # a candidate caught after its timing (a thread left spinning) leaves no figure for the next candidates
        spin = py_candidate("if not _spin:\n    _spin.append(threading.Thread(target=_busy, daemon=True))\n"
                            "    _spin[0].start()\nreturn args[0] + 2 * args[1]",
                            extra="import threading\n_spin = []\n\ndef _busy():\n    x = 0\n    while True:\n"
                                  "        x += 1\n")
        bad = e.evaluate(REF_ADD, spin)
        assert bad.status == "tampered" and bad.timing is not None and bad.timing.compiled, (bad.status, bad.message)
        assert not h.compiled_call_ms, "a tampering candidate's torch.compile figure was kept"
        v = e.evaluate(REF_ADD, py_candidate("return args[0] + 2 * args[1]"))
        assert v.status == "correct", v.message
        assert v.timing is not None and v.timing.speedup_compiled, v.timing
        # torch.compile's figure is the reference's: the next candidate reuses it, and its speedup against it
        assert h.compiled_call_ms, "the first timing kept no figure of torch.compile"
        assert h.roofline is roofline and h.summary is summary  # its candidates asked for neither again
        v2 = e.evaluate(REF_ADD, py_candidate("return args[0] + args[1] * 2"))
        assert v2.status == "correct", v2.message
        assert v2.timing is not None and v2.timing.compiled is not None and v.timing.compiled is not None
        assert (v2.timing.compiled.median_ms, v2.timing.compiled.calls) == (v.timing.compiled.median_ms,
                                                                           v.timing.compiled.calls)
        assert v2.timing.speedup_compiled == v2.timing.compiled.median_ms / v2.timing.candidate.median_ms
        graphs = Path(cache_dir) / ".torch-compile" / "inductor" / "fxgraph"
        compiled = sorted(p.name for p in graphs.rglob("*") if p.is_file())
        assert compiled, f"the referee's compile left nothing in the shared cache {graphs}"
        spec = importlib.util.find_spec("torch._inductor.codecache")
        if spec and spec.origin and "_HEADER_DIR" in Path(spec.origin).read_text():  # inductor's C++ headers too
            assert (graphs.parent / "precompiled_headers").is_dir()
        # a reference whose profile the caller kept from before (nothing has loaded it): a candidate's early build
        # loads it and compiles it, both in the background
        edited = REF_ADD + "\nEDITED = True\n"
        e.prebuild(edited, py_candidate("return args[0] + 2 * args[1]"))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            h = next((h for h in list(e._referees._kept.values()) if h is not None and h.key != first), None)
            if h is not None and (h.compiled or h.compile_error):
                break
            time.sleep(0.2)
        assert h is not None and h.compiled, h and h.compile_error
        # another referee of the same graph (its module edited) took it from the cache: nothing new compiled
        assert sorted(p.name for p in graphs.rglob("*") if p.is_file()) == compiled


def test_a_thread_kept_busy_after_the_calls_is_caught_by_the_idle_check(ev):
    """A thread the candidate starts in its forward and leaves spinning: the sandbox is frozen between requests, and
    the idle check, the one window it runs with nothing asked of it, sees it busy."""
    src = CPP_ADD.replace("klsp_test_add", "klsp_test_add_spin").replace(
        "class ModelNew(", "import threading\n_spin = []\n\ndef _busy():\n    x = 0\n    while True:\n"
        "        x += 1\n\nclass ModelNew(").replace(
        "        return ext.add2(a, b)", "        if not _spin:\n            _spin.append(threading.Thread("
        "target=_busy, daemon=True))\n            _spin[0].start()\n        return ext.add2(a, b)")
    v = ev.evaluate(REF_ADD, src, time=False)
    assert v.status == "tampered" and "kept working after its calls returned" in v.message, (v.status, v.message)


def test_the_idle_check_dilutes_a_burst_and_judges_a_busy_thread_on_its_whole_window():
    from evaluator.stages.device.time import IDLE_CPU_LIMIT, IDLE_CPU_WINDOW_MAX_S, IDLE_CPU_WINDOW_S, idle_rate

    def run(cpu_rate_at):  # cpu_rate_at(t): cores busy at time t since the start (a step function)
        now = [0.0]
        used = [0.0]

        def sleep(dt):
            steps = max(1, round(dt / 0.001))
            for _ in range(steps):
                used[0] += cpu_rate_at(now[0]) * dt / steps
                now[0] += dt / steps

        rate = idle_rate(lambda: used[0], sleep=sleep, clock=lambda: now[0])
        return rate, now[0]

    quiet, waited = run(lambda t: 0.02)
    assert quiet < IDLE_CPU_LIMIT and waited == pytest.approx(IDLE_CPU_WINDOW_S)  # a quiet runner: the short window
    burst, waited = run(lambda t: 1.0 if t < 0.035 else 0.0)  # 35 ms of work, then nothing: over the limit at first
    assert 0.035 / IDLE_CPU_WINDOW_S > IDLE_CPU_LIMIT
    assert burst < IDLE_CPU_LIMIT and waited == pytest.approx(IDLE_CPU_WINDOW_MAX_S)
    busy, _ = run(lambda t: 1.0)
    assert busy == pytest.approx(1.0)
    late, _ = run(lambda t: 0.0 if t < 0.06 else 1.0)  # quiet at first, then a thread kept busy: judged whole
    assert late > IDLE_CPU_LIMIT


def test_the_idle_check_sees_a_busy_thread_on_a_machine_too_loaded_to_give_it_a_core():
    """A thread kept busy that the machine's load leaves a tenth of a core still wants all of it: judged on what
    its threads ran or waited to run (the kernel's schedstat), it is busy; a quiet runner is quiet either way, and
    a burst that ends is diluted as before. What counts is the busiest thread's want, not the sum: the many threads
    of a quiet CUDA process each waking for a moment on a loaded machine wait for a core, and summed those waits
    looked like a busy thread (a valid kernel judged `tampered`, three test groups side by side)."""
    from evaluator.stages.device.time import IDLE_CPU_LIMIT, idle_rate

    def run(ran_at, wanted_at):  # cores run at time t; {thread: core wanted} at time t (step functions)
        now, used, want = [0.0], [0.0], {}

        def sleep(dt):
            steps = max(1, round(dt / 0.001))
            for _ in range(steps):
                used[0] += ran_at(now[0]) * dt / steps
                for tid, rate in wanted_at(now[0]).items():
                    want[tid] = want.get(tid, 0.0) + rate * dt / steps
                now[0] += dt / steps

        return idle_rate(lambda: used[0], sleep=sleep, clock=lambda: now[0], wanted=lambda: dict(want) or {0: 0.0})

    assert run(lambda t: 0.1, lambda t: {1: 1.0}) == pytest.approx(1.0)  # busy, starved of a core by the load
    assert run(lambda t: 0.1, lambda t: {1: 1.0, 2: 0.01}) > IDLE_CPU_LIMIT
    assert run(lambda t: 0.01, lambda t: {1: 0.02}) < IDLE_CPU_LIMIT  # quiet on a loaded machine
    assert run(lambda t: 0.0, lambda t: {1: 1.0 if t < 0.035 else 0.0}) < IDLE_CPU_LIMIT  # a burst that ends
    # twelve threads each waiting 15 % of the window for a core to answer a wake-up: 1.8 cores summed, none busy
    assert run(lambda t: 0.01, lambda t: {tid: 0.15 for tid in range(12)}) < IDLE_CPU_LIMIT
    # a thread that appears in the window and wants a core from then on
    assert run(lambda t: 0.05, lambda t: {1: 0.0, **({7: 1.0} if t >= 0.05 else {})}) > IDLE_CPU_LIMIT


def test_schedstat_counts_a_starved_busy_thread_as_wanting_a_whole_core():
    """Two processes kept busy on one CPU: each runs about half the time and waits the rest; what they wanted
    (run + run-queue wait) is about the wall time each, what they ran about half of it."""
    import subprocess
    import sys

    from evaluator.processes import proctree

    if proctree.wanted_ns([os.getpid()]) is None:
        pytest.skip("no /proc/PID/task/TID/schedstat here")
    cpu = sorted(os.sched_getaffinity(0))[0]
    spin = "import os, time\nos.sched_setaffinity(0, {%d})\nwhile True:\n    pass\n" % cpu
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        time.sleep(0.5)
        pids = [p.pid for p in procs]
        w0, t0 = proctree.wanted_ns(pids), time.monotonic()
        ran0 = sum(_ran_ns(p) for p in pids)
        time.sleep(1.0)
        w1, t1 = proctree.wanted_ns(pids), time.monotonic()
        ran1 = sum(_ran_ns(p) for p in pids)
        assert w0 is not None and w1 is not None
        each = [(w1[t] - w0.get(t, 0)) / 1e9 / (t1 - t0) for t in w1]
        ran = (ran1 - ran0) / 1e9 / (t1 - t0)
        assert all(w > 0.8 for w in each) and sum(each) > 1.6, (each, ran)  # both want their core the whole time
        assert ran < 1.2, (each, ran)  # but share one
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _ran_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


BIG_ADD = REF_ADD.replace("torch.rand(64, 128), torch.rand(64, 128)", "torch.rand(1024, 1024), torch.rand(1024, 1024)")


def test_a_launcher_called_through_ctypes_is_own_code_by_the_evaluators_sampling(cache_dir):
    from eval_helpers import fast_settings

    from evaluator import Evaluator, cpusampler

    if cpusampler.unavailable():
        pytest.skip(f"no sampling here: {cpusampler.unavailable()}")
    own = CTYPES_ADD.replace("BODY", "lib.add2(a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel())")
    lib = CTYPES_ADD.replace("BODY", "torch.add(a, b, alpha=2, out=out)\n        lib.touch(out.data_ptr(), "
                                     "out.numel())").replace("klsp_test_ctypes_add", "klsp_test_ctypes_touch")
    with Evaluator(fast_settings(str(cache_dir), kernel_check=True)) as e:
        v = e.evaluate(BIG_ADD, own, time=False)
        assert v.status == "correct", (v.status, v.message)
        assert v.kernel.finding == "own_code", v.kernel.message
        assert "evaluator's sampling of its threads" in v.kernel.message and "ctypes" in v.kernel.message
        w = e.evaluate(BIG_ADD, lib, time=False)  # the work in torch, a trivial C call beside it
        assert w.status == "correct", (w.status, w.message)
        assert w.kernel.finding == "library_only", w.kernel.message


def test_a_launcher_called_through_ctypes_is_not_checked_where_nothing_can_sample_it(cache_dir, monkeypatch):
    """Without the evaluator's sampling (perf events forbidden), a call through ctypes leaves no trace of its own
    code's time: the finding says so, never that none of its own code ran."""
    from eval_helpers import fast_settings

    from evaluator import Evaluator
    from evaluator.stages.device import kernel

    monkeypatch.setattr(kernel, "_SAMPLING", "perf_event_open: forbidden here")
    own = CTYPES_ADD.replace("BODY", "lib.add2(a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel())")
    with Evaluator(fast_settings(str(cache_dir), kernel_check=True)) as e:
        v = e.evaluate(BIG_ADD, own, time=False)
    assert v.status == "correct", (v.status, v.message)
    assert v.kernel.finding == "not_checked" and "could not be measured" in v.kernel.message, v.kernel.message
