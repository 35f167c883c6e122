"""The wire between the evaluator and its workers: one JSON object per line over a Unix socket, file descriptors
alongside (SCM_RIGHTS), and a tagged encoding of plain values. No pickles in either direction.

A message that carries descriptors says how many (`"nfds": k`); they are the next k descriptors received.
Plain values (a model's constructor arguments, the non-tensor arguments of `forward`, scalar outputs) are
encoded with tags so that tuples stay tuples, NaN stays NaN and a dtype stays a dtype:
``{"$": "tuple", "v": [...]}``, ``{"$": "float", "v": "nan"}``, ``{"$": "dtype", "v": "float32"}``,
``{"$": "complex", "v": [re, im]}``, ``{"$": "dict", "v": [[k, v], ...]}``, ``{"$": "tensor", "v": i}`` (the
i-th tensor leaf, which travels through shared memory), ``{"$": "bytes", ...}`` is refused.
"""

from __future__ import annotations

import array
import json
import math
import os
import select
import socket
import time
from collections.abc import Callable
from typing import Any

MAX_LINE = 64 << 20  # a message larger than this is a protocol violation


class ProtocolError(Exception):
    pass


class Channel:
    """A JSON-lines channel over a connected stream socket, with descriptor passing."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""
        self._fds: list[int] = []
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg: dict[str, Any], fds: list[int] | None = None) -> None:
        if fds:
            msg = dict(msg, nfds=len(fds))
        data = (json.dumps(msg, separators=(",", ":"), allow_nan=False, default=_default) + "\n").encode()
        if fds:
            n = socket.send_fds(self.sock, [data[:1]], fds)
            data = data[n:]
        self.sock.sendall(data)

    def _fill(self, timeout: float | None) -> bool:
        """Read what is there (waiting up to `timeout`); False on timeout. Raises EOFError when closed."""
        if timeout is not None:
            r, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
            if not r:
                return False
        data, anc, _flags, _addr = self.sock.recvmsg(1 << 16, socket.CMSG_LEN(16 * array.array("i").itemsize))
        for level, typ, payload in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
                self._fds += list(fds)
        if not data:
            self.closed = True
            raise EOFError
        self._buf += data
        if len(self._buf) > MAX_LINE and b"\n" not in self._buf:
            raise ProtocolError(f"a message longer than {MAX_LINE} bytes")
        return True

    def recv(self, timeout: float | None = None, on_line: Callable[[bytes], None] | None = None
             ) -> tuple[dict[str, Any], list[int]] | None:
        """The next message and its descriptors, or None if nothing came within `timeout` seconds. `on_line`: called
        with a message's bytes as soon as it is whole, before it is decoded."""
        end = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            if not self._fill(left):
                return None
        line, self._buf = self._buf.split(b"\n", 1)
        if on_line is not None:
            on_line(line)
        try:
            msg = json.loads(line)
        except ValueError as e:
            raise ProtocolError(f"garbled message: {line[:200]!r}") from e
        if not isinstance(msg, dict):
            raise ProtocolError(f"not an object: {line[:200]!r}")
        n = msg.get("nfds", 0)
        fds: list[int] = []
        if n:
            if not isinstance(n, int) or n < 0 or n > len(self._fds):
                raise ProtocolError(f"message announces {n!r} descriptors, {len(self._fds)} arrived")
            fds, self._fds = self._fds[:n], self._fds[n:]
        return msg, fds

    def close(self) -> None:
        close_all(self._fds)
        self._fds = []
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed = True


def _default(o: Any) -> Any:
    try:
        return float(o)
    except Exception:  # noqa: BLE001
        return str(o)


# -- plain values ----------------------------------------------------------------------------------------------------

def encode(x: Any, tensor: Callable[[Any], int] | None = None) -> Any:
    """A JSON-able form of `x`; tensors are handed to `tensor` (which returns their leaf index)."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        if math.isfinite(x):
            return x
        return {"$": "float", "v": repr(x)}
    if isinstance(x, complex):
        return {"$": "complex", "v": [encode(x.real), encode(x.imag)]}
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # a namedtuple: its values, as a tuple
        return {"$": "tuple", "v": [encode(v, tensor) for v in x]}
    if isinstance(x, tuple):
        return {"$": "tuple", "v": [encode(v, tensor) for v in x]}
    if isinstance(x, list):
        return [encode(v, tensor) for v in x]
    if isinstance(x, dict):
        return {"$": "dict", "v": [[encode(k), encode(v, tensor)] for k, v in x.items()]}
    t = type(x)
    mod = getattr(t, "__module__", "")
    if mod.startswith("torch"):
        name = t.__name__
        if name == "dtype":
            return {"$": "dtype", "v": str(x).replace("torch.", "")}
        if name == "Size":
            return {"$": "size", "v": list(x)}
        if name == "device":
            return {"$": "device", "v": str(x)}
        if tensor is not None and hasattr(x, "data_ptr"):
            return {"$": "tensor", "v": tensor(x)}
    if mod.startswith("numpy") and hasattr(x, "item") and getattr(x, "ndim", 1) == 0:
        return encode(x.item(), tensor)
    raise TypeError(f"cannot pass a value of type {t.__module__}.{t.__name__} between processes")


def decode(x: Any, tensor: Callable[[int], Any] | None = None) -> Any:
    if isinstance(x, list):
        return [decode(v, tensor) for v in x]
    if not isinstance(x, dict):
        return x
    tag, v = x.get("$"), x.get("v")
    if tag == "float":
        return float(v)
    if tag == "complex":
        return complex(decode(v[0]), decode(v[1]))
    if tag == "tuple":
        return tuple(decode(e, tensor) for e in v)
    if tag == "dict":
        return {decode(k): decode(e, tensor) for k, e in v}
    if tag in ("dtype", "size", "device"):
        import torch

        if tag == "dtype":
            dt = getattr(torch, str(v), None)
            if not isinstance(dt, torch.dtype):
                raise ProtocolError(f"not a dtype: {v!r}")
            return dt
        return torch.Size(v) if tag == "size" else torch.device(v)
    if tag == "tensor":
        if tensor is None:
            raise ProtocolError("a tensor where none may travel")
        return tensor(int(v))
    raise ProtocolError(f"unknown tag {tag!r}")


def close_all(fds: list[int]) -> None:
    """Closes every descriptor; one already closed (or never valid) is skipped."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
