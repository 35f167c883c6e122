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
    kept = ev._referees._kept  # (the session's evaluator: other tests' referees may be kept beside these)
    ev.check_reference(REF_ADD)
    first = kept[reference_key(REF_ADD)]
    before = set(kept)
    ev.check_reference(REFORMATTED)  # the same code: nothing loaded
    assert set(kept) == before and kept[reference_key(REF_ADD)] is first and not first.worker.dead
    v = ev.evaluate(REFORMATTED, "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                                 "    def __init__(self):\n        super().__init__()\n\n"
                                 "    def forward(self, a, b):\n        return a + b * 2\n")
    assert v.status == "correct", v.message
    assert set(kept) == before and kept[reference_key(REF_ADD)] is first
    edited = REF_ADD + "\nEDITED = 1\n"
    ev.check_reference(edited)
    assert reference_key(edited) in kept and kept[reference_key(edited)] is not first
    assert kept.get(reference_key(REF_ADD)) is first  # the one used last is not the one evicted
