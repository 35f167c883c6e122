"""Shared test helpers: where KernelBench data lives, whether CUDA is present."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def kernelbench_dir() -> Path | None:
    env = os.environ.get("KERNELBENCH_DIR")
    for p in ([Path(env)] if env else []) + [REPO.parent / "shared" / "kernelbench"]:
        if (p / "level1.jsonl").is_file():
            return p
    return None


def kernelbench_task(level: int, name_or_id: str | int) -> dict:
    root = kernelbench_dir()
    if root is None:
        pytest.skip("KernelBench data not found (../shared/kernelbench or $KERNELBENCH_DIR)")
    for line in (root / f"level{level}.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["name"] == name_or_id or row["problem_id"] == name_or_id:
            return row
    pytest.skip(f"KernelBench level {level} task {name_or_id} not in the data (held out?)")


def has_cuda() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
