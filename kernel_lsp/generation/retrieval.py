"""Agent retrieval: similar kernels that passed the oracle before (workspace history) plus the built-in example.

Similarity is the Jaccard index of the identifier sets of the new reference and the stored kernel: torch op names, layer
names and shapes dominate it, which is what makes a kernel transferable. Cheap and deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_lsp.history import History

from .forms import KernelForm
from .prompts import PromptLibrary

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_COMMON = {"self", "torch", "import", "class", "def", "return", "super", "forward", "Model", "ModelNew", "nn",
           "Module", "__init__", "get_inputs", "get_init_inputs", "Tensor", "from", "float", "int"}


@dataclass(frozen=True)
class Retrieved:
    title: str
    source: str
    speedup: float | None
    similarity: float


def identifiers(src: str) -> set[str]:
    return set(_IDENT.findall(src)) - _COMMON


def similarity(a: str, b: str) -> float:
    x, y = identifiers(a), identifiers(b)
    return len(x & y) / len(x | y) if x and y else 0.0


_EXAMPLES = {
    # a full custom kernel: memory-bound elementwise work
    "custom": ("relu_scale", "built-in example: relu and scale fused",
               "One fused pass computes relu and the scale per element, reading and writing memory once."),
    # the library keeps the GEMM, one fused kernel does the rest (the form for GEMM / conv / attention tasks)
    "library": ("linear_relu_scale", "built-in example: library GEMM, then bias, relu and scale fused",
                "The library does the matrix multiply (F.linear without the bias); one fused kernel adds the bias "
                "and applies relu and the scale in place, in one pass over the GEMM's output."),
}


def builtin_example(library: PromptLibrary, target_kind: str, form: KernelForm | None = None,
                    binding: str = "torch") -> dict[str, str]:
    """The worked example pair in the form the task calls for (forms.py): GEMM + fused epilogue when the
    reference's time goes to GEMM / conv / attention, a fused elementwise kernel otherwise; its kernels called from
    Python the way `binding` says (a torch C++ wrapper, or ctypes)."""
    stem, title, summary = _EXAMPLES["library" if form is not None and form.keeps_library else "custom"]
    kind = "cuda" if target_kind == "cuda" else "cpu"
    return {
        "reference": library.example(f"{stem}_ref.py"),
        "candidate": library.example(f"{stem}_{kind}{'_ctypes' if binding == 'ctypes' else ''}.py"),
        "summary": summary,
        "title": title,
    }


def retrieve(history: History, library: PromptLibrary, reference_src: str, target_kind: str, *,
             exclude_task: str = "", k: int = 2, form: KernelForm | None = None,
             binding: str = "torch") -> list[Retrieved]:
    found: list[Retrieved] = []
    for key in history.task_keys():
        if key == exclude_task:
            continue
        best = history.best(key)
        if best is None or not best.correct:
            continue
        # the candidate's own source contains the kernel; compare it with the new reference
        found.append(Retrieved(f"kernel for {key}", best.source, best.speedup_eager,
                               similarity(reference_src, best.source)))
    found.sort(key=lambda r: -r.similarity)
    ex = builtin_example(library, target_kind, form, binding)
    builtin = Retrieved(ex["title"], ex["candidate"], None, similarity(reference_src, ex["reference"]))
    return [*found[: max(0, k - 1)], builtin] if k > 0 else []
