"""A host unit's object shared by extensions whose host code is the same (a new kernel behind a wrapper already
built): the key covers what reaches that compile and nothing else, the object does not depend on its folder, a host
unit that read another file of its own is never shared, and an evaluator reuses it (the compile stage says so)."""

from __future__ import annotations

import ctypes
import shutil
import uuid
from pathlib import Path

import pytest
from eval_helpers import CPP_ADD, REF_ADD

from evaluator.sandboxed import build
from evaluator.shared.buildkey import HOST_KEY, host_key, normalise
from evaluator.stages.compile import BuildCache

needs_tools = pytest.mark.skipif(shutil.which("ninja") is None or shutil.which("c++") is None,
                                 reason="needs ninja and a C++ compiler")


def _call(**kw) -> dict:
    base = {"name": "hx", "cpp_sources": "int f() { return 41; }", "cuda_sources": "__global__ void k() {}",
            "functions": ["f"], "use_pch": True, "no_implicit_headers": True}
    return normalise(**{**base, **kw})


def test_the_key_covers_the_host_compile_and_nothing_of_the_kernels_or_the_link() -> None:
    k = host_key(_call(), "salt")
    assert k and HOST_KEY.fullmatch(k)
    assert host_key(_call(cuda_sources="__global__ void other() {}"), "salt") == k
    assert host_key(_call(extra_cuda_cflags=["-O3"], extra_ldflags=["-lm"]), "salt") == k
    for changed in (dict(cpp_sources="int f() { return 42; }"), dict(name="hy"), dict(functions=["f", "g"]),
                    dict(extra_cflags=["-O2"]), dict(cuda_sources=None), dict(use_pch=False),
                    dict(no_implicit_headers=False), dict(with_pytorch_error_handling=False)):
        assert host_key(_call(**changed), "salt") != k, changed
    assert host_key(_call(), "other salt") != k
    # flags that could make the compile read what the key does not cover: never shared
    for flags in (["-include", "x.h"], ["-specs=cuda.cu"], ["-fplugin=./p.so"], ["-Wp,-include,cuda.cu"],
                  ["-I."], ["-iquote", "."], ["@opts"]):
        assert host_key(_call(extra_cflags=flags), "salt") is None, flags
    assert host_key(_call(extra_include_paths=["/tmp"]), "salt") is None
    assert host_key(_call(extra_cflags=["-O3", "-DN=4", "-std=c++20", "-Wall", "-ffast-math", "-march=native"]),
                    "salt")


@pytest.fixture
def builder(monkeypatch) -> None:
    """This process as a builder: build, never load, never touch torch's precompiled header."""
    import torch.utils.cpp_extension as ce

    monkeypatch.setattr(ce, "_check_and_build_extension_h_precompiler_headers", lambda *a, **k: None)
    monkeypatch.setattr(ce, "remove_extension_h_precompiler_headers", lambda: None)
    monkeypatch.setattr(ce, "_import_module_from_library", lambda *a, **k: None)
    monkeypatch.setattr(ce.JIT_EXTENSION_VERSIONER, "entries", {})


def _load_inline(call: dict, out: Path, shared: build.HostObjects) -> dict:
    """One build, as a builder process makes it (its first and only: torch numbers a name's rebuilds in a process)."""
    import torch.utils.cpp_extension as ce

    ce.JIT_EXTENSION_VERSIONER.entries.clear()
    return build._load_inline(call, out, "use", shared)


def _plain(cpp: str, name: str = "hx", **kw) -> dict:
    """A torch-free host unit (a plain shared library): the same machinery, a compile of a fraction of a second."""
    return normalise(name=name, cpp_sources=cpp, functions=None, is_python_module=False, no_implicit_headers=True,
                     **kw)


def _open(lib: str) -> ctypes.CDLL:
    so = ctypes.CDLL(lib)
    so.where.restype = ctypes.c_char_p
    return so


WHERE = 'extern "C" const char* where() { return __FILE__; }\nextern "C" int f() { return 41; }\n'


