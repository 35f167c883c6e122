"""Sources and helpers shared by the evaluator's tests (fixtures are in conftest.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from evaluator import EvalSettings

REF_ADD = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + 2 * b

def get_inputs():
    return [torch.rand(64, 128), torch.rand(64, 128)]

def get_init_inputs():
    return []
'''

CPP_ADD = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
torch::Tensor add2(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.sizes() == b.sizes(), "shape mismatch");
    auto ac = a.contiguous(); auto bc = b.contiguous();
    auto out = torch::empty_like(ac);
    const float* pa = ac.data_ptr<float>(); const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < ac.numel(); ++i) po[i] = pa[i] + 2.0f * pb[i];
    return out;
}
"""

ext = load_inline(name="klsp_test_add", cpp_sources=cpp_source, functions=["add2"], use_pch=True,
                  no_implicit_headers=True, verbose=False)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.add2(a, b)
'''

# A launcher of its own called through ctypes on the library load_inline built (no torch headers: the build is a
# link of plain C), the output allocated in Python
CTYPES_ADD = r'''
import ctypes
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <stdint.h>
extern "C" void add2(const float* a, const float* b, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + 2.0f * b[i];
}
extern "C" void touch(float* out, int64_t n) { if (n) out[0] = out[0]; }
"""

lib = ctypes.CDLL(load_inline(name="klsp_test_ctypes_add", cpp_sources=src, is_python_module=False,
                              no_implicit_headers=True, verbose=False))
lib.add2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
lib.touch.argtypes = [ctypes.c_void_p, ctypes.c_int64]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        BODY
        return out
'''
CPP_COMPILE_ERROR = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
torch::Tensor add2(torch::Tensor a, torch::Tensor b) {
    return a + 2 * b   // missing semicolon
}
"""

ext = load_inline(name="klsp_test_broken", cpp_sources=cpp_source, functions=["add2"], use_pch=True,
                  no_implicit_headers=True, verbose=False)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.add2(a, b)
'''


def py_candidate(forward_body: str, extra: str = "", init: str = "") -> str:
    """A pure-PyTorch candidate (no compile) whose forward(self, *args) runs `forward_body`."""
    body = "\n".join("        " + ln for ln in forward_body.strip().splitlines())
    init_body = "\n".join("        " + ln for ln in init.strip().splitlines()) if init.strip() else ""
    return f'''
import torch
import torch.nn as nn
{extra}

class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
{init_body}

    def forward(self, *args):
{body}
'''


def reference(forward_expr: str, inputs: str, init_inputs: str = "[]", params: str = "") -> str:
    """A reference Model whose forward(self, *args) returns `forward_expr`."""
    return f'''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *args):
        return {forward_expr}

def get_inputs():
    return {inputs}

def get_init_inputs():
    return {init_inputs}
'''


def fast_settings(cache_dir: str, **kw) -> EvalSettings:
    base = {"device": "cpu", "cache_dir": cache_dir, "time_compiled": False, "timing_calls": 20,
            "timing_budget_s": 1.0, "warmup_calls": 2, "compile_timeout": 240.0, "run_timeout": 60.0,
            "compile_workers": 2, "warm_workers": 1, "kernel_check": False}
    base.update(kw)
    return EvalSettings(**base)


def proc_children(pid: int) -> list[int]:
    """Live (non-zombie included) processes whose parent is `pid`."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(d.name))
    return out


def pid_exists(pid: int) -> bool:
    """True while the process exists, zombies (dead but not reaped) included."""
    return Path(f"/proc/{pid}").exists()


class Host:
    """What processes on one host share besides the wants (`Board`'s `wall`): their promised memory, and the lock
    under which one of them at a time decides an admission."""

    def __init__(self) -> None:
        self.reserved: dict[int, int] = {}
        self.lock, self.deciding = threading.Lock(), threading.Lock()


class Board:
    """The host-wide board of device memory wanted (`lease.DeviceLease`), as one process sees it: what this process
    posted, what others (the test) say they wait for, and, where several of these share one `wall` (processes on one
    host), what the others posted there and when their waits began."""

    def __init__(self, wall: dict[int, tuple[int, float]] | None = None, pid: int = 0,
                 host: Host | None = None) -> None:
        self.posted: list[int] = []
        self.others = 0
        self.wall, self.pid = wall if wall is not None else {}, pid
        self.host = host if host is not None else Host()

    def reserve(self, pending: int) -> None:
        with self.host.lock:
            if pending > 0:
                self.host.reserved[self.pid] = pending
            else:
                self.host.reserved.pop(self.pid, None)

    def reserved_by_others(self) -> int:
        with self.host.lock:
            return sum(n for p, n in self.host.reserved.items() if p != self.pid)

    def admitting(self) -> threading.Lock:
        return self.host.deciding

    def want(self, need: int, since: float | None = None) -> None:
        self.posted.append(need)
        if need > 0:
            self.wall[self.pid] = (need, since or 0.0)
        else:
            self.wall.pop(self.pid, None)

    def wanted_by_others(self) -> int:
        return self.others + sum(n for p, (n, _) in self.wall.items() if p != self.pid)

    def wanted_before(self, since: float) -> int:
        return sum(n for p, (n, s) in self.wall.items() if p != self.pid and (s, p) < (since, self.pid))
