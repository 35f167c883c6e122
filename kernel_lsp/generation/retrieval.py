"""Agent retrieval: similar kernels that passed the oracle before (workspace history) plus the built-in example.

Similarity is the Jaccard index of the identifier sets of the new reference and the stored kernel: torch op names, layer
names and shapes dominate it, which is what makes a kernel transferable. Cheap and deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_lsp.history import History

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


def builtin_example(library: PromptLibrary, target_kind: str) -> dict[str, str]:
    return {
        "reference": library.example("relu_scale_ref.py"),
        "candidate": library.example("relu_scale_cuda.py" if target_kind == "cuda" else "relu_scale_cpu.py"),
        "summary": "One fused pass computes relu and the scale per element, reading and writing memory once.",
    }


def retrieve(history: History, library: PromptLibrary, reference_src: str, target_kind: str, *,
             exclude_task: str = "", k: int = 2) -> list[Retrieved]:
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
    ex = builtin_example(library, target_kind)
    builtin = Retrieved("built-in example: relu and scale fused", ex["candidate"], None,
                        similarity(reference_src, ex["reference"]))
    return [*found[: max(0, k - 1)], builtin] if k > 0 else []
