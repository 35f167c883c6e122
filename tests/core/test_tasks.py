from pathlib import Path

import pytest

from kernel_lsp.tasks import TaskError, kernelbench_tasks, task_from_file, task_from_source
from tests.conftest import kernelbench_dir

HARNESS = "\ndef get_inputs():\n    return [torch.randn(2, 3)]\n\ndef get_init_inputs():\n    return []\n"
BLOCK = "import torch\nimport torch.nn as nn\n\nclass Block(nn.Module):\n    def forward(self, x):\n        return x.relu()\n"


def test_non_kernelbench_module_gets_a_model_alias() -> None:
    t = task_from_source(BLOCK + HARNESS, path="/w/block.py")
    assert t.module == "Block" and t.name == "block.py::Block" and t.key == "/w/block.py::Block"
    assert t.reference_src.rstrip().endswith("Model = Block  # added by kernel-lsp")
    ns: dict = {}
    exec(compile(t.reference_src, "ref", "exec"), ns)  # the reference is runnable KernelBench form
    assert ns["Model"] is ns["Block"]


def test_model_is_preferred_and_candidate_source_kept() -> None:
    src = BLOCK + "\nclass Model(nn.Module):\n    pass\n\nclass ModelNew(nn.Module):\n    pass\n" + HARNESS
    t = task_from_source(src)
    assert t.module == "Model" and t.reference_src == src and t.candidate_src == src


@pytest.mark.parametrize(
    ("src", "fragment"),
    [
        ("class Model(nn.Module:\n", "syntax error"),
        ("x = 1\n", "no nn.Module subclass"),
        (BLOCK, "has no get_inputs() / get_init_inputs()"),
        (BLOCK + "\ndef get_inputs():\n    return []\n", "has no get_init_inputs()"),
    ],
)
def test_clear_errors(src: str, fragment: str) -> None:
    with pytest.raises(TaskError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        task_from_source(src)


def test_modelnew_alone_is_not_a_task() -> None:
    with pytest.raises(TaskError, match="no nn.Module"):
        task_from_source("import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n" + HARNESS)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="no such file"):
        task_from_file(tmp_path / "x.py")
    bad = tmp_path / "bin.py"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TaskError, match="cannot read"):
        task_from_file(bad)


def test_kernelbench_tasks_load() -> None:
    root = kernelbench_dir()
    if root is None:
        pytest.skip("KernelBench data not found")
    tasks = kernelbench_tasks(root, (1,))
    assert len(tasks) >= 80 and all(t.level == 1 for t in tasks)
    names = {t.name for t in tasks}
    assert "level1/1_Square_matrix_multiplication_" in names
