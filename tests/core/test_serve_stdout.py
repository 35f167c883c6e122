"""`kernel-lsp serve` over stdio: fd 1 carries LSP frames only, even when code in the process writes to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NOISY_SERVER = Path(__file__).resolve().parents[1] / "server" / "noisy_server.py"


def frame(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def parse_frames(data: bytes) -> list[dict]:
    """Strict parser: every byte of `data` must belong to a well-formed frame."""
    out = []
    pos = 0
    while pos < len(data):
        end = data.index(b"\r\n\r\n", pos)
        headers = data[pos:end].decode("ascii").split("\r\n")
        length = None
        for h in headers:
            name, _, value = h.partition(":")
            assert name.strip().lower() in ("content-length", "content-type"), f"bad header line {h!r}"
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        assert length is not None, f"frame without Content-Length at byte {pos}"
        body = data[end + 4 : end + 4 + length]
        assert len(body) == length, "truncated frame"
        out.append(json.loads(body))
        pos = end + 4 + length
    return out


def test_stdout_carries_only_frames_while_the_process_writes_to_fd1(tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "shutdown"},
        {"jsonrpc": "2.0", "method": "exit"},
    ]
    proc = subprocess.run(
        [sys.executable, str(NOISY_SERVER), "--log-file", str(log_file)],
        input=b"".join(frame(m) for m in msgs), capture_output=True, env=env, timeout=120, cwd=tmp_path,
    )
    frames = parse_frames(proc.stdout)
    by_id = {f.get("id"): f for f in frames if "id" in f}
    assert by_id[1]["result"]["serverInfo"]["name"] == "kernel-lsp"
    assert "capabilities" in by_id[1]["result"]
    assert 2 in by_id and by_id[2].get("result") is None
    # The noise went to stderr instead, and the log reached both stderr and the log file.
    assert b"noise from C level on fd 1" in proc.stderr
    assert b"noise from print()" in proc.stderr
    assert b"serving on stdio" in proc.stderr
    assert "serving on stdio" in log_file.read_text()
