"""Ask the model for what wins: the form of kernel each profile class gets, in the real templates.

GEMM / conv / attention-dominated references: keep the library call, ONE fused custom kernel for the rest, and the
one-shot example shows that form. Memory-bound elementwise / reduction references: a full custom kernel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evaluator.verdict import Profile, ProfileOp
from kernel_lsp.generation.context import ContextBuilder, Target
from kernel_lsp.generation.forms import kernel_form
from kernel_lsp.generation.prompts import PromptLibrary
from kernel_lsp.generation.retrieval import builtin_example
from kernel_lsp.tasks import task_from_file

ROOT = Path(__file__).parents[2]
TASK = task_from_file(ROOT / "examples" / "relu_scale.py")


def prof(*ops: tuple[str, float], bound: str = "") -> Profile:
    total = sum(ms for _, ms in ops)
    return Profile(device="NVIDIA H200", total_ms=total, bound=bound,
                   ops=[ProfileOp(name, ms, ms / total) for name, ms in ops])


PROFILES = {
    # Matmul + Mish + Mish (issue 16's first case): the GEMM dominates
    "gemm": prof(("aten::linear", 0.90), ("aten::mish", 0.05), ("aten::mish", 0.04), ("aten::empty", 0.01),
                 bound="compute"),
    "conv": prof(("aten::conv2d", 0.80), ("aten::relu", 0.12), ("aten::hardswish", 0.08)),
    "elementwise": prof(("aten::relu", 0.6), ("aten::mul", 0.4), bound="memory"),
    "reduction": prof(("aten::softmax", 0.85), ("aten::sum", 0.10), ("aten::empty_like", 0.05), bound="memory"),
    "attention": prof(("aten::scaled_dot_product_attention", 0.85), ("aten::mul", 0.15)),
    # a small GEMM beside heavier elementwise and reduction work
    "mixed": prof(("aten::matmul", 0.30), ("aten::gelu", 0.45), ("aten::sum", 0.25)),
    "matmul_only": prof(("aten::mm", 1.0), bound="compute"),
}
# profile class -> (kind, dominant class, library class kept, the rest to fuse)
EXPECT = {
    "gemm": ("library", "gemm", "gemm", ("mish",)),
    "conv": ("library", "conv", "conv", ("relu", "hardswish")),
    "elementwise": ("custom", "elementwise", "", ("relu", "mul")),
    "reduction": ("custom", "reduction", "", ("softmax", "sum")),
    "attention": ("library", "attention", "attention", ("mul",)),
    "mixed": ("mixed", "elementwise", "gemm", ("gelu", "sum")),
    "matmul_only": ("custom", "gemm", "", ()),
}
KEEP = "do not write your own"
FULL = "write all of `forward` as your own kernel"
ONE = "Write ONE custom kernel for all the rest"


@pytest.mark.parametrize("cls", sorted(PROFILES))
def test_kernel_form_of_each_profile_class(cls):
    f = kernel_form(PROFILES[cls])
    assert f is not None
    assert (f.kind, f.dominant, f.library, f.rest_ops) == EXPECT[cls], f
    assert f.keeps_library == (f.kind in ("library", "mixed"))
    assert abs(sum(f.shares.values()) - 1.0) < 1e-9


def test_kernel_form_edges():
    assert kernel_form(None) is None and kernel_form(Profile()) is None
    assert kernel_form(Profile(ops=[ProfileOp("aten::relu", 0.0, 0.0)])) is None
    # a GEMM under the noise floor does not change the form of elementwise work
    tiny = kernel_form(prof(("aten::mm", 0.01), ("aten::relu", 0.99)))
    assert tiny.kind == "custom" and tiny.dominant == "elementwise"
    # however small the rest, it is the rest: the GEMM stays in the library
    big = kernel_form(prof(("aten::addmm", 0.995), ("aten::relu", 0.005)))
    assert big.kind == "library" and big.rest_ops == ("relu",)
    # shares are read in proportion when the profile lists only its top operators
    top = kernel_form(Profile(ops=[ProfileOp("aten::conv2d", 0.5, 0.45), ProfileOp("aten::relu", 0.1, 0.05)]))
    assert top.kind == "library" and abs(top.library_share - 0.9) < 1e-9


def render(template: str, profile: Profile | None, kind: str, binding: str = "torch", **extra) -> str:
    target = Target(kind, "NVIDIA H200" if kind == "cuda" else "the CPU", binding)
    b = ContextBuilder(PromptLibrary(), TASK, target, history_window=3, count_tokens=lambda m: 1,
                       budget_tokens=10**6)
    return b.render(template, profile=profile, **extra)[1]["content"]


@pytest.mark.parametrize("kind", ["cuda", "cpu"])
@pytest.mark.parametrize("template", ["profile_guided", "agent_generate", "agent_analysis"])
@pytest.mark.parametrize("cls", sorted(PROFILES))
def test_prompt_asks_for_the_form_of_its_profile_class(cls, template, kind):
    text = render(template, PROFILES[cls], kind, analysis="- plan", examples=[])
    what = text[text.index("## What to write"):]
    kind_, _, library, rest = EXPECT[cls]
    if kind_ in ("library", "mixed"):
        assert KEEP in what and f"{ONE} ({', '.join(rest)})" in what and FULL not in what
        names = {"gemm": ("cuBLAS", "MKL/oneDNN"), "conv": ("cuDNN", "oneDNN"),
                 "attention": ("flash attention", "fused attention")}[library]
        assert names[0 if kind == "cuda" else 1] in what
        call = {"gemm": "`torch.matmul`", "conv": "`F.conv2d`", "attention": "`F.scaled_dot_product_attention`"}
        assert call[library] in what
        assert ("your kernel is where the speedup is" in what) == (kind_ == "mixed")
        assert ("NCHW" in what) == (library == "conv")
    elif cls == "matmul_only":
        assert "your kernel has to compute it" in what and KEEP not in what and ONE not in what
    else:
        assert FULL in what and KEEP not in what and ONE not in what
        assert f"memory-bound {cls} work ({', '.join(rest)})" in what
        if cls == "reduction":
            assert ("warp shuffles" if kind == "cuda" else "accumulate in a local variable") in what
    # the old one-size advice ("compute-bound, so use tiling") never contradicts the form
    assert "compute-bound, so use tiling" not in text


def test_no_profile_no_form():
    for template in ("profile_guided", "zero_shot", "agent_generate"):
        text = render(template, None, "cuda", analysis="", examples=[])
        assert "## What to write" not in text
    # a profile without timed operators keeps the generic advice
    text = render("profile_guided", Profile(total_ms=1.0, bound="memory"), "cuda")
    assert "## What to write" not in text and "memory-bound, so fewer passes" in text


@pytest.mark.parametrize("kind", ["cuda", "cpu"])
def test_one_shot_example_shows_the_form(kind):
    lib = PromptLibrary()
    gemm = builtin_example(lib, kind, kernel_form(PROFILES["gemm"]))
    assert "F.linear(x, self.linear.weight)" in gemm["candidate"] and "nn.Linear" in gemm["reference"]
    assert "load_inline" in gemm["candidate"] and "bias" in gemm["summary"]
    for cls in ("conv", "attention", "mixed"):
        assert builtin_example(lib, kind, kernel_form(PROFILES[cls]))["candidate"] == gemm["candidate"]
    for form in (kernel_form(PROFILES["elementwise"]), kernel_form(PROFILES["reduction"]), None):
        ex = builtin_example(lib, kind, form)
        assert "relu_scale" in ex["candidate"] and "F.linear" not in ex["candidate"]
    text = render("one_shot", None, kind, example=gemm)
    assert "## Example" in text and "F.linear(x, self.linear.weight)" in text
    assert ("cuda_sources=cuda_src" in text) == (kind == "cuda")


def test_generation_side_stays_torch_free():
    code = ("import sys\n"
            "import evaluator.opclass, kernel_lsp.generation.forms, kernel_lsp.generation.context\n"
            "import kernel_lsp.generation.retrieval, kernel_lsp.generation.engine\n"
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
            "assert not bad, bad\n"
            "assert evaluator.opclass.op_class('aten::addmm') == 'gemm'\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_kernel_check_uses_the_same_classes():
    from evaluator import opclass, profiles

    assert profiles.op_class is opclass.op_class
    for name, cls in (("aten::addmm", "gemm"), ("aten::conv2d", "conv"), ("aten::softmax", "reduction"),
                      ("aten::relu_", "elementwise"), ("aten::copy_", "data"),
                      ("aten::_scaled_dot_product_flash_attention", "attention"), ("aten::max_pool2d", "pool")):
        assert opclass.op_class(name) == cls


# ---- with the real CPU evaluator -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_evaluator():
    from evaluator import EvalSettings, Evaluator

    ev = Evaluator(EvalSettings(device="cpu", trials=3, timing_calls=10, timing_budget_s=2.0, time_compiled=False,
                                compile_workers=1))
    yield ev
    ev.close()


@pytest.mark.slow
def test_engine_asks_a_gemm_task_for_the_library_form(cpu_evaluator, tmp_path):
    """The reference's real profile on the CPU: Linear + ReLU + scale is GEMM-dominated, relu_scale is not."""
    from kernel_lsp.config import Settings
    from kernel_lsp.generation import Engine
    from kernel_lsp.history import History

    from .doubles import ScriptedBackend

    gemm_task = task_from_file(ROOT / "prompts" / "examples" / "linear_relu_scale_ref.py")
    prose = "I would rather explain GPUs than write code."
    with History(tmp_path / ".kernel-lsp") as history:
        prompts = {}
        for task in (gemm_task, TASK):
            for strategy in ("profile-guided", "one-shot"):
                backend = ScriptedBackend([prose])
                engine = Engine(Settings(), cpu_evaluator, history, backend)
                result = engine.run(task, strategy=strategy, samples=1, rounds=1)
                assert result.state == "done", result.message
                prompts[(task.name, strategy)] = backend.calls[0][-1]["content"]
        assert kernel_form(history.profile(gemm_task.key, gemm_task.fingerprint)).kind == "library"
    g, e = gemm_task.name, TASK.name
    assert KEEP in prompts[(g, "profile-guided")] and "MKL/oneDNN" in prompts[(g, "profile-guided")]
    assert "F.linear(x, self.linear.weight)" in prompts[(g, "one-shot")]
    assert FULL in prompts[(e, "profile-guided")] and KEEP not in prompts[(e, "profile-guided")]
    assert "relu_scale_ext" in prompts[(e, "one-shot")] and "F.linear" not in prompts[(e, "one-shot")]


