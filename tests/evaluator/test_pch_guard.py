"""torch's one precompiled header per installation, shared safely: a half-written header left by a killed
build is never trusted, no rebuild can start while a candidate's build may read it, and no candidate's build ever
waits for a rebuild (it compiles without the header meanwhile, and GCC then never opens the header). The header is
built by a trusted worker only (sandboxed builders see torch's folder read-only). Runs in a fresh interpreter
against a fake torch folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PRELUDE = r'''
import fcntl, json, pathlib, sys, threading, time
import torch.utils.cpp_extension as ce

root = pathlib.Path(sys.argv[1])
head = root / "include" / "torch"
head.mkdir(parents=True)
ce._TORCH_PATH = str(root)
seen, builds = [], []
gate = threading.Event()
gate.set()

def fake_torch_check(extra_cflags, extra_include_paths, is_standalone=False):
    """Like torch's: nothing to do when the header is there with a matching signature, else build it (through
    cpp_extension's `subprocess`, as torch does)."""
    gch, sign = head / "extension.h.gch", head / "extension.h.sign"
    if gch.is_file() and sign.is_file() and sign.read_text() == "flags":
        return
    seen.append(sorted(p.name for p in head.iterdir()))
    ce.subprocess.check_output([sys.executable, "-c", "pass", "-x", "c++-header"])
    builds.append(1)
    gate.wait(30)
    gch.write_text("complete")
    sign.write_text("flags")

ce._check_and_build_extension_h_precompiler_headers = fake_torch_check
from evaluator.shared import pch

def exclusive_possible():
    with open(head / ".klsp-pch.lock", "a") as other:  # another open file: conflicts like another process
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True
'''

HALF_WRITTEN = PRELUDE + r'''
# a build was killed mid-way: its mark, a half-written header and a matching signature are left
(head / ".klsp-pch.building").touch()
(head / "extension.h.gch").write_text("half")
(head / "extension.h.sign").write_text("flags")
(head / ".klsp-pch.lock").touch()
with pch.pch_for_build() as state_before:
    pass
res = pch.build_pch()  # the trusted build: deletes what the dead build left, then builds
with pch.pch_readers_lock():  # a reader: no rebuild may start
    during = exclusive_possible()
after = exclusive_possible()
with pch.pch_for_build() as state_after:
    during_use = exclusive_possible()
print(json.dumps({"seen": seen, "gch": (head / "extension.h.gch").read_text(), "ok": res["ok"],
                  "built": res.get("built"), "marks": sorted(p.name for p in head.glob(".klsp-pch.[bw]*")),
                  "during": during, "after": after, "before": state_before, "state": state_after,
                  "during_use": during_use}))
'''

NEVER_WAIT = PRELUDE + r'''
gate.clear()  # the (fake) build of the header takes until the gate opens
t = threading.Thread(target=lambda: out.update(pch.build_pch()))
out = {}
t.start()
while not builds:
    time.sleep(0.01)
t0 = time.perf_counter()
with pch.pch_for_build() as during:  # a candidate's build while the header is being built
    waited = time.perf_counter() - t0
gate.set()
t.join(30)
with pch.pch_for_build() as after:
    pass
# the header is current now: a reader holding it does not delay the trusted check, and nothing is rebuilt
with pch.pch_for_build() as reading:
    t0 = time.perf_counter()
    again = pch.build_pch()
    check_s = time.perf_counter() - t0
from evaluator import messages as M
M.PchReport(**out), M.PchReport(**again)  # what the trusted worker sends: exactly the report's fields
print(json.dumps({"during": during, "waited": waited, "after": after, "built": out.get("built"),
                  "reading": reading, "again": again.get("built"), "check_s": check_s, "builds": len(builds),
                  "marks": sorted(p.name for p in head.glob(".klsp-pch.[bw]*"))}))
'''

UPGRADED = PRELUDE + r'''
# a complete header whose signature torch accepts, made from another torch (upgraded in place since)
(head / ".klsp-pch.lock").touch()
(head / "extension.h.gch").write_text("from the old torch")
(head / "extension.h.sign").write_text("flags")
(head / ".klsp-pch.stamp").write_text("torch 0.0.1 old\\n")
with pch.pch_for_build() as before:
    pass
res = pch.build_pch()
with pch.pch_for_build() as after:
    pass
print(json.dumps({"before": before, "after": after, "built": res.get("built"), "builds": len(builds),
                  "gch": (head / "extension.h.gch").read_text(),
                  "stamp": (head / ".klsp-pch.stamp").read_text() == pch.stamp_text()}))
