"""Pull a usable `ModelNew` source (and the model's short summary) out of a completion.

Robust to: fences of any kind (```python, ```py, bare ```, ~~~), several blocks (the one defining ModelNew wins;
earlier Python blocks holding imports or helpers it needs are merged in front), prose around the code, code
without fences, reasoning sections (`<think>...</think>` and the other markers in REASONING_TAGS: stripped, also
an unterminated one or a dangling close), missing imports (`torch`,
`torch.nn as nn`, `torch.nn.functional as F`, `load_inline`, `math`), and unterminated fences.

The output contract is checked on the way back (:func:`check_contract`): it parses, defines `class ModelNew`
with a `forward`, builds its kernel with `load_inline` (torch.utils.cpp_extension), and keeps the reference's
constructor and forward arity. Anything else raises :class:`ExtractionError` whose reason goes back to the model.

Summary: the prompts ask the model to end with one line ``Summary: ...``. When it does, that line (outside the
code) is the step's summary. When it does not, the engine asks for one with the cheap `summarise` prompt, which
shows only the extracted kernel (never the completion's reasoning), capped at 120 tokens.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass

from evaluator.shared import pysource

from .errors import ExtractionError

# How models mark their chain of thought: (open, close). `<think>` (DeepSeek-R1, Qwen3, QwQ), `<thinking>` and
# `<reasoning>` (other chat templates), and the thought markers of the Sky-T1 / OpenThoughts models. Reasoning an
# endpoint returns apart (`reasoning_content`) is never read into a completion in the first place.
REASONING_TAGS = (("<think>", "</think>"), ("<thinking>", "</thinking>"), ("<reasoning>", "</reasoning>"),
                  ("<|begin_of_thought|>", "<|end_of_thought|>"))
_SECTIONS = [re.compile(re.escape(o) + r"(.*?)" + re.escape(c), re.DOTALL | re.IGNORECASE) for o, c in REASONING_TAGS]
_ANY_TAG = re.compile("|".join(re.escape(t) for pair in REASONING_TAGS for t in pair), re.IGNORECASE)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*$")
_PY_LANGS = {"", "python", "py", "python3", "py3", "pytorch", "torch"}
_SUMMARY = re.compile(r"^[ \t>*_#-]*summary[*_ ]*[:\-][*_ ]*(.+)$", re.IGNORECASE | re.MULTILINE)
_IMPORT_FIXES = (
    ("torch", "import torch"),
    ("nn", "import torch.nn as nn"),
    ("F", "import torch.nn.functional as F"),
    ("load_inline", "from torch.utils.cpp_extension import load_inline"),
    ("math", "import math"),
)
_BUILTINS = set(dir(builtins)) | {"__name__", "__file__"}


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    closed: bool


@dataclass(frozen=True)
class Extracted:
    source: str  # a complete Python module defining ModelNew
    summary: str  # the model's own one-line summary, "" when it gave none
    notes: tuple[str, ...] = ()  # what extraction repaired (merged blocks, added imports)


def _split_reasoning(text: str) -> tuple[str, list[str]]:
    """(the text without reasoning, the reasoning sections). For each marker pair: closed sections go; a dangling
    close means everything before it was reasoning (the open tag was in the prompt); an unterminated open means
    everything after it is (the answer was cut off while thinking)."""
    spans: list[str] = []
    for (open_, close), section in zip(REASONING_TAGS, _SECTIONS):
        def drop(m: re.Match[str]) -> str:
            spans.append(m.group(1))
            return ""

        text = section.sub(drop, text)
        low = text.lower()
        if close in low:
            cut = low.rindex(close)
            spans.append(text[:cut])
            text = text[cut + len(close):]
            low = text.lower()
        if open_ in low:
            cut = low.index(open_)
            spans.append(text[cut + len(open_):])
            text = text[:cut]
    return text, [s for s in spans if s.strip()]


def strip_thinking(text: str) -> str:
    """The text without its reasoning sections (every marker of REASONING_TAGS; see _split_reasoning)."""
    return _split_reasoning(text)[0]


def reasoning_sections(text: str) -> list[str]:
    """The chain of thought a completion holds: the text inside its reasoning markers (what never goes into a
    later prompt)."""
    return _split_reasoning(text)[1]


def has_reasoning_marker(text: str) -> bool:
    return _ANY_TAG.search(text) is not None


def fenced_blocks(text: str) -> list[Block]:
    """Code blocks in order; an unterminated fence runs to the end of the text."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * 3) and set(stripped) <= {fence[0]} and len(stripped) >= len(fence):
                closed = True
                i += 1
                break
            if stripped.endswith(fence) and not stripped.endswith(fence + fence[0]):  # "code```": glued close
                body.append(lines[i].rstrip()[: -len(fence)])
                closed = True
                i += 1
                break
            body.append(lines[i])
            i += 1
        blocks.append(Block(lang, "\n".join(body), closed))
    return blocks