@pytest.mark.parametrize("kind", ["cuda", "cpu"])
def test_the_ctypes_binding_asks_for_launchers_called_through_ctypes(kind):
    """settings.binding = "ctypes": the contract asks for no torch headers and ctypes calls, and the worked example
    shows that form for both kinds of task; the default asks for the torch wrapper."""
    lib = PromptLibrary()
    for form in (kernel_form(PROFILES["gemm"]), kernel_form(PROFILES["elementwise"])):
        ex = builtin_example(lib, kind, form, "ctypes")
        assert "ctypes.CDLL(load_inline(" in ex["candidate"] and "is_python_module=False" in ex["candidate"]
        assert "torch/extension.h" not in ex["candidate"] and "functions=" not in ex["candidate"]
        assert ("cuda_sources=cuda_src" in ex["candidate"]) == (kind == "cuda")
        assert "torch/extension.h" in builtin_example(lib, kind, form)["candidate"]
    text = render("one_shot", None, kind, "ctypes", example=builtin_example(lib, kind, None, "ctypes"))
    contract = text[text.index("## Output contract"):]
    assert "ctypes form" in contract and "is_python_module=False" in contract and "argtypes" in contract
    plain = render("one_shot", None, kind, example=builtin_example(lib, kind, None))
    assert "ctypes" not in plain[plain.index("## Output contract"):]


