"""Which form of kernel to ask for, from the reference's profile (torch-free).

A 7B model does not out-write cuBLAS or cuDNN; what it can win is the memory-bound work around them (the local-7B
study: "the only real wins are fused memory-bound epilogues"). So when the reference's time goes to GEMM,
convolution or attention, the prompts ask for that library call plus ONE fused custom kernel for the rest (bias,
activations, scaling, reductions); when it goes to elementwise, reduction, pooling or data movement (memory-bound
work), they ask for the whole forward as custom kernels. A module that is nothing but library operators (a plain
matmul) has no rest to fuse, however small: then the custom kernel has to do the operator itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluator.opclass import op_class
from evaluator.verdict import Profile

LIBRARY_CLASSES = ("gemm", "conv", "attention")  # what cuBLAS / cuDNN / flash attention already run near peak
DOMINANT = 0.5  # library share of the profiled time from which the library work dominates
PRESENT = 0.02  # a library class under this share of the time is noise (a tiny matmul beside the real work)


@dataclass(frozen=True)
class KernelForm:
    """kind: "library" (GEMM / conv / attention dominate: keep them, fuse the rest into one kernel), "mixed"
    (they are present but the rest takes most of the time: same form, the kernel is where the gain is), "custom"
    (memory-bound work, or a single library operator with nothing around it: custom kernels do it all)."""

    kind: str
    dominant: str  # the class with the largest share: gemm | conv | attention | reduction | pool | data | elementwise
    library: str = ""  # the largest library class, when kept: gemm | conv | attention
    library_share: float = 0.0  # of the profiled time, GEMM + conv + attention
    library_ops: tuple[str, ...] = ()  # e.g. ("aten::linear",), by time
    rest_ops: tuple[str, ...] = ()  # the compute ops to fuse into the one kernel, short names by time ("mish", "add")
    shares: dict[str, float] = field(default_factory=dict)  # class -> share of the profiled time

    @property
    def keeps_library(self) -> bool:
        return self.kind in ("library", "mixed")

    @property
    def rest_share(self) -> float:
        return 1.0 - self.library_share


def _short(name: str) -> str:
    return name.split("::", 1)[-1].split(".", 1)[0]


def kernel_form(profile: Profile | None) -> KernelForm | None:
    """The form for a reference's profile; None without a profile with timed operators."""
    if not getattr(profile, "ops", None):
        return None
    total = sum(max(0.0, op.share) for op in profile.ops)
    if total <= 0:
        return None
    shares: dict[str, float] = {}
    for op in profile.ops:
        cls = op_class(op.name)
        shares[cls] = shares.get(cls, 0.0) + max(0.0, op.share) / total
    dominant = max(shares, key=lambda c: shares[c])
    present = [c for c in LIBRARY_CLASSES if shares.get(c, 0.0) >= PRESENT]
    lib_share = sum(shares.get(c, 0.0) for c in present)
    ops = sorted(profile.ops, key=lambda o: -o.share)
    library_ops = tuple(o.name for o in ops if op_class(o.name) in present)
    rest: list[str] = []
    for o in ops:
        cls = op_class(o.name)
        if cls not in LIBRARY_CLASSES and cls != "data" and _short(o.name) not in rest:
            rest.append(_short(o.name))
    if not present or not rest:  # no library work to keep, or nothing beside it to fuse
        return KernelForm("custom", dominant, library_share=lib_share, library_ops=library_ops,
                          rest_ops=tuple(rest), shares=shares)
    library = max(present, key=lambda c: shares[c])
    kind = "library" if lib_share >= DOMINANT else "mixed"
    return KernelForm(kind, dominant, library, lib_share, library_ops, tuple(rest), shares)
