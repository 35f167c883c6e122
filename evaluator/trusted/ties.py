"""Trusted (the referee): integer outputs that differ from the reference's only where the reference itself breaks a
tie (argmax, topk, sort of equal values): the candidate's answer is as right as the reference's there.

`ties` first asks `index_ties` (indices that pick elements equal to the ones the reference picks), then runs the
reference on inputs perturbed by a few ulps, which breaks exact ties at random. `draw` gives the trial's inputs
afresh (a pure function of its seed and variant, trusted/inputs.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from ..shared.tree import leaves, tree_map
from .compare import same_values


def ties(model: Any, draw: Callable[[], list], path: str, cand: torch.Tensor, positions: torch.Tensor) -> bool:
    """Are the differing integer outputs answers the reference itself gives when ties are broken otherwise?
    Runs the reference on inputs perturbed by a few ulps (which breaks exact ties at random) and accepts a
    differing element when one of those runs produces the candidate's value there."""
    if index_ties(model, draw, path, cand, positions):
        return True
    n = positions.numel()
    want = cand.reshape(-1)[positions]
    seen = torch.zeros(n, dtype=torch.bool, device=want.device)
    t_end = time.perf_counter() + 10.0
    for k in range(64):
        if time.perf_counter() > t_end:
            return False
        base = draw()
        if not any(isinstance(t, torch.Tensor) and t.is_floating_point() for _, t in leaves(base)):
            return False
        torch.manual_seed(1234 + k)

        def perturb(t: torch.Tensor) -> torch.Tensor:
            if not t.is_floating_point() or t.numel() == 0:
                return t
            eps = torch.finfo(t.dtype).eps * 4
            typical = float(t.abs().mean()) or 1.0
            return t + (t.abs() + typical) * eps * torch.randn_like(t)

        pert = [tree_map(perturb, x) for x in base]
        with torch.no_grad():
            out = model(*pert)
        vals = dict(leaves(out)).get(path)
        if not isinstance(vals, torch.Tensor) or vals.shape != cand.shape:
            return False
        seen |= vals.reshape(-1)[positions] == want
        if bool(seen.all()):
            return True
    return False


def index_ties(model: Any, draw: Callable[[], list], path: str, cand: torch.Tensor, positions: torch.Tensor) -> bool:
    """Index outputs (argmax, argmin, topk, sort): the candidate's indices are as right as the reference's
    when, along some dimension of some input, they pick elements equal to the ones the reference picks."""
    base = draw()
    with torch.no_grad():
        ref = dict(leaves(model(*draw()))).get(path)
    if not isinstance(ref, torch.Tensor) or ref.shape != cand.shape or ref.is_floating_point():
        return False
    ref_l, cand_l = ref.long(), cand.long()
    for _, x in leaves(base):
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            continue
        for d in range(x.dim()):
            shape = list(x.shape)
            if list(ref.shape) == shape[:d] + shape[d + 1:]:
                r, c = ref_l.unsqueeze(d), cand_l.unsqueeze(d)  # argmax(dim=d)
            elif ref.dim() == x.dim() and all(a == b for i, (a, b) in enumerate(zip(ref.shape, shape)) if i != d):
                r, c = ref_l, cand_l  # keepdim / topk / sort along d
            else:
                continue
            n = shape[d]
            if int(c.min()) < 0 or int(c.max()) >= n or int(r.min()) < 0 or int(r.max()) >= n:
                continue
            try:
                vr, vc = x.gather(d, r), x.gather(d, c)
            except RuntimeError:
                continue
            if same_values(vr, vc):
                return True
    return False
