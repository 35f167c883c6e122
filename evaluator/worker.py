"""The worker process: `python -m evaluator.worker REQ_FD RES_FD KIND`.

Runs untrusted candidate code. Its fd 1 is pointed at fd 2 (the worker log) first thing, so a candidate that
prints, or writes to fd 1 directly, cannot corrupt anything; requests and answers travel over the two pipes
whose numbers it was given, one JSON object per line.

Ops: "compile" (exec the candidate so load_inline builds; nvcc check of CUDA sources without a GPU), "run"
(verify, time, profile a candidate against the reference), "profile" (the reference alone), "info" (device),
"diag" (environment and pid, for tests).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any


class Channel:
    def __init__(self, req_fd: int, res_fd: int) -> None:
        self._req = os.fdopen(req_fd, "rb", buffering=0)
        self._res = res_fd
        self._buf = b""

    def send(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg, default=_json_default) + "\n").encode()
        while data:
            n = os.write(self._res, data)
            data = data[n:]

    def recv(self) -> dict | None:
        while b"\n" not in self._buf:
            chunk = self._req.read(1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)


def _json_default(o: Any) -> Any:
    try:
        return float(o)
    except Exception:  # noqa: BLE001
        return str(o)


def _watch_parent() -> None:
    """Die with the parent: when it goes (even by SIGKILL), kill this worker's whole group (compilers too)."""
    import signal
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                try:
                    os.killpg(os.getpgid(0), signal.SIGKILL)
                finally:
                    os._exit(1)

    threading.Thread(target=watch, name="klsp-parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    req_fd, res_fd, kind = int(argv[0]), int(argv[1]), argv[2]
    os.dup2(2, 1)  # candidate output on fd 1 lands in the log, never on a pipe the caller reads
    sys.stdout = sys.stderr
    os.set_inheritable(res_fd, False)
    os.set_inheritable(req_fd, False)
    chan = Channel(req_fd, res_fd)
    _watch_parent()
    t0 = time.perf_counter()
    from . import runtime

    ready = runtime.startup(kind)
    chan.send({"type": "ready", "pid": os.getpid(), "kind": kind, "startup_s": time.perf_counter() - t0, **ready})
    while True:
        req = chan.recv()
        if req is None:
            return 0
        rid, op, args = req.get("id"), req.get("op"), req.get("args", {})

        def emit(stage: str, message: str = "") -> None:
            chan.send({"type": "stage", "stage": stage, "message": message})

        try:
            result = runtime.dispatch(op, args, emit)
            chan.send({"type": "result", "id": rid, "ok": True, **result})
        except BaseException as e:  # report, then stay alive; the pool decides whether to reuse this worker  # noqa: BLE001
            chan.send({"type": "result", "id": rid, "ok": False, "error": f"{type(e).__name__}: {e}",
                       "traceback": traceback.format_exc()[-4000:]})
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
