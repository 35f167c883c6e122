import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lsp.documents import analyse
from kernel_lsp.documents.sources import reference_assignments
from tests.conftest import kernelbench_dir

SOURCE = '''import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return x * scale


class Model(Block):
    pass


class NotAModule:
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return [4]
'''


def test_modules_harness_and_candidate() -> None:
    a = analyse(SOURCE)
    assert a.ok and a.has_inputs
    assert [m.name for m in a.modules] == ["Block", "Model", "ModelNew"]  # Model subclasses a local module
    assert [m.name for m in a.references] == ["Block", "Model"]
    assert a.model_new is not None and a.model_new.name == "ModelNew"
    block = a.module("Block")
    assert block is not None
    assert [p.name for p in block.init_params] == ["dim", "eps"]
    assert block.init_params[1].default == "1e-05"
    assert [(p.name, p.annotation) for p in block.forward_params] == [("x", "torch.Tensor"), ("scale", "float")]
    # 0-based positions, the name span covers exactly the class name
    assert block.span.line == 4 and block.name_span.line == 4
    line = SOURCE.splitlines()[4]
    assert line[block.name_span.col : block.name_span.end_col] == "Block"
    assert a.module_at(9, 8).name == "Block"
    assert a.module_at(24) is None


def test_syntax_error_reports_line() -> None:
    a = analyse("import torch\nclass Model(nn.Module:\n    pass\n")
    assert not a.ok and a.syntax_error_line == 1 and a.modules == []


def test_null_bytes_do_not_raise() -> None:
    assert not analyse("x = 1\x00\n").ok


def test_fingerprint_ignores_modelnew_but_tracks_model_and_inputs() -> None:
    a = analyse(SOURCE)
    fp = a.fingerprint("Model", reference_assignments(SOURCE))
    edited_new = SOURCE.replace("return x\n\n\ndef get_inputs", "return x + 0\n\n\ndef get_inputs")
    assert analyse(edited_new).fingerprint("Model", reference_assignments(edited_new)) == fp
    edited_inputs = SOURCE.replace("randn(4, 4)", "randn(8, 8)")
    assert analyse(edited_inputs).fingerprint("Model", reference_assignments(edited_inputs)) != fp
    edited_const = SOURCE.replace("import torch.nn as nn\n", "import torch.nn as nn\nN = 3\n", 1)
    assert analyse(edited_const).fingerprint("Model", reference_assignments(edited_const)) != fp
    edited_model = SOURCE.replace("class Model(Block):\n    pass", "class Model(Block):\n    x = 1")
    assert analyse(edited_model).fingerprint("Model", reference_assignments(edited_model)) != fp


def test_non_ascii_columns_are_characters() -> None:
    src = "import torch.nn as nn\nclass Ünïcode(nn.Module):  # é\n    pass\n"
    m = analyse(src).modules[0]
    assert src.splitlines()[1][m.name_span.col : m.name_span.end_col] == "Ünïcode"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_never_raises_on_arbitrary_text(text: str) -> None:
    analyse(text)  # any text: an Analysis, never an exception


@given(st.integers(min_value=0, max_value=len(SOURCE)))
def test_every_prefix_of_a_file_being_typed_is_handled(n: int) -> None:
    a = analyse(SOURCE[:n])
    assert a.ok or a.syntax_error


def test_every_visible_kernelbench_task_is_recognised() -> None:
    root = kernelbench_dir()
    if root is None:
        pytest.skip("KernelBench data not found")
    count = 0
    for level in (1, 2, 3):
        for line in (root / f"level{level}.jsonl").read_text().splitlines():
            row = json.loads(line)
            a = analyse(row["code"])
            assert a.ok and a.has_inputs and a.module("Model") is not None, row["name"]
            count += 1
    assert count >= 100
