"""A stand-in for an OpenAI-compatible endpoint (the `endpoint` setting), serving scripted replies: the server
under test talks to it over HTTP exactly as it talks to vLLM or llama.cpp's server, so no test hook is needed in
the product. It runs in a thread of the test process.

The script is a list of reply kinds, one per kernel completion (cycled):
  good  - the shared C++ relu2 kernel (one build for the whole test session),
  slowkernel - the same kernel made many times slower than eager: correct, not faster (one build too),
  wrong - a ModelNew that computes the wrong thing (its kernel is never called),
  prose - no code at all,
  slow  - waits until the client hangs up (a cancel), then answers nothing,
  hold  - waits until `release` is set (or 300 s), then answers like `good`,
  drip  - prose (no code), written slowly as a small model writes: a word every 0.1 s for about 6 s.
Summary, triage and analysis requests get short fixed answers.

Also a program, for tests in other languages (the editor test): `python endpoint_double.py [SCRIPT]` serves on
127.0.0.1, prints its base URL on one line, and stops when its stdin closes.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lsp_helpers import candidate_source

WRONG = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 3.0
'''


DRIP = " ".join(["I would fuse the relu and the scale into one pass over the tensor."] * 5)  # 60 words


def reply_text(kind: str) -> str:
    if kind in ("good", "hold"):
        return "Here is the kernel.\n```python\n" + candidate_source() + "```\n"
    if kind == "slowkernel":
        return "Here is the kernel.\n```python\n" + candidate_source(slow=True) + "```\n"
    if kind == "wrong":
        return "```python\n" + WRONG + "```\n"
    return "I would fuse the operators, but I cannot write the code today."


class ScriptedEndpoint:
    def __init__(self, script: str = "good", model: str = "scripted"):
        self._script = itertools.cycle([s.strip() for s in script.split(",") if s.strip()] or ["good"])
        self.model = model
        self.release = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.kernel_requests = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self.url = ""

    # --- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> str:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path.endswith("/models"):
                    self._json({"object": "list", "data": [{"id": endpoint.model, "object": "model"}]})
                else:
                    self._json({"error": "not found"}, 404)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self._json({"error": "not found"}, 404)
                    return
                endpoint._answer(self, body)

            def _json(self, obj: Any, status: int = 200) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="scripted-endpoint", daemon=True).start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        return self.url

    def stop(self) -> None:
        self.release.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def settings(self) -> dict[str, str]:
        """The client settings that point the server at this endpoint."""
        return {"endpoint": self.url, "endpointModel": self.model}

    def __enter__(self) -> ScriptedEndpoint:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- answers -------------------------------------------------------------------------------------------------
    def _answer(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(body)
        user = (body.get("messages") or [{}])[-1].get("content", "")
        if user.startswith("In one or two sentences"):
            text = "Summary: a scripted kernel."
        elif user.startswith("## Triage"):
            text = "1"
        elif "## Analysis (no code yet)" in user:
            text = "- fuse relu and scale into one pass"
        else:
            with self._lock:
                kind = next(self._script)
                self.kernel_requests += 1
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Cache-Control", "no-cache")
            h.end_headers()
            if kind == "slow" and not self._wait(h, lambda: False):
                return
            if kind == "hold":
                self._wait(h, self.release.is_set, limit=300.0)
            if kind == "drip":
                self._stream(h, DRIP, piece=lambda t: t.split(" "), pause=0.1)
            else:
                self._stream(h, self.kernel_text(kind, body))
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        self._stream(h, text)

    def kernel_text(self, kind: str, body: dict[str, Any]) -> str:
        """The answer to a kernel request of this kind (a stand-in with answers of its own overrides this)."""
        return reply_text(kind)

    def _wait(self, h: BaseHTTPRequestHandler, done: Any, limit: float = 120.0) -> bool:
        """Keep the stream open (comment lines every 50 ms) until `done()` or `limit`; False when the client hung up."""
        end = time.monotonic() + limit
        while time.monotonic() < end and not done():
            try:
                h.wfile.write(b": waiting\n\n")
                h.wfile.flush()
            except OSError:
                return False
            time.sleep(0.05)
        return True

    def _stream(self, h: BaseHTTPRequestHandler, text: str, piece: Any = None, pause: float = 0.0) -> None:
        def event(obj: dict[str, Any]) -> bytes:
            return f"data: {json.dumps(obj)}\n\n".encode()

        if piece is not None:
            pieces = [w + " " for w in piece(text)]
        else:
            pieces = [text[i:i + 200] for i in range(0, len(text), 200)] or [""]
        try:
            for p in pieces:
                h.wfile.write(event({"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}))
                if pause:
                    h.wfile.flush()
                    time.sleep(pause)
            h.wfile.write(event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
            h.wfile.write(event({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": len(pieces)}}))
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        except OSError:
            pass
        h.close_connection = True


def main(argv: list[str]) -> int:
    endpoint = ScriptedEndpoint(argv[0] if argv else "good")
    print(endpoint.start(), flush=True)
    try:
        sys.stdin.read()  # until the parent closes it (or dies)
    finally:
        endpoint.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