@needs_tools
def test_the_object_is_the_same_in_any_folder_and_reused_behind_a_new_link(tmp_path: Path, builder) -> None:
    cache = BuildCache(str(tmp_path / "cache"))
    shared = build.HostObjects(str(cache.host_folder()), "salt")
    a = _load_inline(_plain(WHERE), tmp_path / "a", shared)
    b = _load_inline(_plain(WHERE), tmp_path / "b", shared)
    assert a["ok"] and b["ok"] and a["host_key"] == b["host_key"]
    assert Path(a["host_object"]).read_bytes() == Path(b["host_object"]).read_bytes()  # no folder in it
    assert _open(a["library"]).where().decode() == "main.cpp"  # __FILE__ relative to the build folder

    cache.store_host(a["host_key"], a["host_object"], str(tmp_path / "a"))
    nonce = uuid.uuid4().hex[:8]
    c = _load_inline(_plain(WHERE, extra_ldflags=[f"-Wl,--defsym=klsp_{nonce}=0"]), tmp_path / "c", shared)
    assert c["ok"] and c["phases"].get("host_reused") and "host" not in c["phases"], c
    assert "host_key" not in c  # nothing new to keep
    assert "host reused" in build._phase_note(c["phases"])
    lib = _open(c["library"])
    assert lib.f() == 41 and lib.where().decode() == "main.cpp"

    # a host unit that differs gets its own compile
    d = _load_inline(_plain(WHERE.replace("41", "43")), tmp_path / "d", shared)
    assert d["ok"] and not d["phases"].get("host_reused") and ctypes.CDLL(d["library"]).f() == 43


@needs_tools
def test_a_shared_object_that_will_not_link_is_built_again_whole(tmp_path: Path, builder) -> None:
    """A kept object that is broken (ours, never the candidate's) costs a whole build, not a compile error; and a
    second build of one name in one builder keeps the name (torch would number it `hx_v1`)."""
    cache = BuildCache(str(tmp_path / "cache"))
    shared = build.HostObjects(str(cache.host_folder()), "salt")
    key = shared.key(_plain(WHERE))
    assert key
    (cache.host_folder() / f"{key}.o").write_bytes(b"not an object file")
    r = build._load_inline(_plain(WHERE), tmp_path / "a", "use", shared)
    assert r["ok"] and not r["phases"].get("host_reused"), r
    assert Path(r["library"]).parent == tmp_path / "a" / "whole" and _open(r["library"]).f() == 41
    assert r["host_key"] == key  # the whole build's object takes the broken one's place
    cache.store_host(r["host_key"], r["host_object"], str(tmp_path / "a"))
    again = build._load_inline(_plain(WHERE, extra_ldflags=["-Wl,-O1"]), tmp_path / "b", "use", shared)
    assert again["ok"] and again["phases"].get("host_reused") and _open(again["library"]).f() == 41


@needs_tools
def test_a_host_unit_that_read_another_file_is_never_shared(tmp_path: Path, builder) -> None:
    inc = tmp_path / "value.h"
    inc.write_text("#define VALUE 41\n")
    shared = build.HostObjects(str(BuildCache(str(tmp_path / "cache")).host_folder()), "salt")
    r = _load_inline(_plain(f'#include "{inc}"\nextern "C" int f() {{ return VALUE; }}\n'), tmp_path / "a", shared)
    assert r["ok"] and "host_key" not in r  # its object depends on value.h, which no key covers


