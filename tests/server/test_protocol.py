"""Noise on the connection, sent as raw bytes over stdio: each malformed message gets the JSON-RPC error it should
(-32700, -32600, -32602) and no `window/showMessage` pop-up; every request is answered; the server keeps serving."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from lsp_helpers import SERVER_CMD, server_env


class RawClient:
    """`kernel-lsp serve` over stdio, spoken to in bytes: frames go out as given, frames coming back are queued."""

    def __init__(self, root: Path, cache: Path):
        self.proc = subprocess.Popen(SERVER_CMD, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=server_env(cache), cwd=root)
        self.frames: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if not line.strip():
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            assert length is not None
            self.frames.put(json.loads(out.read(length)))

    def send_body(self, body: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def send(self, msg: dict[str, Any]) -> None:
        self.send_body(json.dumps(msg).encode())

    def response(self, msg_id: Any, timeout: float = 20.0) -> dict[str, Any]:
        """The next response with this id (id None: an error response to a message without a readable id)."""
        end = time.monotonic() + timeout
        while True:
            for f in self.seen:
                if "method" not in f and f.get("id", "missing") == msg_id and not f.get("_taken"):
                    f["_taken"] = True
                    return f
            try:
                self.seen.append(self.frames.get(timeout=max(0.01, end - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"no response with id {msg_id!r} within {timeout} s") from None

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.seen.append(self.frames.get(timeout=0.05))
            except queue.Empty:
                pass


def test_malformed_messages_get_json_rpc_errors_and_no_pop_ups(tmp_path: Path, cache_dir: Path) -> None:
    c = RawClient(tmp_path, cache_dir)
    try:
        c.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}})
        assert "capabilities" in c.response(1)["result"]
        c.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

        def error(msg_id: Any) -> int:
            r = c.response(msg_id)
            assert "result" not in r and r["jsonrpc"] == "2.0", r
            return r["error"]["code"]

        c.send_body(b'{"jsonrpc": "2.0", "id": 2, "method": "textDocument/hover", ')  # cut short: not JSON
        assert error(None) == -32700
        c.send_body(b'{"jsonrpc":"2.0","id":3,"method":"\xff\xfe"}')  # not UTF-8
        assert error(None) == -32700
        c.send_body(b"[1, 2, 3]")  # not an object
        assert error(None) == -32600
        c.send_body(b'"hello"')
        assert error(None) == -32600
        c.send({"jsonrpc": "2.0", "id": 777})  # neither a request nor a response
        assert error(777) == -32600
        c.send({"jsonrpc": "1.0", "id": 778, "method": "shutdown"})
        assert error(778) == -32600
        c.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {  # never opened: ignored
            "textDocument": {"uri": (tmp_path / "never.py").as_uri(), "version": 2},
            "contentChanges": [{"text": "x = 1\n"}]}})
        doc = {"uri": (tmp_path / "m.py").as_uri()}
        c.send({"jsonrpc": "2.0", "id": 10, "method": "textDocument/hover", "params": {"textDocument": doc}})
        assert error(10) == -32602
        c.send({"jsonrpc": "2.0", "id": 11, "method": "textDocument/codeLens", "params": None})
        assert error(11) == -32602
        c.send({"jsonrpc": "2.0", "id": 12, "method": "textDocument/codeAction", "params": {
            "textDocument": doc, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}}})
        assert error(12) == -32602
        c.send({"jsonrpc": "2.0", "id": 13, "method": "kernelLsp/noSuchMethod", "params": {}})
        assert error(13) == -32601
        c.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": doc["uri"], "languageId": "python", "version": 1, "text": "x = 1\n"}}})
        # ... and the server still serves.
        c.send({"jsonrpc": "2.0", "id": 20, "method": "textDocument/hover",
                "params": {"textDocument": doc, "position": {"line": 0, "character": 0}}})
        assert c.response(20)["result"] is None
        c.send({"jsonrpc": "2.0", "id": 21, "method": "shutdown"})
        assert c.response(21)["result"] is None
        c.drain(0.3)
        c.send({"jsonrpc": "2.0", "method": "exit"})
        assert c.proc.wait(timeout=20) == 0
        c.drain(0.2)
        popups = [f for f in c.seen if f.get("method") == "window/showMessage" and f["params"]["type"] == 1]
        assert popups == []
        assert not [f for f in c.seen if "id" in f and "method" not in f and not f.get("_taken")]  # nothing extra
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()
