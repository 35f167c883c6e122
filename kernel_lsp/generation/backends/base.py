"""The model backend protocol: chat completions with per-call seeds and prompt cancellation."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}
FINISH_STOP, FINISH_LENGTH, FINISH_CANCELLED = "stop", "length", "cancelled"
# called with the number of tokens written so far, after each new one (from the thread that runs `chat`)
TokenCallback = Callable[[int], None]
# called with each new piece of text as it arrives (same thread), so a caller can act on what is complete so far
TextCallback = Callable[[str], None]


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    finish_reason: str  # "stop" | "length" | "cancelled"

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def cancelled(self) -> bool:
        return self.finish_reason == FINISH_CANCELLED


@runtime_checkable
class Backend(Protocol):
    """What the engine needs from a model. Implementations must never write to fd 1."""

    name: str

    def chat(self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int,
             stop: list[str] | None = None, cancel: threading.Event | None = None,
             on_tokens: TokenCallback | None = None, on_text: TextCallback | None = None) -> Completion:
        """One completion. A set `cancel` stops generation within a fraction of a second and returns the text so
        far with finish_reason "cancelled". `on_tokens`, when given, is told the count of tokens written so far
        as each one arrives (cheap; the caller throttles what it shows); `on_text` each new piece of text. Raises
        GenerationError for failures the user must fix."""
        ...

    def count_tokens(self, text_or_messages: str | list[Message]) -> int: ...

    def close(self) -> None: ...


def approx_tokens(text_or_messages: str | list[Message]) -> int:
    """A tokenizer-free estimate (about 3.6 characters per token for code and English, 4 tokens per message of
    chat-template overhead). Used where no tokenizer is at hand (HTTP endpoints)."""
    if isinstance(text_or_messages, str):
        return max(1, round(len(text_or_messages) / 3.6))
    return sum(approx_tokens(m.get("content", "") or "") + 4 for m in text_or_messages) + 2
