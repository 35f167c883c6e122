"""OpenAI-compatible HTTP backend (`POST {base}/chat/completions`): llama.cpp server, vLLM, Ollama, hosted APIs.

Standard library only (http.client). Responses are streamed (server-sent events); a watcher thread shuts the
socket down when `cancel` is set, so a cancel stops even a call still waiting for its first token. Prompt
token counts come from the server's `usage` when it sends one, else from an estimate (no tokenizer here).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from ..errors import BackendUnavailable, GenerationError
from .base import (
    FINISH_CANCELLED,
    FINISH_LENGTH,
    FINISH_STOP,
    Completion,
    Message,
    TextCallback,
    TokenCallback,
    approx_tokens,
)

log = logging.getLogger(__name__)


class OpenAIBackend:
    def __init__(self, base_url: str, model: str = "default", *, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 600.0, connect_timeout: float = 10.0):
        base = base_url.rstrip("/")
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BackendUnavailable(f"bad endpoint URL {base_url!r}: expected http(s)://host[:port][/v1]")
        self.base_url = base
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.name = f"{model} @ {base}"
        self._parts = parts

    # --- HTTP ------------------------------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
        return cls(self._parts.hostname, self._parts.port, timeout=self.connect_timeout)

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            h["Authorization"] = f"Bearer {key}"
        return h

    def _path(self, tail: str) -> str:
        return f"{self._parts.path.rstrip('/')}/{tail}"

    def _connect(self, conn: http.client.HTTPConnection, url: str) -> None:
        try:
            conn.connect()
        except ConnectionRefusedError:
            raise BackendUnavailable(f"cannot reach {url}: connection refused (is the server running?)") from None
        except TimeoutError:
            raise BackendUnavailable(f"cannot reach {url}: timed out after {self.connect_timeout:.0f} s") from None
        except OSError as e:
            raise BackendUnavailable(f"cannot reach {url}: {e.strerror or e}") from None

    def _send(self, conn: http.client.HTTPConnection, method: str, tail: str, body: dict[str, Any] | None,
              url: str) -> http.client.HTTPResponse:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, self._path(tail), body=data, headers=self._headers())
        assert conn.sock is not None
        conn.sock.settimeout(self.timeout)
        resp = conn.getresponse()
        if resp.status >= 400:
            detail = resp.read(2000).decode("utf-8", "replace").strip()
            conn.close()
            hint = f" (set the API key in ${self.api_key_env})" if resp.status in (401, 403) else ""
            raise GenerationError(f"{url}: HTTP {resp.status} {resp.reason}{hint}: {detail[:300]}")
        return resp

    def models(self) -> list[str]:
        """The endpoint's model ids (GET /models): a cheap reachability check."""
        url = f"{self.base_url}/models"
        conn = self._connection()
        try:
            self._connect(conn, url)
            data = json.loads(self._send(conn, "GET", "models", None, url).read().decode("utf-8"))
        except (OSError, http.client.HTTPException, json.JSONDecodeError) as e:
            raise GenerationError(f"{url}: {e}") from None
        finally:
            conn.close()
        return [m.get("id", "") for m in data.get("data", [])]

    def prepare(self) -> None:
        """Fail early and clearly when the endpoint is down (a missing /models route is tolerated)."""
        try:
            self.models()
        except BackendUnavailable:
            raise
        except GenerationError as e:
            log.info("endpoint has no usable /models (%s); going on", e)

    # --- generation ------------------------------------------------------------------------------------------
    def count_tokens(self, text_or_messages: str | list[Message]) -> int:
        return approx_tokens(text_or_messages)

    def chat(self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int,
             stop: list[str] | None = None, cancel: threading.Event | None = None,
             on_tokens: TokenCallback | None = None, on_text: TextCallback | None = None) -> Completion:
        prompt_estimate = self.count_tokens(messages)
        if cancel is not None and cancel.is_set():
            return Completion("", prompt_estimate, 0, 0.0, FINISH_CANCELLED)
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature, "seed": seed, "stream": True,
                                "stream_options": {"include_usage": True}}
        if stop:
            body["stop"] = stop
        t0 = time.perf_counter()
        url = f"{self.base_url}/chat/completions"
        conn = self._connection()
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(conn, cancel, done), daemon=True) if cancel else None
        parts: list[str] = []
        n = 0
        usage: dict[str, Any] = {}
        finish = FINISH_STOP
        try:
            self._connect(conn, url)
            if watcher is not None:
                watcher.start()
            resp = self._send(conn, "POST", "chat/completions", body, url)
            for raw in resp:
                if cancel is not None and cancel.is_set():
                    finish = FINISH_CANCELLED
                    break
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    chunk = json.loads(payload)
                except json.JSONDecodeError:
                    log.debug("skipping a malformed event: %.200s", payload)
                    continue
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        parts.append(piece)
                        n += 1
                        if on_tokens is not None:
                            on_tokens(n)
                        if on_text is not None:
                            on_text(piece)
                    if choice.get("finish_reason"):
                        finish = FINISH_LENGTH if choice["finish_reason"] == "length" else FINISH_STOP
        except (OSError, http.client.HTTPException) as e:
            if cancel is not None and cancel.is_set():
                finish = FINISH_CANCELLED
            else:
                raise GenerationError(f"{url}: connection lost: {e}") from None
        finally:
            done.set()
            conn.close()
        if cancel is not None and cancel.is_set():
            finish = FINISH_CANCELLED
        return Completion("".join(parts), int(usage.get("prompt_tokens") or prompt_estimate),
                          int(usage.get("completion_tokens") or n), time.perf_counter() - t0, finish)

    @staticmethod
    def _watch(conn: http.client.HTTPConnection, cancel: threading.Event, done: threading.Event) -> None:
        while not done.is_set():
            if cancel.wait(0.05):
                sock = conn.sock
                if sock is not None and not done.is_set():
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return

    def close(self) -> None:
        pass