'''


def _run(script: str, tmp_path: Path) -> dict:
    res = subprocess.run([sys.executable, "-c", script, str(tmp_path / "torch")], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_half_written_header_is_rebuilt_and_readers_block_rebuilds(tmp_path: Path) -> None:
    out = _run(HALF_WRITTEN, tmp_path)
    assert out["before"] == "half-written"  # a builder does not read what the dead build left
    # the stale header and signature were deleted before the (fake) build ran, under the build's marks
    assert out["seen"] == [[".klsp-pch.building", ".klsp-pch.lock", ".klsp-pch.wanted"]]
    assert out["gch"] == "complete" and out["ok"] is True and out["built"] is True
    assert out["marks"] == []
    assert out["during"] is False and out["after"] is True
    assert out["state"] == "use" and out["during_use"] is False  # a builder using the header holds off rebuilds


def test_builders_never_wait_for_a_build_and_a_current_header_is_not_rebuilt(tmp_path: Path) -> None:
    out = _run(NEVER_WAIT, tmp_path)
    assert out["during"] == "being built" and out["waited"] < 1.0
    assert out["after"] == "use" and out["built"] is True and out["marks"] == []
    assert out["reading"] == "use" and out["again"] is False and out["check_s"] < 5.0
    assert out["builds"] == 1


def _gcc() -> str | None:
    cxx = shutil.which("c++") or shutil.which("g++")
    if not cxx:
        return None
    v = subprocess.run([cxx, "-v"], capture_output=True, text=True, check=False)
    return cxx if "gcc version" in (v.stdout + v.stderr) else None


@pytest.mark.skipif(_gcc() is None, reason="needs GCC (precompiled headers are GCC's)")
def test_without_the_header_gcc_never_reads_it_and_the_object_is_the_same(tmp_path: Path) -> None:
    """What a builder does while the header is being written: the forced include makes GCC skip it (a truncated
    header breaks a compile that reads it), and the object is byte for byte the one built with the header."""
    from evaluator.shared.pch import no_pch_flags

    cxx = _gcc()
    assert cxx
    inc = tmp_path / "inc" / "torch"
    inc.mkdir(parents=True)
    (inc / "extension.h").write_text("#pragma once\n#include <vector>\n#include <string>\n"
                                     "inline int klsp_x(std::vector<int> v) { return (int)v.size(); }\n")
    src = tmp_path / "main.cpp"
    src.write_text("#include <torch/extension.h>\nint f() { return klsp_x({1, 2, 3}); }\n")
    flags = ["-std=c++17", "-fPIC", "-I", str(tmp_path / "inc")]

    def cc(out: str, extra: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([cxx, *flags, *extra, "-c", str(src), "-o", str(tmp_path / out)], capture_output=True,
                              text=True, check=False)

    gch = inc / "extension.h.gch"
    subprocess.run([cxx, *flags, "-x", "c++-header", str(inc / "extension.h"), "-o", str(gch)], check=True,
                   capture_output=True)
    used = subprocess.run([cxx, *flags, "-H", "-fsyntax-only", str(src)], capture_output=True, text=True, check=False)
    assert f"! {gch}" in used.stderr  # the header is used when it may be
    assert cc("with.o", []).returncode == 0
    assert cc("without.o", no_pch_flags(tmp_path)).returncode == 0
    assert (tmp_path / "with.o").read_bytes() == (tmp_path / "without.o").read_bytes()
    gch.write_bytes(gch.read_bytes()[:50000])  # half-written
    assert cc("broken.o", []).returncode != 0
    assert cc("without2.o", no_pch_flags(tmp_path)).returncode == 0
    assert (tmp_path / "without2.o").read_bytes() == (tmp_path / "with.o").read_bytes()


DRY_RUN = r'''
import json, os, pathlib, sys
import torch.utils.cpp_extension as ce

root = pathlib.Path(sys.argv[1])
head = root / "include" / "torch"
head.mkdir(parents=True)
(head / "extension.h").write_text("#pragma once\n")
ce._TORCH_PATH = str(root)
real = ce._check_and_build_extension_h_precompiler_headers
from evaluator.shared import pch

def listing():
    return sorted(p.name for p in head.iterdir())

missing = pch._is_current(real, ce)  # no header: torch would build one; the dry run writes nothing
after_missing = listing()
real([], [])  # torch's own build, with the fake compiler: writes the header and its signature
current = pch._is_current(real, ce)
(head / "extension.h.sign").write_text("other flags")
stale = pch._is_current(real, ce)
print(json.dumps({"missing": missing, "after_missing": after_missing, "current": current, "stale": stale,
                  "built": listing()}))
'''


def test_the_dry_check_runs_torchs_own_function_and_never_writes(tmp_path: Path) -> None:
    """build_pch decides "current" with torch's real function, its build command intercepted: a missing or stale
    header reads as not current and nothing is written; one torch itself just built reads as current."""
    fake = tmp_path / "fake-g++"
    fake.write_text("#!/bin/sh\n"
                    'case "$*" in *-v*) echo "COLLECT_GCC=g++" >&2; echo "gcc version 12.2.0" >&2; exit 0;; esac\n'
                    'while [ $# -gt 0 ]; do [ "$1" = -o ] && { echo built > "$2"; exit 0; }; shift; done\nexit 1\n')
    fake.chmod(0o755)
    res = subprocess.run([sys.executable, "-c", DRY_RUN, str(tmp_path / "torch")], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False, env={**os.environ, "CXX": str(fake)})
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["missing"] is False and out["after_missing"] == ["extension.h"]
    assert out["built"] == ["extension.h", "extension.h.gch", "extension.h.sign"]
    assert out["current"] is True and out["stale"] is False


def test_a_header_from_another_torch_is_not_used_and_is_rebuilt(tmp_path: Path) -> None:
    """torch's check compares only the command line and GCC never looks at the headers a precompiled header was
    made of: after an in-place upgrade the old header would be used. The stamp catches it."""
    out = _run(UPGRADED, tmp_path)
    assert out["before"] == "stale" and out["after"] == "use"
    assert out["builds"] == 1 and out["built"] is True and out["gch"] == "complete" and out["stamp"] is True