def test_the_evaluator_keeps_only_a_file_of_the_builders_own_folder(tmp_path: Path) -> None:
    cache = BuildCache(str(tmp_path / "cache"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "main.o").write_bytes(b"obj")
    (tmp_path / "elsewhere.o").write_bytes(b"not the builder's")
    (tmp_path / "b" / "link.o").symlink_to(tmp_path / "elsewhere.o")
    key = "h" + "0" * 24
    cache.store_host("../escape", str(tmp_path / "b" / "main.o"), str(tmp_path / "b"))
    cache.store_host(key, str(tmp_path / "elsewhere.o"), str(tmp_path / "b"))
    cache.store_host(key, str(tmp_path / "b" / "link.o"), str(tmp_path / "b"))
    assert list(cache.host_folder().iterdir()) == []
    cache.store_host(key, str(tmp_path / "b" / "main.o"), str(tmp_path / "b"))
    assert (cache.host_folder() / f"{key}.o").read_bytes() == b"obj"


def test_a_new_link_of_a_wrapper_already_built_compiles_no_host_code(ev) -> None:
    """Two candidates with the same torch wrapper and different links (unique each run): the first compiles its host
    unit (or finds it kept from an earlier run), the second reuses that object, and both are correct."""
    def variant() -> str:
        flag = f"extra_ldflags=['-Wl,--defsym=klsp_{uuid.uuid4().hex[:10]}=0'], verbose=False)"
        return CPP_ADD.replace("verbose=False)", flag)

    first = ev.evaluate(REF_ADD, variant(), time=False)
    assert first.status == "correct", (first.message, first.compiler_log)
    second = ev.evaluate(REF_ADD, variant(), time=False)
    assert second.status == "correct", (second.message, second.compiler_log)
    msg = second.stage("compile").message
    assert "host reused" in msg, msg


def test_a_host_unit_being_built_is_waited_for_not_built_again(tmp_path: Path) -> None:
    """Builds of one wrapper started together: the first compiles its host unit, the others wait for its object;
    one that kept no object hands the turn on; a key of another form, a cancel or the bound: compile your own."""
    import threading
    import time

    cache = BuildCache(str(tmp_path / "cache"))
    key = "h" + "1" * 24
    first, second, third = object(), object(), object()
    assert cache.host_turn(key, first) is False  # nothing kept, nobody building it: first compiles it
    assert cache.host_turn(key, first) is False  # (asked again by its own build: still its turn)
    got: dict[str, object] = {}

    def ask(name: str, build: object) -> None:
        t0 = time.monotonic()
        got[name] = (cache.host_turn(key, build), time.monotonic() - t0)

    waiters = [threading.Thread(target=ask, args=(n, b)) for n, b in (("second", second), ("third", third))]
    for t in waiters:
        t.start()
    time.sleep(0.6)
    assert not got  # both wait while the first builds
    (cache.host_folder() / f"{key}.o").write_bytes(b"obj")
    cache.host_done(first)
    for t in waiters:
        t.join(10)
    assert got["second"][0] is True and got["third"][0] is True and min(w for _, w in got.values()) >= 0.5

    # a build that ends without keeping an object: the next one waiting gets the turn, the one after waits for it
    other = "h" + "2" * 24
    assert cache.host_turn(other, first) is False
    res: list[bool] = []
    t = threading.Thread(target=lambda: res.append(cache.host_turn(other, second)))
    t.start()
    time.sleep(0.3)
    cache.host_done(first)
    t.join(10)
    assert res == [False]  # its own compile now, and the others wait for it
    assert cache.host_turn(other, third, wait_s=0.3) is False  # (past the bound: compile your own)
    cancel = threading.Event()
    cancel.set()
    assert cache.host_turn(other, third, cancel) is False
    assert cache.host_turn("../" + other, third) is False


def test_one_builds_waits_for_host_units_share_one_bound(tmp_path: Path) -> None:
    """A build that lacks several host units others are compiling waits for them all within one bound, not one
    bound each (the builder's timeout is extended by every wait)."""
    import time

    from evaluator.stages.compile import HostTurns

    cache = BuildCache(str(tmp_path / "cache"))
    keys = ["h" + c * 24 for c in "345"]
    other = object()
    for k in keys:
        assert cache.host_turn(k, other) is False  # another build compiles all three, and never ends
    turns = HostTurns(cache, None, wait_s=1.0)
    t0 = time.monotonic()
    assert [turns.ask(k) for k in keys] == [False, False, False]  # each: compile your own
    assert 0.95 <= time.monotonic() - t0 < 2.5  # the first waited out the bound, the others nothing (not 3 s)
    cache.host_done(other)
    assert cache.host_turn(keys[0], turns) is False  # its own turn now (it compiles it)


def test_candidates_of_one_wrapper_built_together_compile_its_host_code_once(ev) -> None:
    """Best-of-n samples that differ only in their link, evaluated together: one compiles the host unit (its name
    unique to this run, so no earlier run kept it), every other one reuses it, waiting for it where it was still
    being built; all correct."""
    name = f"klsp_hx_{uuid.uuid4().hex[:8]}"

    def variant(i: int) -> str:
        return CPP_ADD.replace('name="klsp_test_add"', f'name="{name}"').replace(
            "verbose=False)", f"extra_ldflags=['-Wl,--defsym=klsp_{name}_{i}=0'], verbose=False)")

    verdicts = ev.evaluate_many(REF_ADD, [variant(i) for i in range(3)], time=False)
    assert [v.status for v in verdicts] == ["correct"] * 3, [(v.message, v.compiler_log) for v in verdicts]
    messages = [v.stage("compile").message for v in verdicts]
    assert sum("host reused" not in m for m in messages) == 1, messages
