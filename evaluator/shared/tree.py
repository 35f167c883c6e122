"""Shared (both sides of the sandbox run it; it decides nothing): walking the nested structures of inputs and
outputs (tuples, lists, dicts of tensors and plain values)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def tree_map(fn: Callable[[Any], Any], x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(tree_map(fn, v) for v in x)
    if isinstance(x, dict):
        return {k: tree_map(fn, v) for k, v in x.items()}
    return x


def leaves(x: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(path, leaf) pairs of a nested structure of tuples, lists and dicts, in a fixed order."""
    if isinstance(x, (list, tuple)):
        out: list[tuple[str, Any]] = []
        for i, v in enumerate(x):
            out += leaves(v, f"{prefix}[{i}]")
        return out
    if isinstance(x, dict):
        out = []
        for k in x:
            out += leaves(x[k], f"{prefix}[{k!r}]")
        return out
    return [(prefix, x)]


def structure(x: Any) -> Any:
    """A JSON-able description of an output's structure (types, keys, shapes, dtypes) for messages."""
    if isinstance(x, torch.Tensor):
        return {"tensor": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
    if isinstance(x, (list, tuple)):
        return {type(x).__name__: [structure(v) for v in x]}
    if isinstance(x, dict):
        return {"dict": {str(k): structure(v) for k, v in x.items()}}
    return {"scalar": type(x).__name__}