def _parses(code: str) -> ast.Module | None:
    try:
        return pysource.parse(code)
    except (SyntaxError, ValueError):
        return None


def _defines_model_new(code: str) -> bool:
    return re.search(r"^\s*class\s+ModelNew\b", code, re.MULTILINE) is not None


def _outside_code(text: str) -> str:
    """The prose of a completion: everything but fenced blocks."""
    out, inside, fence = [], False, ""
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m and not inside:
            inside, fence = True, m.group(1)[0]
            continue
        if inside and line.strip().startswith(fence * 3) and set(line.strip()) <= {fence}:
            inside = False
            continue
        if not inside:
            out.append(line)
    return "\n".join(out)


def extract_summary(text: str) -> str:
    prose = _outside_code(strip_thinking(text))
    found = _SUMMARY.findall(prose)
    if not found:
        return ""
    s = re.sub(r"\s+", " ", found[-1]).strip(" *_`")
    return s[:400]


def _unfenced_code(text: str) -> str:
    """Code given without fences: from the first code-looking line, trimmed of trailing prose until it parses."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if re.match(r"(import |from \w|class |def |@|#!|\w+\s*=)", l)), None)
    if start is None:
        return ""
    body = lines[start:]
    for end in range(len(body), 0, -1):
        code = "\n".join(body[:end])
        if _defines_model_new(code) and _parses(code) is not None:
            return code
    return "\n".join(body)


def _names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names defined at any level, names loaded anywhere) — a coarse but safe approximation."""
    defined, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
            for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs) if not isinstance(
                    node, ast.ClassDef) else ():
                defined.add(a.arg)
            if not isinstance(node, ast.ClassDef):
                for a in (node.args.vararg, node.args.kwarg):
                    if a is not None:
                        defined.add(a.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                defined.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return defined, used


def _undefined(code: str) -> set[str]:
    tree = _parses(code)
    if tree is None:
        return set()
    defined, used = _names(tree)
    return used - defined - _BUILTINS


def _choose(blocks: list[Block]) -> tuple[str, list[str]]:
    """The block defining ModelNew (the last one that parses, else the last one), merged with the Python blocks
    before it that define names it uses but lacks."""
    py = [b for b in blocks if b.lang in _PY_LANGS or _defines_model_new(b.code)]
    with_model = [i for i, b in enumerate(py) if _defines_model_new(b.code)]
    if not with_model:
        return "", []
    parsing = [i for i in with_model if _parses(py[i].code) is not None]
    idx = parsing[-1] if parsing else with_model[-1]
    code = py[idx].code
    notes: list[str] = []
    missing = _undefined(code)
    helpers: list[str] = []
    for b in py[:idx]:
        if _defines_model_new(b.code) or _parses(b.code) is None:
            continue
        tree = _parses(b.code)
        assert tree is not None
        defined, _ = _names(tree)
        if defined & missing:
            helpers.append(b.code)
            missing -= defined
    if helpers:
        merged = "\n\n".join([*helpers, code])
        if _parses(merged) is not None or _parses(code) is None:
            code = merged
            notes.append(f"merged {len(helpers)} earlier code block(s) holding definitions ModelNew uses")
    return code, notes


def _add_imports(code: str) -> tuple[str, list[str]]:
    missing = _undefined(code)
    lines = [imp for name, imp in _IMPORT_FIXES if name in missing]
    if not lines:
        return code, []
    return "\n".join(lines) + "\n" + code, [f"added missing import(s): {'; '.join(lines)}"]


def extract(completion: str, reference_src: str | None = None) -> Extracted:
    """The candidate source in a completion. Raises ExtractionError with a reason for the model."""
    text = strip_thinking(completion)
    code, notes = _choose(fenced_blocks(text))
    if not code:
        # No fenced block defines ModelNew: code without fences, or ModelNew only inside the reasoning.
        code = _unfenced_code(text) if _defines_model_new(text) else ""
        if not code and _defines_model_new(completion):
            code, notes = _choose(fenced_blocks(_ANY_TAG.sub("", completion)))
    if not code.strip():
        if fenced_blocks(text):
            raise ExtractionError("your code block does not define `class ModelNew(nn.Module)`; "
                                  "answer with one ```python block that defines ModelNew",
                                  "its code defines no ModelNew")
        raise ExtractionError("your answer holds no code; answer with one ```python block that defines "
                              "`class ModelNew(nn.Module)` and builds its kernel with load_inline",
                              "the answer holds no code")
    code = code.strip("\n") + "\n"
    code, more = _add_imports(code)
    notes += more
    check_contract(code, reference_src)
    return Extracted(code, extract_summary(completion), tuple(notes))


# --- the output contract -----------------------------------------------------------------------------------------
def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _arity(fn: ast.FunctionDef | None) -> int | None:
    """Positional parameters after self; None when it takes *args (anything goes)."""
    if fn is None:
        return 0
    if fn.args.vararg is not None:
        return None
    return len(fn.args.posonlyargs) + len(fn.args.args) - 1


def _required(fn: ast.FunctionDef | None) -> int:
    if fn is None:
        return 0
    n = len(fn.args.posonlyargs) + len(fn.args.args) - 1
    return n - len(fn.args.defaults)


def check_contract(source: str, reference_src: str | None = None) -> None:
    try:
        tree = pysource.parse(source)
    except SyntaxError as e:
        line = (e.text or "").strip()
        raise ExtractionError(f"your code does not parse: {e.msg} at line {e.lineno}: {line[:120]}",
                              f"its code does not parse ({e.msg}, line {e.lineno})") from None
    cls = _class(tree, "ModelNew")
    if cls is None:
        raise ExtractionError("`class ModelNew` must be defined at the top level of the module",
                              "ModelNew is not defined at the top level")
    forward = _method(cls, "forward")
    if forward is None:
        raise ExtractionError("ModelNew has no `forward` method; keep the reference's forward signature",
                              "ModelNew has no forward()")
    if "load_inline" not in source and "cpp_extension" not in source:
        raise ExtractionError("ModelNew must run a custom kernel built with "
                              "torch.utils.cpp_extension.load_inline; plain PyTorch is not a kernel",
                              "ModelNew builds no custom kernel (plain PyTorch)")
    if reference_src:
        ref = _parses(reference_src)
        model = _class(ref, "Model") if ref is not None else None
        if model is not None:
            for what in ("__init__", "forward"):
                want, got = _arity(_method(model, what)), _arity(_method(cls, what))
                need = _required(_method(cls, what))
                if want is None or got is None:
                    continue
                if not (need <= want <= got):
                    raise ExtractionError(
                        f"ModelNew.{what} takes {got} argument(s) but Model.{what} takes {want}: keep the same "
                        f"{'constructor' if what == '__init__' else 'forward'} signature as Model",
                        f"ModelNew.{what} takes {got} argument(s), Model.{what} {want}")
