"""torch's one precompiled header per installation, shared safely: a half-written header left by a killed
builder is never trusted, and no rebuild can start while a candidate's build may read it. The header is built
by a trusted worker only (sandboxed builders see torch's folder read-only). Runs in a fresh interpreter against
a fake torch folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import fcntl, json, pathlib, sys
import torch.utils.cpp_extension as ce

root = pathlib.Path(sys.argv[1])
head = root / "include" / "torch"
head.mkdir(parents=True)
ce._TORCH_PATH = str(root)
seen = []

def fake_build(extra_cflags, extra_include_paths, is_standalone=False):
    seen.append(sorted(p.name for p in head.iterdir()))
    (head / "extension.h.gch").write_text("complete")
    (head / "extension.h.sign").write_text("flags")

ce._check_and_build_extension_h_precompiler_headers = fake_build
from evaluator.shared import pch as build

# a builder was killed mid-way: its mark, a half-written header and a matching signature are left
(head / ".klsp-pch.building").touch()
(head / "extension.h.gch").write_text("half")
(head / "extension.h.sign").write_text("flags")
res = build.build_pch()  # the trusted build: deletes what the dead builder left, then builds

def exclusive_possible():
    with open(head / ".klsp-pch.lock", "a") as other:  # another open file: conflicts like another process
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True

with build.pch_readers_lock():  # a sandboxed builder compiling: no rebuild may start
    during = exclusive_possible()
after = exclusive_possible()
print(json.dumps({"seen": seen, "gch": (head / "extension.h.gch").read_text(), "ok": res["ok"],
                  "mark": (head / ".klsp-pch.building").exists(), "during": during, "after": after}))
'''


def test_half_written_header_is_rebuilt_and_readers_block_rebuilds(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "torch")], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    # the stale header and signature were deleted before the (fake) build ran, under the build mark
    assert out["seen"] == [[".klsp-pch.building", ".klsp-pch.lock"]]
    assert out["gch"] == "complete" and out["mark"] is False and out["ok"] is True
    assert out["during"] is False and out["after"] is True
