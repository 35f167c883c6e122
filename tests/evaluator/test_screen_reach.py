"""The screen's torch_only_forward warning: it fires only when ModelNew.forward really reaches no extension (or only
C++ that calls ATen operators), whatever shape the candidate gives the path from forward to its kernel."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from evaluator.stages.reach import forward_reach
from evaluator.stages.screen import _Scan, screen

ROOT = Path(__file__).resolve().parents[2]

KERNEL = '''
SRC = r"""
#include <torch/extension.h>
torch::Tensor fused(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* p = xc.data_ptr<float>(); float* q = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) q[i] = p[i] > 0.f ? p[i] : 0.f;
    return out;
}
"""
'''
HEAD = "import functools\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n" \
       "from torch.utils.cpp_extension import load_inline\n" + KERNEL
BUILD = 'load_inline(name="klsp_reach", cpp_sources=SRC, functions=["fused"], verbose=False)'


def src(body: str) -> str:
    return HEAD + textwrap.dedent(body).replace("BUILD", BUILD)


def warned(source: str) -> list[str]:
    return [f.message for f in screen(source) if f.rule == "torch_only_forward"]


# every shape of "forward reaches its extension": no warning
REACHES = {
    "module_ext": """
        ext = BUILD
        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.fused(x)
    """,
    "kernelbench_self_attr": """
        fused_mod = BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.fused_mod = fused_mod
            def forward(self, x):
                return self.fused_mod.fused(x)
    """,
    "built_in_init": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.ext = BUILD
            def forward(self, x):
                return self.ext.fused(x)
    """,
    "function_attr_from_init_local": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                ext = BUILD
                self.fn = ext.fused
            def forward(self, x):
                return self.fn(x)
    """,
    "module_alias_chain": """
        _ext = BUILD
        _mod = _ext
        fused = _mod.fused
        class ModelNew(nn.Module):
            def forward(self, x):
                return fused(x)
    """,
    "helpers_transitive_defined_after_use": """
        class ModelNew(nn.Module):
            def forward(self, x):
                return _outer(x)
        def _outer(x):
            return _inner(x) * 1.0
        def _inner(x):
            return _EXT.fused(x)
        _EXT = BUILD
    """,
    "builder_function": """
        def _build():
            return BUILD
        EXT = _build()
        class ModelNew(nn.Module):
            def forward(self, x):
                return EXT.fused(x)
    """,
    "lru_cache_getter": """
        @functools.lru_cache(maxsize=None)
        def _ext():
            return BUILD
        class ModelNew(nn.Module):
            def forward(self, x):
                return _ext().fused(x)
    """,
    "lazy_global_in_forward": """
        _EXT = None
        def _build():
            return BUILD
        class ModelNew(nn.Module):
            def forward(self, x):
                global _EXT
                if _EXT is None:
                    _EXT = _build()
                return _EXT.fused(x)
    """,
    "lazy_self_attribute": """
        def _build():
            return BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self._ext = None
            def forward(self, x):
                if self._ext is None:
                    self._ext = _build()
                return self._ext.fused(x)
    """,
    "torch_ops_registered": """
        BUILD
        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.ops.klsp_reach.fused(x)
    """,
    "torch_ops_overload_and_alias": """
        BUILD
        _ops = torch.ops.klsp_reach
        class ModelNew(nn.Module):
            def forward(self, x):
                return _ops.fused.default(x)
    """,
    "methods_calling_methods": """
        ext = BUILD
        class ModelNew(nn.Module):
            def forward(self, x):
                return self._epilogue(torch.matmul(x, x))
            def _epilogue(self, y):
                return self._launch(y)
            def _launch(self, y):
                return ext.fused(y)
    """,
    "property": """
        ext = BUILD
        class ModelNew(nn.Module):
            @property
            def kernel(self):
                return ext.fused
            def forward(self, x):
                return self.kernel(x)
    """,
    "lambda_attribute": """
        ext = BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = lambda t: ext.fused(t)
            def forward(self, x):
                return self.act(F.linear(x, x))
    """,
    "inline_lambda": """
        ext = BUILD
        class ModelNew(nn.Module):
            def forward(self, xs):
                return list(map(lambda t: ext.fused(t), xs))
    """,
    "partial": """
        ext = BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = functools.partial(ext.fused)
            def forward(self, x):
                return self.act(x)
    """,
    "autograd_function": """
        ext = BUILD
        class _Fused(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return ext.fused(x)
        class ModelNew(nn.Module):
            def forward(self, x):
                return _Fused.apply(x)
    """,
    "submodule": """
        ext = BUILD
        class Block(nn.Module):
            def forward(self, x):
                return ext.fused(x)
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()
            def forward(self, x):
                return self.block(x)
    """,
    "sequential_of_blocks": """
        ext = BUILD
        class Block(nn.Module):
            def forward(self, x):
                return ext.fused(x)
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Identity(), Block())
            def forward(self, x):
                return self.body(x)
    """,
    "module_list_loop": """
        ext = BUILD
        class Block(nn.Module):
            def forward(self, x):
                return ext.fused(x)
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([Block() for _ in range(2)])
            def forward(self, x):
                for b in self.blocks:
                    x = b(x)
                return x
    """,
    "inherited_forward": """
        ext = BUILD
        class _Base(nn.Module):
            def forward(self, x):
                return ext.fused(x)
        class ModelNew(_Base):
            pass
    """,
    "super_forward": """
        ext = BUILD
        class _Base(nn.Module):
            def forward(self, x):
                return ext.fused(x)
        class ModelNew(_Base):
            def forward(self, x):
                return super().forward(x) + 0.0
    """,
    "aliased_load_inline": """
        from torch.utils.cpp_extension import load_inline as build_ext
        import torch.utils.cpp_extension as cpp_ext
        a = build_ext(name="klsp_a", cpp_sources=SRC, functions=["fused"])
        b = cpp_ext.load_inline(name="klsp_b", cpp_sources=SRC, functions=["fused"])
        class ModelNew(nn.Module):
            def forward(self, x):
                return b.fused(x)
    """,
    "dict_of_extensions": """
        _EXTS = {}
        _EXTS["relu"] = BUILD
        class ModelNew(nn.Module):
            def forward(self, x):
                return _EXTS["relu"].fused(x)
    """,
    "tuple_unpacking": """
        ext_a, ext_b = BUILD, BUILD
        class ModelNew(nn.Module):
            def forward(self, x):
                return ext_b.fused(x)
    """,
    "getattr_constant_and_computed": """
        ext = BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.name = "fused"
            def forward(self, x):
                return getattr(ext, self.name)(getattr(ext, "fused")(x))
    """,
    "class_attribute": """
        ext = BUILD
        class ModelNew(nn.Module):
            _fn = staticmethod(ext.fused)
            def forward(self, x):
                return self._fn(x)
    """,
    "import_built_module": """
        BUILD
        from klsp_reach import fused as _fused
        class ModelNew(nn.Module):
            def forward(self, x):
                return _fused(x)
    """,
    "ctypes_library": """
        import ctypes
        lib = ctypes.CDLL("./libfused.so")
        class ModelNew(nn.Module):
            def forward(self, x):
                lib.fused(x.data_ptr(), x.numel())
                return x
    """,
    "linear_then_fused_epilogue": """
        ext = BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(8, 8)
            def forward(self, x):
                return ext.fused(F.linear(x, self.linear.weight, self.linear.bias))
    """,
    "mm_out_then_in_place_epilogue_on_side_stream": """
        ext = BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.s = torch.cuda.Stream()
            def forward(self, x, w):
                out = torch.empty(x.shape[0], w.shape[1])
                torch.mm(x, w, out=out)
                with torch.cuda.stream(self.s):
                    ext.fused(out)
                torch.cuda.current_stream().wait_stream(self.s)
                return out
    """,
    "name_defined_elsewhere": """
        class ModelNew(nn.Module):
            def forward(self, x):
                return kit.fused(x)  # a kit placeholder: composed in at test time
    """,
    "star_import": """
        from klsp_kernels import *
        class ModelNew(nn.Module):
            def forward(self, x):
                return fused(x)
    """,
}

# forward is pure PyTorch, however much extension code sits around it: a warning
PURE = {
    "no_extension": """
        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.relu(x)
    """,
    "extension_stored_not_used": """
        ext = BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.ext = ext
                self.fn = ext.fused
            def forward(self, x):
                return torch.relu(x * 2.0)
    """,
    "unused_helper_reaches_the_extension": """
        ext = BUILD
        def _unused(x):
            return ext.fused(x)
        def _used(x):
            return F.gelu(x)
        class ModelNew(nn.Module):
            def forward(self, x):
                return _used(x)
    """,
    "methods_calling_methods_pure": """
        ext = BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.ext = ext
            def forward(self, x):
                return self._a(x)
            def _a(self, x):
                return self._b(x) + 1
            def _b(self, x):
                return torch.sigmoid(x)
            def _never(self, x):
                return self.ext.fused(x)
    """,
    "aten_torch_ops": """
        ext = BUILD
        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.ops.aten.relu.default(x)
    """,
    "pure_lambda_and_partial": """
        ext = BUILD
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = lambda t: torch.tanh(t)
                self.scale = functools.partial(torch.mul, other=2.0)
            def forward(self, x):
                return self.scale(self.act(x))
    """,
    "pure_submodule": """
        ext = BUILD
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ext = ext
            def forward(self, x):
                return torch.relu(x)
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()
            def forward(self, x):
                return self.block(x)
    """,
    "local_shadows_the_extension_name": """
        ext = BUILD
        class ModelNew(nn.Module):
            def forward(self, x):
                ext = torch.relu(x)
                return ext * 2
    """,
}


@pytest.mark.parametrize("name", sorted(REACHES))
def test_forward_reaching_its_extension_is_not_warned(name):
    source = src(REACHES[name])
    ast.parse(source)
    assert warned(source) == [], name


@pytest.mark.parametrize("name", sorted(PURE))
def test_pure_pytorch_forward_is_warned(name):
    source = src(PURE[name])
    msgs = warned(source)
    assert len(msgs) == 1, (name, msgs)
    assert "nothing forward reaches comes from an extension" in msgs[0]
    line = next(f.line for f in screen(source) if f.rule == "torch_only_forward")
    assert source.splitlines()[line - 1].strip().startswith("def forward"), line


def _cpp_case(cpp: str, forward: str = "return ext.entry(x)", build: str = "") -> str:
    build = build or 'ext = load_inline(name="klsp_cpp", cpp_sources=CPP, functions=["entry"])'
    return ("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
            f'CPP = r"""\n{textwrap.dedent(cpp)}\n"""\n{build}\n'
            f"class ModelNew(nn.Module):\n    def forward(self, x):\n        {forward}\n")


ATEN_ONLY = {
    "direct": """
        #include <torch/extension.h>
        torch::Tensor entry(torch::Tensor x) { return at::relu(at::add(at::mul(x, 2.0), 1.0)); }
    """,
    "through_a_static_helper": """
        #include <torch/extension.h>
        static torch::Tensor check(const torch::Tensor& t) {
            TORCH_CHECK(t.scalar_type() == torch::kFloat32, "float32 only");  // for (;;) in a comment
            return t.contiguous();
        }
        torch::Tensor entry(torch::Tensor x) { auto y = check(x); return torch::relu(y).mul_(2.0); }
    """,
}
CUSTOM = {
    "loop": """
        torch::Tensor entry(torch::Tensor x) {
            auto out = torch::empty_like(x);
            float* q = out.data_ptr<float>();
            for (int64_t i = 0; i < x.numel(); ++i) q[i] = 1.f;
            return out;
        }
    """,
    "aten_gemm_then_own_epilogue": """
        static void epilogue(torch::Tensor y) {
            float* p = y.data_ptr<float>();
            at::parallel_for(0, y.numel(), 4096, [&](int64_t a, int64_t b) { while (a < b) { p[a] *= 2; ++a; } });
        }
        torch::Tensor entry(torch::Tensor x) { auto y = at::matmul(x, x); epilogue(y); return y; }
    """,
    "launcher_defined_elsewhere": """
        extern "C" const char* relu_launch(const float* x, float* y, int64_t n, void* stream);
        torch::Tensor entry(torch::Tensor x) { auto y = torch::empty_like(x); relu_launch(nullptr, nullptr, 0, nullptr); return y; }
    """,
    "cublas": """
        torch::Tensor entry(torch::Tensor x) { auto y = torch::empty_like(x); cublasSgemm(h, a, b); return y; }
    """,
    "macro_hiding_a_loop": """
        #define BODY(n) for (int64_t i = 0; i < n; ++i) q[i] = 0.f
        torch::Tensor entry(torch::Tensor x) { auto y = torch::empty_like(x); BODY(x.numel()); return y; }
    """,
}


@pytest.mark.parametrize("name", sorted(ATEN_ONLY))
def test_aten_only_cpp_wrapper_is_warned(name):
    msgs = warned(_cpp_case(ATEN_ONLY[name]))
    assert len(msgs) == 1 and "(entry) only call ATen operators" in msgs[0], msgs


@pytest.mark.parametrize("name", sorted(CUSTOM))
def test_cpp_doing_its_own_work_is_not_warned(name):
    assert warned(_cpp_case(CUSTOM[name])) == []


def test_aten_only_through_pybind_and_torch_library():
    pybind = """
        torch::Tensor impl(torch::Tensor x) { return at::sigmoid(x); }
        PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("entry", &impl, "entry"); }
    """
    build = 'ext = load_inline(name="klsp_pb", cpp_sources=CPP)'
    assert len(warned(_cpp_case(pybind, build=build))) == 1
    assert warned(_cpp_case(pybind.replace("return at::sigmoid(x);", "for (;;) {} return x;"), build=build)) == []
    # a lambda bound in the module: not looked into, so not warned
    lam = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("entry", [](torch::Tensor x) { return x; }); }'
    assert warned(_cpp_case(lam, build=build)) == []
    lib = """
        torch::Tensor impl(torch::Tensor x) { return at::sigmoid(x); }
        TORCH_LIBRARY(klsp_lib, m) { m.def("entry(Tensor x) -> Tensor", &impl); }
    """
    build = 'load_inline(name="klsp_lib", cpp_sources=CPP, is_python_module=False)'
    msgs = warned(_cpp_case(lib, "return torch.ops.klsp_lib.entry(x)", build))
    assert len(msgs) == 1 and "torch.ops.klsp_lib.entry" in msgs[0], msgs
    custom = lib.replace("return at::sigmoid(x);", "float* p = x.data_ptr<float>(); p[0] = 1; return x;")
    assert warned(_cpp_case(custom, "return torch.ops.klsp_lib.entry(x)", build)) == []


def test_aten_only_needs_every_reached_function_to_be_aten_only():
    cpp = ATEN_ONLY["direct"] + CUSTOM["loop"].replace("entry", "own")
    build = 'ext = load_inline(name="klsp_two", cpp_sources=CPP, functions=["entry", "own"])'
    assert len(warned(_cpp_case(cpp, "return ext.entry(x)", build))) == 1
    assert warned(_cpp_case(cpp, "return ext.own(ext.entry(x))", build)) == []
    # sources the screen cannot read (built at run time): not judged
    unknown = 'ext = load_inline(name="klsp_u", cpp_sources=open("k.cpp").read(), functions=["entry"])'
    assert warned(_cpp_case(ATEN_ONLY["direct"], build=unknown)) == []


def test_no_modelnew_or_no_forward_is_not_judged():
    tree = ast.parse("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    scan = _Scan()
    scan.visit(tree)
    assert forward_reach(tree, scan.dotted) is None
    assert warned("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n") == []


# ---- the repository's corpora ----------------------------------------------------------------------------------
# Candidates that build an extension whose forward still reaches nothing of it, or only ATen-only C++ (read by
# hand). Every other candidate that builds an extension must not be warned; every candidate that builds none must.
PURE_WITH_EXTENSION = {
    "tests/fixtures/adversarial/cpu/no_custom_code.py",  # builds the kit, forward calls torch ops
    "tests/fixtures/adversarial/cpu/aten_ops_wrapper.py",  # kit.aten_sbr: at::relu(at::add(at::mul(...)))
    "tests/fixtures/adversarial/cuda/cu_aten_ops_wrapper.py",  # ckit.aten_sbr: the same on CUDA
    "tests/fixtures/bad/compile_hang_cpp.py",  # scale_bias_relu: torch::relu(x * scale + bias)
    "tests/fixtures/bad/try_except_fallback.py",  # scale_bias_relu: TORCH_CHECK(false) (a stub)
    "tests/fixtures/adversarial/cpu/annotation_numpy_kernel.py",  # builds the kit, forward is numpy in a range
    "tests/fixtures/adversarial/cuda/cu_library_kernel_name_decoy.py",  # present(): returns 1, torch ops do the work
    "tests/fixtures/adversarial/cpu/aten_direct_entry_points.py",  # direct_sbr: at::cpu::clamp_min(at::mul(...))
}
CORPORA = ["tests/fixtures/**/*.py", "tests/generation/kernels/*.py", "examples/**/*.py", "evaluator/examples/*.py",
           "prompts/examples/*.py"]
_BUILDS = re.compile(r"load_inline|cpp_extension|CDLL|TORCH_LIBRARY|torch\.ops\.load_library")


def _composer():
    """The adversarial corpus's composer (a case file holds its trick; its kit is composed in)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests/fixtures/adversarial"))
    import compose

    return compose


