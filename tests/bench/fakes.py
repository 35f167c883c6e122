"""A stand-in evaluator for the sweep's mechanics (the real oracle is exercised in test_cli_real / test_ray).

A candidate says what verdict it wants in a comment: ``# fake-verdict: correct 2.0 1.5`` (status, speedup over
eager, speedup over torch.compile), ``# fake-verdict: infra_error``. The reference's own ModelNew (a baseline
measurement) is correct at 1.0×. Every call is counted.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from pathlib import Path

from evaluator.verdict import Profile, ProfileOp, Timing, TimingStats, Verdict

EAGER_MS, COMPILED_MS = 2.0, 1.6


def fake_candidate(status: str, eager: float | None = None, compiled: float | None = None) -> str:
    parts = [status] + ([f"{eager}"] if eager is not None else []) + ([f"{compiled}"] if compiled is not None else [])
    return ("import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    pass\n\n# fake-verdict: "
            + " ".join(parts) + "\n")


class FakeEvaluator:
    def __init__(self, device: str = "Fake GPU 9000") -> None:
        self.device = device
        self.calls: Counter[str] = Counter()  # "candidate" | "baseline"
        self.sources: list[str] = []
        self.closed = False
        self._lock = threading.Lock()

    def device_info(self) -> dict:
        return {"name": self.device, "torch": "2.99-fake"}

    def evaluate(self, ref_src: str, cand_src: str, cancel=None, on_stage=None, profile=False,
                 time=True) -> Verdict:
        baseline = "baseline measurement" in cand_src
        with self._lock:
            self.calls["baseline" if baseline else "candidate"] += 1
            self.sources.append(cand_src)
        if baseline:
            status, se, sc = "correct", 1.0, COMPILED_MS / EAGER_MS
        else:
            m = re.search(r"# fake-verdict: (\w+)(?: ([\d.]+))?(?: ([\d.]+))?", cand_src)
            if not m:
                return Verdict(status="parse_error", message="no fake-verdict marker")
            status = m.group(1)
            se = float(m.group(2)) if m.group(2) else None
            sc = float(m.group(3)) if m.group(3) else None
        if status != "correct":
            return Verdict(status=status, message=f"fake {status}")
        cand_ms = EAGER_MS / se if se else None
        timing = Timing(device=f"cuda:0 ({self.device})", method="fake",
                        candidate=TimingStats(cand_ms, 0.0) if cand_ms else None,
                        eager=TimingStats(EAGER_MS, 0.0), compiled=TimingStats(COMPILED_MS, 0.0),
                        speedup_eager=se, speedup_compiled=sc)
        return Verdict(status="correct", message="fake correct", timing=timing)

    def profile(self, ref_src: str, cancel=None, on_stage=None) -> Profile:
        """The reference runs (the engine checks that before asking the model)."""
        with self._lock:
            self.calls["profile"] += 1
        return Profile(device=self.device, total_ms=EAGER_MS, ops=[ProfileOp("aten::relu", EAGER_MS, 1.0)])

    def close(self) -> None:
        self.closed = True


DATA = Path(__file__).parent / "data"
TASKS = DATA / "tasks"


class ScriptedBackend:
    """A model backend for generation sweeps: every kernel request is answered with `reply` (a fenced ModelNew
    carrying a fake-verdict marker); summaries and other side prompts get a one-liner."""

    name = "scripted-bench"

    def __init__(self, marker: str = "correct 1.5 1.2") -> None:
        self.marker = marker
        self.kernel_calls = 0
        self._lock = threading.Lock()
        self.generating = threading.RLock()  # one answer at a time, as a model in this process writes them

    def count_tokens(self, text_or_messages: object) -> int:
        return len(str(text_or_messages)) // 4 + 1

    def chat(self, messages, *, max_tokens, temperature, seed, stop=None, cancel=None):  # type: ignore[no-untyped-def]
        with self.generating:
            return self._chat(messages)

    def _chat(self, messages):  # type: ignore[no-untyped-def]
        from kernel_lsp.generation.backends import Completion

        user = messages[-1]["content"]
        if user.startswith(("In one or two sentences", "## Triage")) or "## Analysis (no code yet)" in user:
            text = "1" if user.startswith("## Triage") else "Summary: scripted."
        else:
            with self._lock:
                self.kernel_calls += 1
            text = ("```python\nimport torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
                    'ops = load_inline(name="fake_ops", cpp_sources="torch::Tensor f(torch::Tensor x) { return x; }",'
                    ' functions=["f"])\n\n\nclass ModelNew(nn.Module):\n'
                    "    def __init__(self, *args):\n        super().__init__()\n\n"
                    "    def forward(self, *xs):\n        return ops.f(xs[0])\n\n"
                    f"# fake-verdict: {self.marker}\n```\n")
        return Completion(text, self.count_tokens(messages), len(text) // 4, 0.01, "stop")

    def close(self) -> None:
        pass
