"""Shared: the loop of a timed request, the same code for the candidate (in its runner) and the reference (in the
referee), so both are timed doing the same things: for each call, `forward` on the views of one input set in the
arena, then its outputs copied into their own output slot there.

In the runner this loop is the candidate's code like any other (it can rewrite it): nothing it does is believed.
The evaluator's clock spans the whole request from outside, the referee reads the outputs from the arena itself,
for calls it picks once the request is over, and the calls' results exist only where it reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .. import messages as M
from . import protocol
from .arena import Arena
from .tree import leaves, structure


class Calls:
    """Views of the arena's input sets and output slots, as `layout` (the referee's) places them."""

    def __init__(self, arena: Arena, layout: M.ArenaLayout, device: torch.device) -> None:
        self.arena, self.layout, self.device = arena, layout, device
        self.views: dict[int, list[torch.Tensor]] = {}
        self.staged: tuple | None = None

    def args(self, slot: int, fresh: bool, encoded: list) -> list:
        views = self.views.get(slot)
        if fresh or views is None:
            views = [self.arena.view(v.offset, v.shape, getattr(torch, v.dtype), v.stride)
                     for v in self.layout.slots[slot]]
            self.views[slot] = views
        return protocol.decode(encoded, lambda i: views[i])

    def out_view(self, out: int, j: int, lf: M.OutputLeaf) -> torch.Tensor:
        return self.arena.view(self.layout.out_offsets[out][j], lf.shape, getattr(torch, lf.dtype))

    def collect(self, value: Any, out: int) -> tuple[dict[str, Any], list[str]]:
        """Copy a call's tensor outputs into output slot `out`; its scalars (encoded) and what did not fit."""
        want = self.layout.outputs
        got = dict(leaves(value))
        paths = [lf.path for lf in want]
        missing = [p for p in paths if p not in got]
        extra = [p for p in got if p not in paths]
        if missing or extra:
            return {}, [f"output structure differs: missing {missing[:4] or 'nothing'}, unexpected "
                        f"{extra[:4] or 'nothing'} (got {str(structure(value))[:200]})"]
        scalars: dict[str, Any] = {}
        problems: list[str] = []
        j = 0
        for lf in want:
            v = got[lf.path]
            if lf.kind != "tensor":
                try:
                    scalars[lf.path] = protocol.encode(v.item() if isinstance(v, torch.Tensor) and v.numel() == 1
                                                          else v)
                except TypeError as e:
                    problems.append(f"output{lf.path}: {e}")
                continue
            k, j = j, j + 1
            if not isinstance(v, torch.Tensor):
                problems.append(f"output{lf.path}: expected a tensor, got {type(v).__name__}")
                continue
            dt = str(v.dtype).replace("torch.", "")
            if list(v.shape) != list(lf.shape):
                problems.append(f"output{lf.path}: shape {list(v.shape)}, expected {lf.shape}")
            elif dt != lf.dtype:
                problems.append(f"output{lf.path}: dtype {dt}, expected {lf.dtype}")
            elif v.device != self.device:
                problems.append(f"output{lf.path}: on {v.device}, expected {self.device}")
            else:
                self.out_view(out, k, lf).copy_(v)
        return scalars, problems

    def stage(self, items: list) -> None:
        """Every call's arguments (views of its input set) and destination made ahead, outside the clock, before
        the referee writes this request's inputs (so nothing can be computed from them here)."""
        outputs, tensors = self.layout.outputs, self.layout.tensor_outputs
        single = len(outputs) == 1 and len(tensors) == 1 and outputs[0].path == ""
        self.staged = (list(items), [self.args(it.slot, it.fresh, it.args) for it in items],
                       [self.out_view(it.out, 0, tensors[0]) for it in items] if single else [], single)

    def run(self, fn: Callable[..., Any], items: list) -> tuple[list[dict[str, Any]], list[list[str]]]:
        self.stage(items)
        return self.go(fn)

    def go(self, fn: Callable[..., Any]) -> tuple[list[dict[str, Any]], list[list[str]]]:
        """The staged calls, back to back (on a GPU the device is not left waiting on Python between them): each
        forward, then its outputs into their slot. Synchronises the device at the end."""
        if self.staged is None:
            raise RuntimeError("no calls staged")
        items, args, dests, single = self.staged
        self.staged = None
        scalars: list[dict[str, Any]] = []
        problems: list[list[str]] = []
        with torch.no_grad():
            for i, it in enumerate(items):
                out = fn(*args[i])
                if single and type(out) is torch.Tensor and out.shape == dests[i].shape \
                        and out.dtype == dests[i].dtype and out.device == self.device:
                    dests[i].copy_(out)  # the common case, without walking a structure
                    s, p = {}, []
                else:
                    s, p = self.collect(out, it.out)
                del out
                scalars.append(s)
                problems.append(p)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return scalars, problems


def poison_allocator(device: torch.device, sizes: list[int]) -> None:
    """NaN in the memory the allocator hands out next (before a request, outside the clock, on both sides), so an
    output element never written cannot pass by holding a previous call's value."""
    per_size = 2 if device.type == "cuda" else 8
    blocks = []
    budget = 4 << 30
    used = 0
    for n in sizes:
        for _ in range(per_size):
            if used + n > budget:
                break
            blocks.append(torch.empty(max(1, (n + 3) // 4), dtype=torch.float32, device=device))
            used += n
    big = torch.empty(32 << 20 if device.type == "cuda" else 1 << 18, dtype=torch.float32, device=device)
    for b in blocks + [big]:
        b.fill_(float("nan"))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    del blocks, big
