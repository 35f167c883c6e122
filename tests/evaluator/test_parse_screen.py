"""Stages parse and screen: static, nothing executed."""

from __future__ import annotations

import pytest
from eval_helpers import CPP_ADD, REF_ADD

from evaluator.stages.parse import ParseFailure, check_candidate, check_reference
from evaluator.stages.screen import load_rules, screen

REF_INIT = '''
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
    def forward(self, x):
        return x
def get_inputs(): return []
def get_init_inputs(): return [4, 5]
'''


def test_reference_ok_and_candidate_ok():
    tree = check_reference(REF_ADD)
    check_candidate(CPP_ADD, tree)


def test_syntax_error_has_line():
    with pytest.raises(ParseFailure) as e:
        check_candidate("import torch\nclass ModelNew(:\n  pass\n", check_reference(REF_ADD))
    assert "line 2" in e.value.message


def test_missing_modelnew():
    with pytest.raises(ParseFailure, match="no class ModelNew"):
        check_candidate("class Model: pass\n", check_reference(REF_ADD))


def test_reference_missing_get_inputs():
    with pytest.raises(ParseFailure, match="get_inputs"):
        check_reference("class Model: pass\ndef get_init_inputs(): return []\n")


def test_constructor_signature_mismatch():
    tree = check_reference(REF_INIT)
    bad = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self, in_features):\n" \
          "        super().__init__()\n    def forward(self, x): return x\n"
    with pytest.raises(ParseFailure, match="does not take the reference's arguments"):
        check_candidate(bad, tree)
    good = bad.replace("(self, in_features)", "(self, in_features, out_features, bias=True)")
    check_candidate(good, tree)


def test_missing_forward():
    with pytest.raises(ParseFailure, match="no forward"):
        check_candidate("import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n", check_reference(REF_ADD))


RULES = load_rules()


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_example_bad_triggers(rule):
    assert rule.bad, f"rule {rule.id} needs a `bad` example"
    hits = [f for f in screen(rule.bad) if f.rule == rule.id]
    assert hits, f"rule {rule.id} did not fire on its bad example"
    assert hits[0].severity == rule.severity
    assert hits[0].line >= 1


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_example_good_passes(rule):
    assert rule.good, f"rule {rule.id} needs a `good` example"
    assert not [f for f in screen(rule.good) if f.rule == rule.id]


def test_rule_ids_unique():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))


def test_aliases_are_resolved():
    src = "import os as o\nfrom subprocess import run as go\ngo(['x'])\nv = o.environ['HOME']\n"
    rules = {f.rule for f in screen(src)}
    assert {"process", "env_read"} <= rules


def test_cpp_source_in_strings_is_screened():
    src = 'src = """\\n#include <fstream>\\nvoid f(){ std::ofstream o("x"); }\\n"""\n'
    assert any(f.rule == "file_write" for f in screen(src))


def test_kernel_candidate_is_clean():
    findings = screen(CPP_ADD)
    assert [f for f in findings if f.severity == "reject"] == []
    assert not [f for f in findings if f.rule == "torch_only_forward"]


def test_ctypes_only_to_call_a_library_load_inline_built_is_no_raw_memory_warning():
    from eval_helpers import CTYPES_ADD

    src = CTYPES_ADD.replace("BODY", "lib.add2(a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel())")
    assert not [f for f in screen(src) if f.rule == "raw_memory"]
    path = src.replace("lib = ctypes.CDLL(load_inline(", "path = load_inline(").replace(
        "verbose=False))", "verbose=False)\nlib = ctypes.CDLL(path)")
    assert "lib = ctypes.CDLL(path)" in path and not [f for f in screen(path) if f.rule == "raw_memory"]
    for other in ("ctypes.memmove(0, 0, 0)", "libc = ctypes.CDLL(None)", "ctypes.cast(0, ctypes.c_void_p)",
                  "f = ctypes.pythonapi", "m = ctypes", "path = '/tmp/x.so'\nlib2 = ctypes.CDLL(path)"):
        assert [f for f in screen(path + "\n" + other + "\n") if f.rule == "raw_memory"], other
    assert [f for f in screen("from ctypes import CDLL\n" + path) if f.rule == "raw_memory"]
    aliased = path.replace("from torch.utils.cpp_extension import load_inline",
                           "import torch.utils.cpp_extension as ce").replace("= load_inline(", "= ce.load_inline(")
    assert "ce.load_inline(" in aliased and not [f for f in screen(aliased) if f.rule == "raw_memory"]
