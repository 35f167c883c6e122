"""The builder's account of its seconds (from ninja's own log) and its compile without torch's precompiled header
while that is being built (the flags that keep GCC away from the header reach the host compile, and only then)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from evaluator.sandboxed import build


@pytest.mark.skipif(shutil.which("ninja") is None, reason="needs ninja")
def test_phases_come_from_ninjas_log(tmp_path: Path) -> None:
    (tmp_path / "build.ninja").write_text(
        "rule slow\n  command = sleep $secs && touch $out\n"
        "build main.o: slow\n  secs = 0.3\n"
        "build cuda.cuda.o: slow\n  secs = 0.6\n"
        "build ext.so: slow main.o cuda.cuda.o\n  secs = 0.1\n")
    subprocess.run(["ninja", "-j", "2"], cwd=tmp_path, check=True, capture_output=True)
    ph = build.ninja_phases(tmp_path)
    assert set(ph) == {"host", "kernels", "link"}
    assert 0.25 <= ph["host"] < ph["kernels"] and 0.55 <= ph["kernels"] < 3 and 0.05 <= ph["link"] < 2
    note = build._phase_note(ph)
    assert note.startswith("host 0.") and "| kernels 0." in note and ", link 0." in note


def test_host_compile_skips_the_header_only_when_it_may_not_be_read(tmp_path: Path, monkeypatch) -> None:
    import torch.utils.cpp_extension as ce

    seen: list[dict] = []
    monkeypatch.setattr(ce, "load_inline", lambda name, **kw: seen.append(kw))
    call = {"name": "x", "cpp_sources": ["int f();"], "cuda_sources": [], "functions": None,
            "extra_cflags": ["-O2"], "extra_cuda_cflags": [], "extra_ldflags": [], "extra_include_paths": [],
            "with_cuda": None, "is_python_module": True, "with_pytorch_error_handling": True, "use_pch": True,
            "no_implicit_headers": True}
    for state in ("use", "being built", "half-written", "absent"):
        res = build._load_inline(dict(call), tmp_path / state.replace(" ", "-"), state)
        assert res["ok"] is False  # nothing was built (load_inline is a stub here)
    flags = [kw["extra_cflags"] for kw in seen]
    assert flags[0] == ["-O2"]
    for f in flags[1:]:
        assert f[0] == "-include" and f[1].endswith("klsp_no_pch.h") and Path(f[1]).exists() and f[-1] == "-O2"


def test_the_builders_answer_is_a_build_claim(tmp_path: Path, monkeypatch) -> None:
    """What a builder sends is exactly messages.BuildClaim's fields (the wire rejects others); the header's state
    and the phases travel in `path`."""
    import contextlib

    from evaluator import messages as M

    @contextlib.contextmanager
    def being_built():
        yield "being built"

    monkeypatch.setattr(build, "pch_for_build", being_built)
    monkeypatch.setattr(build, "_patch_for_sandbox", lambda: None)
    monkeypatch.setattr(build, "_build", lambda call, out, pch, emit, shared=None: {
        "ok": True, "library": str(out / "x.so"), "path_note": "C++", "phases": {"prep": 0.01, "host": 5.5,
                                                                                  "link": 0.25}})
    call = {"name": "x", "cpp_sources": ["int f();"], "cuda_sources": []}
    res = build.build({"call": call, "build_dir": str(tmp_path)}, lambda *a: None)
    claim = M.BuildClaim(**res)
    assert claim.ok and claim.library.endswith("x.so")
    assert claim.path == ("C++; torch's precompiled header is being built: host code compiled without it; "
                          "host 5.5 s, link 0.2 s")
