"""Baselines: live eager / torch.compile timings on the device at hand (cached in the History), and the shared
H100 numbers, which are shown beside ours for comparison and never used to compute a speedup."""

from __future__ import annotations

import json
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from evaluator.verdict import Verdict

from ..history import History
from ..tasks import Task

BASELINE_NS = "bench.baseline"
H100_FOLDERS = ("H100_Modal", "H100_PCIe_LambdaLabs")
_H100_FILES = {"eager": "baseline_time_torch.json", "compiled": "baseline_time_torch_compile_inductor_default.json"}


def torch_version() -> str:
    """The installed torch's version, read from package metadata (torch itself is not imported)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "unknown"


def identity_candidate(reference_src: str) -> str:
    """A ModelNew that is the reference itself: evaluating it times eager and torch.compile of the task."""
    return (f"{reference_src.rstrip()}\n\n\nclass ModelNew(Model):  # kernel-lsp bench: baseline measurement\n"
            "    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n")


class LiveBaselines:
    """Eager and torch.compile timings per (device name, torch version, task fingerprint), in History kv."""

    def __init__(self, history: History, device: str, torch: str | None = None) -> None:
        self.history = history
        self.device = device
        self.torch = torch or torch_version()

    def key(self, task: Task) -> str:
        return f"{self.device}|{self.torch}|{task.fingerprint}"

    def get(self, task: Task) -> dict[str, Any] | None:
        return self.history.get(BASELINE_NS, self.key(task))

    def record(self, task: Task, verdict: Verdict, how: str) -> bool:
        """Keep the reference timings a verdict carries (the evaluator measures them live in the same run)."""
        t = verdict.timing
        if t is None or t.eager is None:
            return False
        self.history.put(BASELINE_NS, self.key(task), {
            "task": task.name, "device": self.device, "torch": self.torch, "timing_device": t.device,
            "method": t.method, "how": how,
            "eager": asdict(t.eager), "compiled": asdict(t.compiled) if t.compiled else None,
        })
        return True


class ReferenceBaselines:
    """The shared KernelBench timing files (ms on an H100): a rough guide printed beside live numbers."""

    def __init__(self, kernelbench_dir: str | Path | None) -> None:
        self.hardware = ""
        self._data: dict[str, dict[str, Any]] = {}
        if not kernelbench_dir:
            return
        base = Path(kernelbench_dir) / "baseline_timing"
        for folder in H100_FOLDERS:
            files = {k: base / folder / f for k, f in _H100_FILES.items()}
            if all(p.is_file() for p in files.values()):
                try:
                    self._data = {k: json.loads(p.read_text(encoding="utf-8")) for k, p in files.items()}
                except (OSError, ValueError):
                    self._data = {}
                    continue
                self.hardware = folder
                break

    def ms(self, task: Task, kind: str) -> float | None:
        """Mean ms of `kind` ("eager" | "compiled") for a KernelBench task, looked up by its own name only."""
        if task.level is None or kind not in self._data:
            return None
        entry = self._data[kind].get(f"level{task.level}", {}).get(task.name.rsplit("/", 1)[-1] + ".py")
        if not isinstance(entry, dict):
            return None
        mean = entry.get("mean")
        return float(mean) if isinstance(mean, (int, float)) else None

    def hardware_name(self, task: Task) -> str:
        entry = self._data.get("eager", {}).get(f"level{task.level}", {}).get(task.name.rsplit("/", 1)[-1] + ".py")
        return str(entry.get("hardware", "")) if isinstance(entry, dict) else ""
