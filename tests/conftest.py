"""Shared test helpers: where KernelBench data lives, whether CUDA is present."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _use_this_checkouts_prompts() -> None:
    """`kernel_lsp.prompts` is the top-level prompts/ folder (setup.py maps it). An editable install made from
    another checkout (a git worktree sharing its virtualenv) maps it to that checkout's folder; the tests must
    render this checkout's templates. A no-op where the mapping already points here."""
    import importlib.util
    import sys

    here = REPO / "prompts" / "__init__.py"
    spec = importlib.util.find_spec("kernel_lsp.prompts")
    if spec is not None and spec.origin and Path(spec.origin).resolve() == here.resolve():
        return
    spec = importlib.util.spec_from_file_location("kernel_lsp.prompts", here,
                                                  submodule_search_locations=[str(here.parent)])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kernel_lsp.prompts"] = mod
    spec.loader.exec_module(mod)


_use_this_checkouts_prompts()


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
