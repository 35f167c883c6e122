"""Test doubles (tests only): a scripted model backend. The evaluator in strategy tests is the real one."""

from __future__ import annotations

import threading
from collections.abc import Callable

from kernel_lsp.generation.backends import Completion, approx_tokens

Reply = str | Callable[[list[dict]], str]


class ScriptedBackend:
    """Answers each chat with the next scripted reply (a string or a function of the messages). Summarise and
    triage prompts are answered by `side` replies so the script lists only kernel answers."""

    name = "scripted"

    def __init__(self, replies: list[Reply], *, count: Callable[[object], int] | None = None,
                 summary: str = "Summary: scripted kernel.", triage: str = "1"):
        self.replies = list(replies)
        self.calls: list[list[dict]] = []
        self.seeds: list[int] = []
        self.summary = summary
        self.triage = triage
        self._count = count or approx_tokens
        self._lock = threading.Lock()

    def count_tokens(self, text_or_messages) -> int:
        return self._count(text_or_messages)

    def chat(self, messages, *, max_tokens, temperature, seed, stop=None, cancel=None) -> Completion:
        with self._lock:
            self.calls.append(messages)
            user = messages[-1]["content"]
            if cancel is not None and cancel.is_set():
                return Completion("", self.count_tokens(messages), 0, 0.0, "cancelled")
            if user.startswith("In one or two sentences"):
                text = self.summary
            elif user.startswith("## Triage"):
                text = self.triage
            elif "## Analysis (no code yet)" in user:
                text = "- fuse relu and scale into one pass"
            else:
                self.seeds.append(seed)
                if not self.replies:
                    raise AssertionError("the scripted backend ran out of replies")
                reply = self.replies.pop(0)
                text = reply(messages) if callable(reply) else reply
            return Completion(text, self.count_tokens(messages), max(1, len(text) // 4), 0.01, "stop")

    def close(self) -> None:
        pass
