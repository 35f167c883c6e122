"""Prompt templates as data: every template renders, states the contract, overrides and reload work."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator.verdict import (
    Correctness,
    Profile,
    ProfileOp,
    Stage,
    Timing,
    TimingStats,
    Verdict,
)
from kernel_lsp.generation.context import Attempt, ContextBuilder, Target, trim_log
from kernel_lsp.generation.errors import GenerationError
from kernel_lsp.generation.prompts import TEMPLATES, PromptLibrary
from kernel_lsp.generation.retrieval import builtin_example
from kernel_lsp.tasks import task_from_file

ROOT = Path(__file__).parents[2]
TASK = task_from_file(ROOT / "examples" / "relu_scale.py")
SRC = (Path(__file__).parent / "kernels" / "fast.py").read_text()
PROFILE = Profile(device="NVIDIA H200", total_ms=0.25, ops=[ProfileOp("aten::relu", 0.15, 0.6, 1, "[16, 16384]"),
                                                            ProfileOp("aten::mul", 0.1, 0.4)],
                  flops=5e5, bytes_moved=4e6, roofline_ms=0.002, bound="memory",
                  gpu={"name": "NVIDIA H200", "capability": "9.0", "bandwidth_gbs": 4800})


def builder(lib: PromptLibrary, kind: str = "cuda") -> ContextBuilder:
    target = Target(kind, "NVIDIA H200" if kind == "cuda" else "the CPU")
    return ContextBuilder(lib, TASK, target, history_window=3, count_tokens=lambda m: 1, budget_tokens=10_000)


def attempt(verdict: Verdict | None, error: str = "", n: int = 1) -> Attempt:
    return Attempt(step_id=n, round=1, sample=1, source=SRC if verdict else "", verdict=verdict, error=error,
                   number=n if verdict else None, summary="fused relu and scale")


VERDICTS = {
    "refine_compile": Verdict("compile_error", "compilation failed", stages=[Stage("compile", False)],
                              compiler_log="In file w.cpp:\nw.cpp:14:5: error: expected ';' before 'const'\n"),
    "refine_wrong": Verdict("incorrect", "outputs differ", correctness=Correctness(
        5, 0, 1e-4, 1e-4, 1.5, 0.5, 0, "output[3, 17]", "max abs error 1.5 at output[3, 17]")),
    "refine_speed": Verdict("correct", "ok", timing=Timing("cpu", "perf-counter", TimingStats(0.4, 0.01),
                                                            TimingStats(0.2, 0.01), TimingStats(0.1, 0.01), 0.5, 0.25),
                            profile=PROFILE),
}


@pytest.mark.parametrize("kind", ["cuda", "cpu"])
@pytest.mark.parametrize("name", [t for t in TEMPLATES if t not in ("system", "summarise", "agent_triage",
                                                                      "agent_analysis", "agent_retrieval")])
def test_every_generation_prompt_states_the_contract(name, kind):
    lib = PromptLibrary()
    b = builder(lib, kind)
    focus = None
    if name.startswith("refine"):
        focus = attempt(VERDICTS.get(name), error="your answer holds no code")
    msgs = b.render(name, attempts=[attempt(VERDICTS["refine_wrong"], n=7)], focus=focus, profile=PROFILE,
                    example=builtin_example(lib, kind), examples=[{"title": "t", "source": SRC, "speedup": 1.2}],
                    analysis="- fuse")
    user = msgs[1]["content"]
    assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user"
    for must in ("ModelNew", "load_inline", "```python", "Summary:", "class Model(nn.Module)", "forward"):
        assert must in user, (name, must)
    if kind == "cuda":
        assert "no_implicit_headers=True" in user and "cuda_sources" in user
    else:
        assert "cpp_sources" in user and "no `cuda_sources`" in user
    assert "candidate 7 (round 1): incorrect" in user  # the compact history line
    if name == "agent_generate":
        assert "Similar kernels that passed the oracle before" in user and "## Plan" in user


def test_feedback_prompts_carry_their_figures():
    b = builder(PromptLibrary(), "cpu")
    compile_p = b.render("refine_compile", focus=attempt(VERDICTS["refine_compile"]))[1]["content"]
    assert "expected ';' before 'const'" in compile_p and "failed at compile" in compile_p
    wrong = b.render("refine_wrong", focus=attempt(VERDICTS["refine_wrong"]))[1]["content"]
    assert "max abs error 1.5" in wrong and "0/5 trials passed" in wrong and "output[3, 17]" in wrong
    speed = b.render("refine_speed", focus=attempt(VERDICTS["refine_speed"]))[1]["content"]
    assert "candidate 0.400 ms" in speed and "0.50x" in speed and "aten::relu" in speed
    assert "uncertain" not in speed
    noisy = Verdict.from_dict(VERDICTS["refine_speed"].to_dict())
    noisy.timing.uncertain, noisy.timing.speedup_ci_pct, noisy.timing.noise = True, 25.0, "the machine was busy"
    # this checkout's templates (an editable install elsewhere may map kernel_lsp.prompts to another checkout)
    here = builder(PromptLibrary(Path(__file__).resolve().parents[2] / "prompts"), "cpu")
    speed = here.render("refine_speed", focus=attempt(noisy))[1]["content"]
    assert "These timings are uncertain (the speedup is ± 25 %: the machine was busy)" in speed
    prof = b.render("profile_guided", profile=PROFILE)[1]["content"]
    for must in ("NVIDIA H200", "compute capability 9.0", "4800 GB/s", "memory-bound", "roofline", "aten::mul"):
        assert must in prof
    fmt = b.render("refine_format", focus=attempt(None, error="your answer holds no code"))[1]["content"]
    assert "your answer holds no code" in fmt


def test_workspace_override_and_reload(tmp_path):
    lib = PromptLibrary(tmp_path)
    assert "Output contract" in lib.render("contract", target={"kind": "cpu", "device": "cpu"})
    (tmp_path / "contract.j2").write_text("CUSTOM CONTRACT for {{ target.kind }}")
    assert "Output contract" in lib.render("contract", target={"kind": "cpu"})  # compiled templates stay until reload
    lib.reload()
    assert lib.render("contract", target={"kind": "cpu"}).strip() == "CUSTOM CONTRACT for cpu"
    # includes pick up the override too
    zero = builder(lib, "cpu").render("zero_shot")[1]["content"]
    assert "CUSTOM CONTRACT for cpu" in zero and "Output contract" not in zero


def test_template_errors_are_clear(tmp_path):
    (tmp_path / "zero_shot.j2").write_text("{{ nope.nothing }}")
    with pytest.raises(GenerationError, match="zero_shot.j2"):
        builder(PromptLibrary(tmp_path)).render("zero_shot")
    with pytest.raises(GenerationError, match="not found"):
        PromptLibrary().render("no_such_template")


def test_trim_log_keeps_the_first_errors():
    log = "\n".join([f"note {i}" for i in range(100)] + ["w.cpp:3: error: boom"] + [f"more {i}" for i in range(200)])
    t = trim_log(log)
    assert t.splitlines()[2] == "w.cpp:3: error: boom" and len(t.splitlines()) <= 40


def test_budget_drops_history_first():
    lib = PromptLibrary()
    counts = []

    def count(msgs) -> int:
        n = len(msgs[1]["content"])
        counts.append(n)
        return n

    attempts = [attempt(VERDICTS["refine_wrong"], n=i) for i in range(1, 6)]
    full = ContextBuilder(lib, TASK, Target("cpu", "cpu"), history_window=3, count_tokens=count,
                          budget_tokens=10**9).render("zero_shot", attempts=attempts)
    limit = len(full[1]["content"]) - 10
    small = ContextBuilder(lib, TASK, Target("cpu", "cpu"), history_window=3, count_tokens=count,
                           budget_tokens=limit).render("zero_shot", attempts=attempts)
    assert len(small[1]["content"]) <= limit and "candidate 5" in small[1]["content"]
    assert "candidate 3 (round" not in small[1]["content"]


def test_a_library_only_correct_candidate_is_asked_for_its_own_kernel():
    from evaluator.verdict import KernelCheck
    from kernel_lsp.generation.engine import refine_template

    lib_only = Verdict("correct", "correct (5/5 trials), 0.2 ms, 2.00x eager, library operators only",
                       timing=VERDICTS["refine_speed"].timing,
                       kernel=KernelCheck(finding="library_only", message="library operators do every class of the "
                                          "reference's work (elementwise); its own code is not needed"))
    own = Verdict.from_dict({**lib_only.to_dict(), "kernel": {"finding": "own_code"}})
    assert refine_template(attempt(lib_only)) == "refine_kernel"
    assert refine_template(attempt(own)) == "refine_speed"
    assert refine_template(attempt(Verdict("not_a_kernel", "no custom kernel ran"))) == "refine_kernel"  # older
    here = builder(PromptLibrary(Path(__file__).resolve().parents[2] / "prompts"), "cpu")
    text = here.render("refine_kernel", focus=attempt(lib_only))[1]["content"]
    assert "no custom kernel does the work" in text and "library operators do every class" in text
