"""In-process llama-cpp-python backend.

The model loads lazily on the first call (so opening a backend is free), one generation runs at a time per model
(a lock), tokens are streamed so that a set `cancel` event stops generation between two tokens, and each call
takes its own seed (best-of-n is a loop over seeds; the same seed gives the same text). With `verbose=False`
llama.cpp logs nothing to fd 1 (tested in tests/generation/test_llamacpp.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..errors import BackendUnavailable, GenerationError
from .base import FINISH_CANCELLED, FINISH_LENGTH, FINISH_STOP, Completion, Message, TextCallback, TokenCallback

log = logging.getLogger(__name__)


class LlamaCppBackend:
    def __init__(self, model_path: str, *, n_ctx: int = 8192, n_gpu_layers: int = 0, n_threads: int = 0,
                 chat_format: str = "", seed: int = 0, name: str | None = None):
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.n_gpu_layers = n_gpu_layers
        self.n_threads = n_threads
        self.chat_format = chat_format
        self.seed = seed
        self.name = name or os.path.basename(model_path)
        self._llm: Any = None
        self._formatter: Any = None
        self._lock = threading.Lock()  # one generation at a time per model
        self._cancel: threading.Event | None = None  # the running call's cancel event (for the abort callback)
        self._abort_cb: Any = None
        self._load_lock = threading.Lock()
        # a turn on the device per token (the evaluator's host-wide lease): while the oracle times a kernel on the
        # GPU this model shares, generation pauses between two tokens. None: the model runs on the CPU alone.
        self.turn: Callable[[threading.Event | None], AbstractContextManager[Any]] | None = None

    # --- loading ---------------------------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._llm is not None

    def load(self) -> None:
        """Load the model now (the engine calls this under its "loading model" event)."""
        self._get()

    prepare = load

    def _get(self) -> Any:
        with self._load_lock:
            if self._llm is not None:
                return self._llm
            if not os.path.isfile(self.model_path):
                raise BackendUnavailable(f"model file not found: {self.model_path}")
            try:
                import llama_cpp
            except ImportError as e:  # pragma: no cover - a dependency of the package
                raise BackendUnavailable(f"llama-cpp-python is not installed: {e}") from None
            t0 = time.perf_counter()
            kwargs: dict[str, Any] = {"n_ctx": self.n_ctx, "n_gpu_layers": self.n_gpu_layers, "seed": self.seed,
                                      "verbose": False}
            if self.n_threads > 0:
                kwargs["n_threads"] = self.n_threads
            if self.chat_format:
                kwargs["chat_format"] = self.chat_format
            try:
                self._llm = llama_cpp.Llama(self.model_path, **kwargs)
            except (ValueError, RuntimeError, OSError) as e:
                raise BackendUnavailable(f"cannot load model {self.model_path}: {e}") from None
            self._formatter = self._make_formatter(self._llm)
            self._install_abort(llama_cpp)
            log.info("loaded %s in %.1f s (n_ctx=%d, chat format %s)", self.name, time.perf_counter() - t0,
                     self.n_ctx, self.chat_format or self._llm.chat_format)
            return self._llm

    def _install_abort(self, llama_cpp: Any) -> None:
        """Let a cancel interrupt llama_decode itself (prompt processing of a long prompt takes seconds on a
        CPU; between-token checks alone would wait for it). Private API: without it, cancel still works between
        tokens."""
        try:
            cb = llama_cpp.ggml_abort_callback(lambda _data: bool(self._cancel is not None and self._cancel.is_set()))
            llama_cpp.llama_set_abort_callback(self._llm._ctx.ctx, cb, None)
            self._abort_cb = cb  # keep the C callback alive as long as the context
        except Exception as e:  # noqa: BLE001
            log.debug("no abort callback (%s); cancel is checked between tokens only", e)

    def _make_formatter(self, llm: Any) -> Any:
        """The GGUF's own chat template, to count prompt tokens exactly; None for named formats."""
        template = llm.metadata.get("tokenizer.chat_template") if not self.chat_format else None
        if not template:
            return None
        try:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            def tok(tid_key: str) -> str:
                tid = int(llm.metadata.get(tid_key, -1))
                return llm.detokenize([tid]).decode("utf-8", "ignore") if tid >= 0 else ""

            return Jinja2ChatFormatter(template, eos_token=tok("tokenizer.ggml.eos_token_id"),
                                       bos_token=tok("tokenizer.ggml.bos_token_id"))
        except Exception as e:  # noqa: BLE001 - only the token count degrades
            log.debug("no exact prompt token count: %s", e)
            return None

    # --- tokens ----------------------------------------------------------------------------------------------
    def count_tokens(self, text_or_messages: str | list[Message]) -> int:
        llm = self._get()
        if isinstance(text_or_messages, str):
            return len(llm.tokenize(text_or_messages.encode("utf-8"), add_bos=False, special=True))
        if self._formatter is not None:
            try:
                prompt = self._formatter(messages=text_or_messages).prompt
                return len(llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True))
            except Exception as e:  # noqa: BLE001
                log.debug("chat template failed for counting: %s", e)
        return sum(self.count_tokens(m.get("content", "") or "") + 4 for m in text_or_messages) + 2

    # --- generation ------------------------------------------------------------------------------------------
    def chat(self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int,
             stop: list[str] | None = None, cancel: threading.Event | None = None,
             on_tokens: TokenCallback | None = None, on_text: TextCallback | None = None) -> Completion:
        llm = self._get()
        prompt_tokens = self.count_tokens(messages)
        room = self.n_ctx - prompt_tokens
        if room < 16:
            raise GenerationError(f"the prompt ({prompt_tokens} tokens) does not fit the context window "
                                  f"(n_ctx={self.n_ctx}); raise n_ctx or lower history_window")
        max_tokens = min(max_tokens, room)
        with self._lock:
            if cancel is not None and cancel.is_set():
                return Completion("", prompt_tokens, 0, 0.0, FINISH_CANCELLED)
            t0 = time.perf_counter()
            self._cancel = cancel
            parts: list[str] = []
            n = 0
            finish = FINISH_STOP
            try:
                stream = llm.create_chat_completion(messages, max_tokens=max_tokens, temperature=temperature,
                                                    seed=seed, stop=stop or [], stream=True)
                tokens = iter(stream)
                turn = self.turn if self.turn is not None and self.n_gpu_layers != 0 else None
                try:
                    while True:
                        try:
                            with turn(cancel) if turn is not None else nullcontext():  # a token: the device's turn
                                chunk = next(tokens, None)
                        except Exception:
                            if cancel is None or not cancel.is_set():
                                raise
                            chunk = None  # cancelled while waiting for the device's turn
                        if cancel is not None and cancel.is_set():
                            finish = FINISH_CANCELLED
                            break
                        if chunk is None:
                            break
                        choice = chunk["choices"][0]
                        piece = choice.get("delta", {}).get("content")
                        if piece:
                            parts.append(piece)
                            n += 1
                            if on_tokens is not None:
                                on_tokens(n)
                            if on_text is not None:
                                on_text(piece)
                        if choice.get("finish_reason"):
                            finish = FINISH_LENGTH if choice["finish_reason"] == "length" else FINISH_STOP
                finally:
                    stream.close()
            except ValueError as e:  # e.g. "Requested tokens exceed context window"
                raise GenerationError(f"{self.name}: {e}") from None
            except RuntimeError as e:  # llama_decode aborted by the cancel callback, or failed
                if cancel is None or not cancel.is_set():
                    raise GenerationError(f"{self.name}: {e}") from None
                finish = FINISH_CANCELLED
            finally:
                self._cancel = None
            return Completion("".join(parts), prompt_tokens, n, time.perf_counter() - t0, finish)

    def close(self) -> None:
        with self._load_lock:
            llm, self._llm = self._llm, None
        if llm is not None:
            try:
                llm.close()
            except Exception as e:  # noqa: BLE001 - closing is best effort
                log.debug("closing the model: %s", e)
