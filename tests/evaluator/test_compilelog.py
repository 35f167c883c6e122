from evaluator.stages.compilelog import trim

GCC = """[1/2] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=x ... -c /root/.cache/x/main.cpp -o main.o
FAILED: main.o
/root/.cache/kernel-lsp/builds/abc/x/main.cpp: In function 'at::Tensor add2(at::Tensor, at::Tensor)':
/root/.cache/kernel-lsp/builds/abc/x/main.cpp:4:21: error: expected ';' before '}' token
    4 |     return a + 2 * b
      |                     ^
      |                     ;
    5 | }
/root/.cache/kernel-lsp/builds/abc/x/main.cpp:9:1: error: 'foo' was not declared in this scope
ninja: build stopped: subcommand failed.
"""

NVCC = """/tmp/b/x/cuda.cu(17): error: identifier "blockIdxx" is undefined
      int i = blockIdxx.x;
              ^
1 error detected in the compilation of "/tmp/b/x/cuda.cu".
"""


def test_gcc_errors_kept_with_candidate_lines():
    out = trim(GCC, {"main.cpp": 1, "cuda.cu": 3})
    lines = out.splitlines()
    assert lines[0].startswith("main.cpp:4:21: error: expected ';'")
    assert "[cpp_sources line 3]" in lines[0]
    assert "/root/.cache" not in out
    assert any("'foo' was not declared" in ln for ln in lines)
    assert "ninja" not in out


def test_nvcc_errors_annotated():
    out = trim(NVCC, {"cuda.cu": 3})
    assert out.splitlines()[0].startswith('cuda.cu(17): error: identifier "blockIdxx"')
    assert "[cuda_sources line 14]" in out


def test_many_errors_are_cut():
    log = "\n".join(f"/x/main.cpp:{i}:1: error: e{i}" for i in range(1, 30))
    out = trim(log, max_errors=3)
    assert "e1" in out and "e3" in out and "e4" not in out
    assert "26 more errors" in out


def test_no_error_lines_keeps_tail():
    out = trim("something\nld: cannot find -lfoo\n")
    assert "cannot find -lfoo" in out
