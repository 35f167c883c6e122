"""TEST ONLY: a scripted model backend loaded by the server through $KERNEL_LSP_TEST_BACKEND=backend_double:make.

$KERNEL_LSP_TEST_REPLIES is a comma-separated script, one entry per kernel completion (cycled):
  good  - the shared C++ relu2 kernel (one build for the whole test session),
  wrong - a ModelNew that computes the wrong thing in plain PyTorch (nothing to compile),
  prose - no code at all,
  slow  - waits until cancelled (for cancel tests), then returns nothing.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

from lsp_helpers import candidate_source

from kernel_lsp.generation.backends import Completion, approx_tokens

WRONG = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 3.0
'''


def _reply(kind: str, cancel: threading.Event | None) -> str:
    if kind == "good":
        return "Here is the kernel.\n```python\n" + candidate_source() + "```\n"
    if kind == "wrong":
        return "```python\n" + WRONG + "```\n"
    if kind == "slow":
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
            time.sleep(0.02)
        return ""
    return "I would fuse the operators, but I cannot write the code today."


class ScriptedBackend:
    name = "scripted-test-double"

    def __init__(self) -> None:
        script = os.environ.get("KERNEL_LSP_TEST_REPLIES", "good").split(",")
        self._script = itertools.cycle([s.strip() for s in script if s.strip()] or ["good"])
        self._lock = threading.Lock()
        self.calls = 0

    def count_tokens(self, text_or_messages) -> int:
        return approx_tokens(text_or_messages)

    def chat(self, messages, *, max_tokens, temperature, seed, stop=None, cancel=None) -> Completion:
        user = messages[-1]["content"]
        if user.startswith("In one or two sentences"):
            text = "Summary: a scripted kernel."
        elif user.startswith("## Triage"):
            text = "1"
        elif "## Analysis (no code yet)" in user:
            text = "- fuse relu and scale into one pass"
        else:
            with self._lock:
                kind = next(self._script)
                self.calls += 1
            text = _reply(kind, cancel)
            if cancel is not None and cancel.is_set():
                return Completion(text, self.count_tokens(messages), 0, 0.0, "cancelled")
        return Completion(text, self.count_tokens(messages), max(1, len(text) // 4), 0.01, "stop")

    def close(self) -> None:
        pass


def make() -> ScriptedBackend:
    return ScriptedBackend()
