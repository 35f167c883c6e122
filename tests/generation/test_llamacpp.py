"""The real llama-cpp-python path with the embedded small GGUF."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from kernel_lsp.config import Settings
from kernel_lsp.generation.backends import LlamaCppBackend, open_backend
from kernel_lsp.generation.errors import BackendUnavailable

pytestmark = pytest.mark.model
MSGS = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
LONG = [{"role": "user", "content": "Count from 1 to 2000, one number per line, without stopping."}]


def test_lazy_load_and_chat(llama_backend):
    pieces: list[str] = []
    c = llama_backend.chat(MSGS, max_tokens=48, temperature=0.7, seed=1, on_text=pieces.append)
    assert llama_backend.loaded and c.text.strip() and 0 < c.completion_tokens <= 48
    assert "".join(pieces) == c.text and len(pieces) == c.completion_tokens  # the text as it came, piece by piece
    assert c.finish_reason in ("stop", "length") and c.seconds > 0
    assert c.prompt_tokens == llama_backend.count_tokens(MSGS) > llama_backend.count_tokens(MSGS[0]["content"])


def test_same_seed_same_text_different_seeds_differ(llama_backend):
    a = llama_backend.chat(MSGS, max_tokens=40, temperature=0.9, seed=7).text
    b = llama_backend.chat(MSGS, max_tokens=40, temperature=0.9, seed=7).text
    c = llama_backend.chat(MSGS, max_tokens=40, temperature=0.9, seed=8).text
    d = llama_backend.chat(MSGS, max_tokens=40, temperature=0.9, seed=9).text
    assert a == b
    assert len({a, c, d}) >= 2


def test_cancel_stops_mid_generation(llama_backend):
    cancel = threading.Event()
    delay = 1.5  # on an idle machine: mid-generation; on a loaded one it may still be in prompt processing
    timer = threading.Timer(delay, cancel.set)
    t0 = time.perf_counter()
    timer.start()
    c = llama_backend.chat(LONG, max_tokens=2000, temperature=0.7, seed=3, cancel=cancel)
    elapsed = time.perf_counter() - t0
    assert c.finish_reason == "cancelled", c
    assert elapsed < delay + 1.0  # stops within a second, during prompt processing or between tokens
    assert c.completion_tokens < 2000
    # the backend is usable again right after a cancel
    assert llama_backend.chat(MSGS, max_tokens=8, temperature=0.0, seed=1).completion_tokens > 0


def test_one_generation_at_a_time(llama_backend):
    out: list[tuple[float, float]] = []

    def go(seed: int) -> None:
        c = llama_backend.chat(MSGS, max_tokens=24, temperature=0.7, seed=seed)
        end = time.perf_counter()
        out.append((end - c.seconds, end))

    threads = [threading.Thread(target=go, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (_, e1), (s2, _) = sorted(out)
    assert s2 >= e1 - 0.05  # the second started generating after the first finished


def test_nothing_written_to_fd1(gguf):
    code = (
        "import sys\n"
        "from kernel_lsp.generation.backends import LlamaCppBackend\n"
        f"b = LlamaCppBackend({gguf!r}, n_ctx=2048, n_threads=2)\n"
        "c = b.chat([{'role': 'user', 'content': 'hi'}], max_tokens=16, temperature=0.5, seed=1)\n"
        "import threading\n"
        "ev = threading.Event(); threading.Timer(0.2, ev.set).start()\n"
        "x = b.chat([{'role': 'user', 'content': 'Count to 500. ' * 30}], max_tokens=500, temperature=0.5, seed=1,"
        " cancel=ev)\n"
        "assert x.finish_reason == 'cancelled', x\n"
        "b.count_tokens('hello'); b.close()\n"
        "sys.stderr.write('DONE %d' % c.completion_tokens)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert b"DONE" in p.stderr
    assert p.stdout == b""


def test_missing_model_file_is_a_clear_error(tmp_path):
    b = LlamaCppBackend(str(tmp_path / "nope.gguf"))
    with pytest.raises(BackendUnavailable, match="model file not found"):
        b.chat(MSGS, max_tokens=4, temperature=0, seed=0)
    with pytest.raises(BackendUnavailable, match="not found"):
        open_backend(Settings(model=str(tmp_path / "nope.gguf")))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(BackendUnavailable, match="not a GGUF"):
        open_backend(Settings(model=str(bad)))


def test_open_backend_default_is_the_embedded_gguf():
    b = open_backend(Settings())
    assert isinstance(b, LlamaCppBackend) and not b.loaded and "SmolLM2" in b.name


def test_each_token_is_a_turn_of_the_device_lease_and_no_token_runs_while_a_kernel_is_timed(llama_backend, tmp_path):
    from contextlib import contextmanager

    from evaluator.processes.lease import DeviceLease

    lease = DeviceLease("cuda:test-model", str(tmp_path))
    turns: list[tuple[float, float]] = []

    @contextmanager
    def turn(cancel):
        with lease.turn(cancel):
            t0 = time.perf_counter()
            yield
            turns.append((t0, time.perf_counter()))

    held: list[float] = []

    def timer() -> None:  # the oracle times a kernel on the same GPU for half a second, mid-generation
        time.sleep(0.4)
        with lease.exclusive(who="test timer"):
            held.append(time.perf_counter())
            time.sleep(0.5)
            held.append(time.perf_counter())

    saved = llama_backend.turn, llama_backend.n_gpu_layers
    llama_backend.turn, llama_backend.n_gpu_layers = turn, -1  # as if its layers were on the GPU
    try:
        t = threading.Thread(target=timer)
        t.start()
        c = llama_backend.chat(LONG, max_tokens=200, temperature=0.0, seed=1)
        t.join()
    finally:
        llama_backend.turn, llama_backend.n_gpu_layers = saved
    assert c.completion_tokens > 0 and len(turns) >= c.completion_tokens
    assert len(held) == 2
    overlapping = [(a, b) for a, b in turns if a < held[1] and b > held[0]]
    assert not overlapping, (held, overlapping[:3])
    assert any(a >= held[1] for a, _ in turns)  # generation went on after the timer
