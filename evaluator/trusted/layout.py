"""Trusted (the referee): where a task's inputs and outputs lie in a candidate's arena.

The referee measures one set of the reference's inputs and outputs when it loads it (`task_shape`), says how many
sets an arena may hold (`set_bytes`, `slots_max`), places `slots` input sets and as many output slots in a new
arena (`place`), and reads and writes them through views (`input_views`, `output_views`, `poison`). Tasks whose
one set of inputs and outputs is over BIG_SET get one slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import messages as M
from ..shared import arena as arena_mod
from ..shared.calls import Calls

BIG_SET = 1 << 30  # one set of inputs + outputs beyond this: the arena holds one
MAX_SLOTS = 128
ARENA_BUDGET = {"cuda": 16 << 30, "cpu": 256 << 20}  # the most an arena holds (a candidate takes a share of the device:
# stages/device/load.py::arena_slots)


class Space:
    """One candidate's arena, its layout, and the views of it."""

    def __init__(self, arena: arena_mod.Arena, layout: M.ArenaLayout, calls: Calls) -> None:
        self.arena, self.layout, self.calls = arena, layout, calls
        self.fn: Any = None  # what the staged calls run


@dataclass(frozen=True)
class InputSpec:
    """One input tensor of the task: the same in every input set."""

    shape: list[int]
    dtype: str
    stride: list[int] | None  # None: contiguous
    span: int  # the bytes it covers


@dataclass(frozen=True)
class TaskShape:
    """One set of the task's inputs and outputs, as the referee measured them when it loaded the reference."""

    inputs: list[InputSpec]
    template: Any  # one call's arguments, encoded with its tensors by index
    outputs: list[M.OutputLeaf]
    out_sizes: list[int]  # the bytes of each tensor output

    @property
    def in_bytes(self) -> int:
        return sum(t.span for t in self.inputs)

    @property
    def io_bytes(self) -> int:
        """One set of inputs and outputs."""
        return self.in_bytes + sum(self.out_sizes)


def task_shape(in_leaves: list[torch.Tensor], template: Any, out_leaves: list[M.OutputLeaf]) -> TaskShape:
    """One set of the task's inputs (the reference's input tensors, `template` their encoding) and outputs
    (`out_leaves`, as the referee describes them): shapes, dtypes, strides and sizes, the same for every arena."""
    return TaskShape(inputs=[InputSpec(list(t.shape), str(t.dtype).replace("torch.", ""),
                                       None if t.is_contiguous() else list(t.stride()), span_bytes(t))
                             for t in in_leaves],
                     template=template, outputs=out_leaves,
                     out_sizes=[numel(lf.shape) * esize(lf.dtype) for lf in out_leaves if lf.kind == "tensor"])


def set_bytes(shape: TaskShape) -> int:
    """The arena bytes of one input set and its output slot, aligned."""
    return arena_mod.align(max(shape.in_bytes, 1)) + sum(arena_mod.align(max(n, 1)) for n in shape.out_sizes)


def slots_max(shape: TaskShape, per_set: int, device: torch.device) -> int:
    """How many input sets (and output slots) one arena may hold."""
    if shape.io_bytes > BIG_SET:
        return 1
    return max(2, min(MAX_SLOTS, ARENA_BUDGET.get(device.type, 256 << 20) // max(per_set, 1)))


def place(shape: TaskShape, n_slots: int) -> tuple[M.ArenaLayout, int]:
    """The layout of an arena of `n_slots` input sets and as many output slots (every offset aligned), and its
    size in bytes."""
    off = 0
    slots = []
    for _ in range(n_slots):
        views = []
        for t in shape.inputs:
            off = arena_mod.align(off)
            views.append(M.InputView(offset=off, shape=t.shape, dtype=t.dtype, stride=t.stride))
            off += t.span
        slots.append(views)
    out_offsets = []
    for _ in range(n_slots):
        offs = []
        for n in shape.out_sizes:
            off = arena_mod.align(off)
            offs.append(off)
            off += n
        out_offsets.append(offs)
    layout = M.ArenaLayout(slots=slots, inputs=shape.template, outputs=shape.outputs, out_offsets=out_offsets,
                           in_bytes=shape.in_bytes, out_bytes=list(shape.out_sizes))
    return layout, max(off, 1)


def input_views(space: Space, slot: int) -> list[torch.Tensor]:
    return [space.arena.view(v.offset, v.shape, getattr(torch, v.dtype), v.stride) for v in space.layout.slots[slot]]


def output_views(space: Space, out: int) -> dict[str, torch.Tensor]:
    return {lf.path: space.calls.out_view(out, j, lf) for j, lf in enumerate(space.layout.tensor_outputs)}


def poison(t: torch.Tensor) -> None:
    """NaN in a floating output slot, random bits in another: an element the candidate never writes cannot pass."""
    with torch.no_grad():
        if t.is_floating_point() or t.is_complex():
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.copy_(torch.randint(0, 2, t.shape, device=t.device, dtype=torch.bool))
        else:
            t.random_()


class indexer:
    """Numbers the tensor leaves of a structure as protocol.encode meets them."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, t: Any) -> int:
        self.n += 1
        return self.n - 1


def numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def esize(dtype: str) -> int:
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def span_bytes(t: torch.Tensor) -> int:
    if t.is_contiguous() or t.numel() == 0:
        return t.numel() * t.element_size()
    span = 1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride()))
    return span * t.element_size()
