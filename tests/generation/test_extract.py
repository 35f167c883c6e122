"""Extraction on nasty completions."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lsp.generation.errors import ExtractionError
from kernel_lsp.generation.extract import (
    extract,
    extract_summary,
    fenced_blocks,
    reasoning_sections,
    strip_thinking,
)

KERNELS = Path(__file__).parent / "kernels"
GOOD = (KERNELS / "fast.py").read_text()
REF = (Path(__file__).parents[2] / "examples" / "relu_scale.py").read_text()


def body(src: str) -> str:
    """Everything after the imports."""
    return "\n".join(l for l in src.splitlines() if not l.startswith(("import ", "from ")))


@pytest.mark.parametrize("fence", ["```python", "```py", "```", "~~~", "~~~python", "```Python3", "````python"])
def test_fences(fence):
    close = fence[0] * (4 if fence.startswith("````") else 3)
    ex = extract(f"Here it is:\n{fence}\n{GOOD}{close}\nSummary: one fused pass.\n", REF)
    assert ex.source.strip() == GOOD.strip()
    assert ex.summary == "one fused pass."


def test_unterminated_fence():
    ex = extract("Sure!\n```python\n" + GOOD, REF)
    assert "class ModelNew" in ex.source and ex.source.strip().endswith("self.scale)")


def test_no_fences_with_prose_around():
    ex = extract("Here is my kernel.\n\n" + GOOD + "\nThis should be fast because it is fused.\n", REF)
    assert ex.source.strip() == GOOD.strip()


def test_think_sections_are_stripped():
    text = ("<think>Maybe I should write class ModelNew(nn.Module): pass ... no.</think>\n```python\n" + GOOD
            + "```\nSummary: fused.")
    ex = extract(text, REF)
    assert "Maybe" not in ex.source and ex.summary == "fused."
    assert "<think>" not in strip_thinking("a<think>b</think>c<think>unterminated")
    assert strip_thinking("reasoning only</think>answer") == "answer"


def test_every_reasoning_marker_is_stripped_and_its_text_found():
    for open_, close in (("<thinking>", "</thinking>"), ("<reasoning>", "</reasoning>"),
                         ("<|begin_of_thought|>", "<|end_of_thought|>"), ("<THINK>", "</THINK>")):
        text = f"{open_}weigh tiling first{close}\n```python\n{GOOD}```\nSummary: fused."
        ex = extract(text, REF)
        assert "weigh" not in ex.source and ex.summary == "fused."
        assert "weigh" not in strip_thinking(text) and reasoning_sections(text) == ["weigh tiling first"]
        assert strip_thinking(f"a{open_}cut off while thinking") == "a"
    assert reasoning_sections("plain answer") == []


def test_picks_the_block_defining_model_new_among_several():
    text = ("First the reference:\n```python\nclass Model(nn.Module):\n    pass\n```\nThen a shell command:\n"
            "```bash\npip install torch\n```\nThe answer:\n```python\n" + GOOD + "```\n")
    assert extract(text, REF).source.strip() == GOOD.strip()


def test_last_parsing_block_wins():
    draft = GOOD.replace("def forward(self, x: torch.Tensor) -> torch.Tensor:", "def forward(self, x:")
    text = f"Draft:\n```python\n{draft}```\nFinal:\n```python\n{GOOD}```\n"
    assert extract(text, REF).source.strip() == GOOD.strip()


def test_merges_helper_blocks_and_adds_imports():
    helper, _, rest = GOOD.partition("class ModelNew")
    helper_body = body(helper)
    text = f"Kernel source:\n```python\n{helper_body}\n```\nModule:\n```python\nclass ModelNew{rest}```\n"
    ex = extract(text, REF)
    assert "relu_scale_ext = load_inline(" in ex.source and "class ModelNew" in ex.source
    assert "import torch\n" in ex.source and "from torch.utils.cpp_extension import load_inline" in ex.source
    assert any("merged" in n for n in ex.notes) and any("import" in n for n in ex.notes)
    compile(ex.source, "<candidate>", "exec")


def test_missing_imports_added():
    ex = extract("```python\n" + body(GOOD) + "```", REF)
    assert ex.source.startswith("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline")


@pytest.mark.parametrize("text, reason", [
    ("I cannot help with that, but CUDA is great.", "holds no code"),
    ("```python\nprint('hello')\n```", "does not define `class ModelNew"),
    ("```python\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x) * 2\n```",
     "load_inline"),
    ("```python\nclass ModelNew(nn.Module):\n    def forward(self, x)\n        return x\n```", "does not parse"),
    (("```python\nfrom torch.utils.cpp_extension import load_inline\nclass ModelNew(nn.Module):\n"
      "    def __init__(self):\n        super().__init__()\n```"), "no `forward`"),
])
def test_unusable_completions_give_reasons(text, reason):
    with pytest.raises(ExtractionError) as e:
        extract(text, REF)
    assert reason in e.value.reason


def test_signature_mismatch_is_rejected():
    bad = GOOD.replace("def forward(self, x: torch.Tensor)", "def forward(self, x: torch.Tensor, y)")
    with pytest.raises(ExtractionError, match="forward"):
        extract(bad, REF)
    bad = GOOD.replace("def __init__(self, scale: float)", "def __init__(self)")
    with pytest.raises(ExtractionError, match="constructor"):
        extract(bad, REF)
    ok = GOOD.replace("def forward(self, x: torch.Tensor)", "def forward(self, *args)")
    extract(ok, REF)


def test_summary_variants():
    assert extract_summary("```python\nx=1\n```\n**Summary:** fused kernel\n") == "fused kernel"
    assert extract_summary("summary - tiles in shared memory") == "tiles in shared memory"
    assert extract_summary("```python\n# Summary: inside code\n```") == ""


prose = st.text(alphabet=st.characters(blacklist_characters="`~<>", blacklist_categories=("Cs",)), max_size=200)


@settings(max_examples=150, deadline=None)
@given(before=prose, after=prose, fence=st.sampled_from(["```python", "```py", "```", "~~~"]),
       think=st.booleans(), closed=st.booleans())
def test_prose_around_never_breaks_extraction(before, after, fence, think, closed):
    pre = f"<think>{before} class ModelNew: nope</think>" if think else before
    text = f"{pre}\n{fence}\n{GOOD}" + (f"{fence[0] * 3}\n{after}" if closed else "")
    ex = extract(text, REF)
    assert ex.source.strip() == GOOD.strip()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_random_text_is_an_extraction_error_or_a_candidate(text):
    try:
        ex = extract(text, REF)
    except ExtractionError as e:
        assert e.reason
    else:
        assert "class ModelNew" in ex.source


def test_fenced_blocks_languages():
    blocks = fenced_blocks("```cpp\nint x;\n```\n~~~\nplain\n~~~\n```python\nx = 1\n")
    assert [(b.lang, b.code, b.closed) for b in blocks] == [("cpp", "int x;", True), ("", "plain", True),
                                                             ("python", "x = 1", False)]