def _corpus():
    compose = _composer()
    out = []
    for pattern in CORPORA:
        for p in sorted(ROOT.glob(pattern)):
            rel = p.relative_to(ROOT).as_posix()
            if "/kits/" in rel or "/refs/" in rel:
                continue
            text = p.read_text()
            if "class ModelNew" not in text:
                continue
            try:
                if "/adversarial/" in rel:
                    text = compose.compose(text)
                ast.parse(text)
            except (SyntaxError, ValueError, OSError):
                continue  # the syntax-error fixture, or a case mid-reorganisation
            out.append((rel, text))
    return out


CORPUS = _corpus()


def test_corpus_is_found():
    rels = {r for r, _ in CORPUS}
    assert len(CORPUS) >= 100, len(CORPUS)
    assert PURE_WITH_EXTENSION <= rels, PURE_WITH_EXTENSION - rels
    assert any("/adversarial/cuda/" in r for r in rels) and any("/kernels/" in r for r in rels)


@pytest.mark.parametrize("rel,text", CORPUS, ids=[r for r, _ in CORPUS])
def test_corpus_candidate(rel, text):
    msgs = warned(text)
    if rel in PURE_WITH_EXTENSION or not _BUILDS.search(text):
        assert msgs, f"{rel}: its forward is pure PyTorch, the screen must say so"
    else:
        assert msgs == [], f"{rel}: its forward calls its extension; warned: {msgs} (if this case is a new " \
                           "pure-PyTorch attack, add it to PURE_WITH_EXTENSION)"


def test_pipeline_helpers_kernel_and_aten_wrapper():
    from eval_helpers import CPP_ADD, py_candidate

    assert warned(CPP_ADD) == []
    loop = "for (int64_t i = 0; i < ac.numel(); ++i) po[i] = pa[i] + 2.0f * pb[i];"
    assert loop in CPP_ADD
    wrapper = CPP_ADD.replace(loop, "").replace("return out;", "return at::add(ac, bc, 2.0);")
    wrapper = re.sub(r"\n\s*const float\* pa.*\n.*float\* po = out\.data_ptr<float>\(\);", "", wrapper)
    assert "data_ptr" not in wrapper
    assert len(warned(wrapper)) == 1
    assert len(warned(py_candidate("return args[0] + 2 * args[1]"))) == 1