def test_the_cuda_ctypes_examples_compile_with_nvcc(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    import check_cuda_sources

    if check_cuda_sources.nvcc_path() is None:
        pytest.skip("nvcc not installed")
    for stem in ("relu_scale", "linear_relu_scale"):
        path = ROOT / "prompts" / "examples" / f"{stem}_cuda_ctypes.py"
        results = check_cuda_sources.check_cuda_file(path, tmp_path)
        assert results and all(r.ok for r in results), [r.log[-2000:] for r in results]


@pytest.mark.slow
@pytest.mark.parametrize("binding", ["", "_ctypes"])
@pytest.mark.parametrize("stem", ["linear_relu_scale", "relu_scale"])
def test_cpu_examples_are_right(cpu_evaluator, stem, binding):
    """The worked examples compute what their references compute (checked by the oracle on fresh inputs)."""
    lib = PromptLibrary()
    v = cpu_evaluator.evaluate(lib.example(f"{stem}_ref.py"), lib.example(f"{stem}_cpu{binding}.py"), time=False)
    assert v.correctness is not None and v.correctness.trials and v.correctness.passed == v.correctness.trials, \
        v.message
    assert not v.findings, v.findings
    assert v.status == "correct", v.message  # the library-GEMM form too: its fused epilogue is its own work
