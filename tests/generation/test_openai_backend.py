"""The OpenAI-compatible HTTP backend against `python -m llama_cpp.server`, and an endpoint that is down."""

from __future__ import annotations

import json
import threading
import time

import pytest

from kernel_lsp.config import Settings
from kernel_lsp.generation import Engine
from kernel_lsp.generation.backends import OpenAIBackend, open_backend
from kernel_lsp.generation.errors import BackendUnavailable, GenerationError
from kernel_lsp.history import History
from kernel_lsp.tasks import task_from_file

from .conftest import ROOT, free_port

MSGS = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


@pytest.mark.model
def test_chat_streams_through_the_server(llama_server):
    b = open_backend(Settings(endpoint=llama_server, endpoint_model="smol"))
    assert isinstance(b, OpenAIBackend)
    b.prepare()
    c = b.chat(MSGS, max_tokens=24, temperature=0.7, seed=5)
    assert c.text.strip() and 0 < c.completion_tokens <= 24 and c.prompt_tokens > 0
    assert c.finish_reason in ("stop", "length")
    pieces: list[str] = []
    again = b.chat(MSGS, max_tokens=24, temperature=0.7, seed=5, on_text=pieces.append)
    assert again.text == c.text  # the server honours the seed
    assert "".join(pieces) == c.text and len(pieces) > 1  # streamed, piece by piece


@pytest.mark.model
def test_cancel_over_http(llama_server):
    b = OpenAIBackend(llama_server, "smol")
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    t0 = time.perf_counter()
    c = b.chat([{"role": "user", "content": "Count from 1 to 2000, one number per line."}], max_tokens=2000,
               temperature=0.7, seed=1, cancel=cancel)
    elapsed = time.perf_counter() - t0
    # The 135M model sometimes ends its list early: then it must have ended before the cancel came.
    assert c.finish_reason == "cancelled" or (c.finish_reason == "stop" and elapsed < 0.5), (c.finish_reason, elapsed)
    assert elapsed < 0.5 + 1.0
    # and the server still answers afterwards
    assert b.chat(MSGS, max_tokens=4, temperature=0.0, seed=1).completion_tokens > 0


def test_endpoint_down_is_a_clear_error():
    port = free_port()
    b = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m")
    with pytest.raises(BackendUnavailable) as e:
        b.chat(MSGS, max_tokens=4, temperature=0.0, seed=0)
    assert str(e.value) == f"cannot reach http://127.0.0.1:{port}/v1/chat/completions: connection refused " \
                           "(is the server running?)"
    with pytest.raises(BackendUnavailable, match="connection refused"):
        b.prepare()


def test_bad_endpoint_url():
    with pytest.raises(BackendUnavailable, match="bad endpoint URL"):
        OpenAIBackend("localhost:8080")


def test_http_error_names_the_api_key_variable(llama_server_like_401):
    b = OpenAIBackend(llama_server_like_401, "m", api_key_env="MY_KEY")
    with pytest.raises(GenerationError, match=r"HTTP 401.*\$MY_KEY"):
        b.chat(MSGS, max_tokens=4, temperature=0.0, seed=0)


@pytest.fixture
def llama_server_like_401():
    """A tiny HTTP server that refuses every request with 401."""
    import http.server

    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"error": "invalid api key"}')

        def log_message(self, *a):  # quiet
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_engine_job_fails_cleanly_when_the_endpoint_is_down(tmp_path):
    port = free_port()
    settings = Settings(endpoint=f"http://127.0.0.1:{port}/v1")
    task = task_from_file(ROOT / "examples" / "relu_scale.py")
    with History(tmp_path) as h:
        events = []
        result = Engine(settings, evaluator=None, history=h).run(task, on_event=events.append)
        assert result.state == "failed" and "connection refused" in result.message
        assert h.job(result.job_id).state == "failed" and "connection refused" in h.job(result.job_id).message
        assert events[-1].stage == "done" and events[-1].percentage == 100


def test_engine_job_fails_cleanly_without_the_model_file(tmp_path):
    task = task_from_file(ROOT / "examples" / "relu_scale.py")
    with History(tmp_path) as h:
        result = Engine(Settings(model=str(tmp_path / "missing.gguf")), None, h).run(task)
        assert result.state == "failed" and "model file not found" in result.message
        assert result.candidates == [] and result.best is None


class _EndlessStream(threading.Thread):
    """An OpenAI-compatible endpoint on 127.0.0.1 that streams one token every 20 ms and never stops."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    for i in range(100_000):
                        chunk = {"choices": [{"index": 0, "delta": {"content": f"{i}\n"}, "finish_reason": None}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(0.02)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def run(self) -> None:
        self.server.serve_forever(poll_interval=0.05)


def test_cancel_stops_an_endless_stream_promptly():
    server = _EndlessStream()
    server.start()
    try:
        b = OpenAIBackend(server.url, "endless")
        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        t0 = time.perf_counter()
        c = b.chat(MSGS, max_tokens=100_000, temperature=0.0, seed=0, cancel=cancel)
        elapsed = time.perf_counter() - t0
        assert c.finish_reason == "cancelled"
        assert 0.4 < elapsed < 1.5
        assert c.text.startswith("0\n1\n")  # what streamed before the cancel is kept
    finally:
        server.server.shutdown()
