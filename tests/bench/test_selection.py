"""Which tasks a sweep covers, and where their candidate files are found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_lsp.bench.selection import BenchError, find_candidate, parse_ranges, select_tasks, short_name

from .fakes import DATA, TASKS


def test_parse_ranges() -> None:
    assert parse_ranges("1-3,7, 9 - 10") == {1, 2, 3, 7, 9, 10}
    assert parse_ranges(None) is None and parse_ranges(" ") is None
    for bad in ("a", "3-1", "1-2-3"):
        with pytest.raises(BenchError):
            parse_ranges(bad)


def test_folder_of_task_files() -> None:
    tasks = select_tasks(TASKS, None, None)
    assert [t.name for t in tasks] == ["level1/1_add", "level1/2_relu", "level1/3_scale", "level1/4_tanh",
                                       "level2/1_add_relu", "level2/2_double_relu"]
    assert tasks[2].level == 1 and tasks[2].problem_id == 3 and "get_init_inputs" in tasks[2].reference_src
    assert [t.name for t in select_tasks(TASKS, [2], {2})] == ["level2/2_double_relu"]
    with pytest.raises(BenchError, match="no tasks"):
        select_tasks(TASKS, [3], None)
    with pytest.raises(BenchError, match="no such folder"):
        select_tasks(TASKS / "nope", None, None)


def test_flat_folder_of_a_users_modules(tmp_path: Path) -> None:
    (tmp_path / "block.py").write_text(
        "import torch\nimport torch.nn as nn\n\nclass Block(nn.Module):\n    def forward(self, x):\n"
        "        return x * 2\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x + x\n\n"
        "def get_inputs():\n    return [torch.rand(4)]\n\ndef get_init_inputs():\n    return []\n")
    (tmp_path / "helper.py").write_text("X = 1\n")  # not a task: skipped
    tasks = select_tasks(tmp_path, None, None)
    assert [t.name for t in tasks] == ["block"] and tasks[0].level is None and tasks[0].problem_id is None
    assert "Model = Block" in tasks[0].reference_src and "class ModelNew" not in tasks[0].reference_src
    assert select_tasks(tmp_path, None, None)[0].fingerprint == tasks[0].fingerprint
    with pytest.raises(BenchError):
        select_tasks(tmp_path, None, {1})  # ids given: tasks without an id are left out


def test_kernelbench_rows(tmp_path: Path) -> None:
    code = (TASKS / "level1" / "2_relu.py").read_text()
    rows = [{"level": 1, "problem_id": i, "name": f"{i}_Relu_{i}", "code": code} for i in (1, 2, 5)]
    (tmp_path / "level1.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tasks = select_tasks(tmp_path, None, parse_ranges("2-5"))
    assert [t.name for t in tasks] == ["level1/2_Relu_2", "level1/5_Relu_5"]
    assert short_name(tasks[0]) == "2_Relu_2"
    with pytest.raises(BenchError, match="level2.jsonl"):
        select_tasks(tmp_path, [1, 2], None)


def test_find_candidate_layouts(tmp_path: Path) -> None:
    tasks = {t.name: t for t in select_tasks(TASKS, None, None)}
    folder = DATA / "candidates"
    assert find_candidate(folder, tasks["level1/1_add"]) == folder / "level1" / "1_add.py"
    assert find_candidate(folder, tasks["level2/2_double_relu"]) == folder / "2_double_relu.py"  # flat
    assert find_candidate(folder, tasks["level1/4_tanh"]) is None
    # the level folder wins over a flat file of the same name
    (tmp_path / "level2").mkdir()
    (tmp_path / "level2" / "1_add_relu.py").write_text("x")
    (tmp_path / "1_add_relu.py").write_text("y")
    assert find_candidate(tmp_path, tasks["level2/1_add_relu"]) == tmp_path / "level2" / "1_add_relu.py"
