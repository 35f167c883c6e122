"""Which referee serves a reference (`evaluator/processes/referees.py::reference_key`): its code, not its text. An
edit of comments or layout only (an editor's format on save) keeps the referee loaded, compiled and measured for the
text before; any edit of the code loads another."""

from __future__ import annotations

from eval_helpers import REF_ADD

from evaluator.processes.referees import reference_key

REFORMATTED = REF_ADD.replace("return a + 2 * b", "return (a  +  2*b)  # doubled b").replace(
    "def get_inputs():", "# inputs of one call\n\n\ndef get_inputs():") + "\n\n# end of the task\n"


def test_comments_blank_lines_and_layout_are_the_same_reference():
    assert REFORMATTED != REF_ADD
    assert reference_key(REFORMATTED) == reference_key(REF_ADD)
    assert reference_key(REF_ADD.replace("'", '"')) == reference_key(REF_ADD)


def test_any_edit_of_the_code_is_another_reference():
    for edited in (REF_ADD.replace("a + 2 * b", "a + 3 * b"), REF_ADD.replace("64, 128", "64, 256"),
                   REF_ADD + "\nEDITED = 1\n", REF_ADD.replace("class Model(nn.Module):\n",
                                                              'class Model(nn.Module):\n    """doc"""\n')):
        assert reference_key(edited) != reference_key(REF_ADD), edited


def test_a_source_that_does_not_parse_is_keyed_by_its_text():
    broken = REF_ADD.replace("def forward(self, a, b):", "def forward(self, a, b)")
    assert reference_key(broken) != reference_key(broken + "# more\n")
    assert reference_key(broken) != reference_key(REF_ADD)


def test_an_edit_of_comments_keeps_the_referee_and_an_edit_of_code_loads_another(ev):
    ev.check_reference(REF_ADD)
    assert len(ev._referees._kept) == 1
    first = next(iter(ev._referees._kept.values()))
    ev.check_reference(REFORMATTED)  # the same code: nothing loaded
    assert list(ev._referees._kept.values()) == [first] and not first.worker.dead
    v = ev.evaluate(REFORMATTED, "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                                 "    def __init__(self):\n        super().__init__()\n\n"
                                 "    def forward(self, a, b):\n        return a + b * 2\n")
    assert v.status == "correct", v.message
    assert list(ev._referees._kept.values()) == [first]
    ev.check_reference(REF_ADD + "\nEDITED = 1\n")
    assert len(ev._referees._kept) == 2 and first in ev._referees._kept.values()
