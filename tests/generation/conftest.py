from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kernel_lsp.models import ModelNotFound, embedded_gguf

ROOT = Path(__file__).parents[2]
KERNELS = Path(__file__).parent / "kernels"


@pytest.fixture(scope="session")
def gguf() -> str:
    try:
        return str(embedded_gguf())
    except ModelNotFound as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def llama_backend(gguf):
    from kernel_lsp.generation.backends import LlamaCppBackend

    b = LlamaCppBackend(gguf, n_ctx=4096, n_threads=2)
    yield b
    b.close()


@pytest.fixture(scope="session")
def tokenizer_count(gguf):
    """Exact token counts of the small model (vocab only: loads in about a second)."""
    import llama_cpp

    vocab = llama_cpp.Llama(gguf, vocab_only=True, verbose=False)

    def count(x) -> int:
        if isinstance(x, str):
            return len(vocab.tokenize(x.encode(), add_bos=False, special=True))
        return sum(count(m["content"]) + 5 for m in x) + 3

    return count


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(gguf, tmp_path_factory):
    """`python -m llama_cpp.server` on 127.0.0.1 with the small GGUF; yields the /v1 base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with log.open("wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1",
                                 "--port", str(port), "--n_ctx", "4096", "--n_threads", "2"],
                                stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(base + "/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
