"""What a candidate's library imports, read from its ELF dynamic symbol table by the evaluator (binaries.py): the
library work it calls past torch's dispatcher, and whether it registers C++ kernels with torch. Built with g++
from declarations with the signatures torch's headers give (the functions stay undefined: imported)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from evaluator.binaries import direct_library_calls, imports, registered_ops, registers_kernels

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

DECLS = r"""
namespace c10 { struct Scalar { double v; }; }
namespace at {
struct Tensor { void* impl; };
namespace cpu { Tensor clamp_min(const Tensor&, const c10::Scalar&); Tensor& add_(Tensor&, const Tensor&, const c10::Scalar&); }
namespace cuda { void* getCurrentCUDAStream(signed char); Tensor elu_out(Tensor&, const Tensor&);
                 namespace blas { template <typename T> void gemm(char, char, long, T*); } }
namespace native { Tensor mm(const Tensor&, const Tensor&); void resize_output(const Tensor&, long); }
void enableRecordFunction(bool); bool isRecordFunctionEnabled();
}
extern "C" void cblas_sgemm(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
namespace torch { struct CppFunction { void* f; };
  struct Library { Library& _impl(const char*, CppFunction&&, int) &; }; }
"""


def _so(tmp_path: Path, name: str, body: str) -> str:
    src = tmp_path / f"{name}.cpp"
    src.write_text(DECLS + body)
    out = tmp_path / f"lib{name}.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", "-o", str(out), str(src)], check=True, capture_output=True)
    return str(out)


def test_library_work_called_past_the_dispatcher_is_read_from_the_imports(tmp_path: Path) -> None:
    so = _so(tmp_path, "direct", r"""
        at::Tensor f(at::Tensor& y, const at::Tensor& x, float* p) {
            at::cpu::add_(y, x, c10::Scalar{1.0});
            at::cuda::getCurrentCUDAStream(0);          // a utility: not library work
            at::cuda::elu_out(y, x);
            at::cuda::blas::gemm<float>('n', 'n', 4, p);
            at::native::resize_output(x, 4);           // a helper, not an operator's kernel
            at::native::mm(x, x);
            cblas_sgemm(0, 0, 0, 0, 0, 0, 1.f, p, 0, p, 0, 0.f, p, 0);
            return at::cpu::clamp_min(x, c10::Scalar{0.0});
        }""")
    assert any(s.startswith("_ZN2at3cpu") for s in imports(so))
    assert direct_library_calls([so]) == ["at::cpu::add_", "at::cpu::clamp_min", "at::cuda::blas::gemm",
                                          "at::cuda::elu_out", "at::native::mm", "cblas_sgemm"]


def test_code_looked_up_at_run_time_is_named_by_the_lookup(tmp_path: Path) -> None:
    """A binary that finds a function by name (dlopen + dlsym of `at::cpu::clamp_min`'s mangled name) imports
    none of the library's work: the lookups are what it imports, and what is listed."""
    so = _so(tmp_path, "found", r"""
        #include <dlfcn.h>
        using F = at::Tensor (*)(const at::Tensor&, const c10::Scalar&);
        at::Tensor f(const at::Tensor& x) {
            void* lib = dlopen("libtorch_cpu.so", RTLD_NOLOAD | RTLD_LAZY);
            auto g = reinterpret_cast<F>(dlsym(lib, "_ZN2at3cpu9clamp_minERKNS_6TensorERKN3c106ScalarE"));
            return g(x, c10::Scalar{0.0});
        }""")
    assert not any(s.startswith("_ZN2at") for s in imports(so))
    assert direct_library_calls([so]) == ["dlopen", "dlsym"]


def test_switching_the_profilers_recording_off_is_listed(tmp_path: Path) -> None:
    """`at::RecordFunctionGuard guard(false)` (calling at::enableRecordFunction): the operators called under it
    record no event; asking whether recording is on changes nothing."""
    so = _so(tmp_path, "quiet", r"""
        bool f(float* p) { bool was = at::isRecordFunctionEnabled(); at::enableRecordFunction(false); p[0] = 1;
                           at::enableRecordFunction(was); return was; }""")
    assert direct_library_calls([so]) == ["at::enableRecordFunction"]


def test_its_own_loops_import_no_library_work(tmp_path: Path) -> None:
    so = _so(tmp_path, "own", r"""
        void f(float* p, long n) { for (long i = 0; i < n; ++i) p[i] = p[i] > 0 ? p[i] : 0; at::cuda::getCurrentCUDAStream(0); }""")
    assert direct_library_calls([so]) == []


def test_an_operator_is_its_binarys_only_with_a_cpp_kernel_registered(tmp_path: Path) -> None:
    schema = 'static const char* s = "advns\\0sbr(Tensor x) -> Tensor"; const char* keep() { return s; }'
    only = _so(tmp_path, "schema", schema)
    with_kernel = _so(tmp_path, "kernel", schema + r"""
        void reg(torch::Library& m, torch::CppFunction&& f) { m._impl("sbr", static_cast<torch::CppFunction&&>(f), 0); }""")
    assert not registers_kernels(only) and registers_kernels(with_kernel)
    assert registered_ops([only], {"advns::sbr"}) == set()
    assert registered_ops([with_kernel], {"advns::sbr"}) == {"advns::sbr"}
