"""What one call of forward is, and where one candidate's input sets and output slots lie in its arena
(placed by the referee, read by the referee, the evaluator and the runner)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .wire import Message


@dataclass(frozen=True)
class CallItem(Message):
    """One call: the inputs in arena input set `slot`, the outputs into arena output slot `out`; `fresh`: new
    tensor objects over the inputs (else the same ones as the last call on that set); `args`: the encoded
    arguments (`protocol.encode`, tensors as leaf indices)."""

    slot: int
    out: int
    fresh: bool
    args: list[Any]


@dataclass(frozen=True)
class OutputLeaf(Message):
    """One leaf of the reference's output, at `path` in its structure: a tensor (its shape and dtype) or a scalar."""

    path: str
    kind: str  # "tensor" | "scalar"
    shape: list[int] = field(default_factory=list)
    dtype: str = ""


@dataclass(frozen=True)
class InputView(Message):
    """One input tensor of one input set: where it lies in the arena."""

    offset: int
    shape: list[int]
    dtype: str
    stride: list[int] | None = None  # None: contiguous


@dataclass(frozen=True)
class ArenaLayout(Message):
    slots: list[list[InputView]]  # per input set, its tensors
    inputs: Any  # one call's arguments, encoded with its tensors by index (shared/protocol.encode)
    outputs: list[OutputLeaf]
    out_offsets: list[list[int]]  # per output slot, the offset of each tensor output
    in_bytes: int  # of one input set
    out_bytes: list[int]  # of each tensor output

    @property
    def tensor_outputs(self) -> list[OutputLeaf]:
        return [lf for lf in self.outputs if lf.kind == "tensor"]
