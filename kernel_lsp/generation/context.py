"""Bounded context: what each prompt carries, and nothing more.

Every prompt is built fresh from parts of fixed size (it is never an appended conversation):

* the task (the reference source) and the output contract,
* the reference's profile (profiling-guided and agent prompts), at most `max_ops` rows, and the form of kernel it
  calls for (forms.py: the library GEMM / conv plus one fused kernel, or a full custom kernel),
* for refinement: the one candidate being refined (its source, capped at FOCUS_CHARS) with its feedback
  (compiler log capped at LOG_LINES lines / LOG_CHARS characters, mismatch figures, timings, profile),
* the last `history_window` other attempts, one compact line each: status + the first error, mismatch or timing
  + the model's own one-sentence summary.

Never carried: chain of thought (`<think>` and the other reasoning markers of extract.REASONING_TAGS: a summary or
an analysis is taken from the completion without them, and stripped again here), earlier completions, earlier
prompts. So the prompt size is flat
from round 2 on, apart from the few lines the history gains until the window is full. If a prompt still exceeds
the token budget, history lines go first, then the focus source and the log are cut further.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evaluator.verdict import COMPILE_ERROR, CORRECT, INCORRECT, Verdict

from .. import verdicts
from .extract import strip_thinking
from .forms import kernel_form
from .prompts import PromptLibrary

NO_KERNEL = "no_kernel"  # the completion held no usable ModelNew (extraction failed)
FOCUS_CHARS = 12_000
LOG_LINES = 40
LOG_CHARS = 3_000
DETAIL_CHARS = 160
SUMMARY_CHARS = 240


@dataclass
class Attempt:
    """One sample of one round, as the context (and the triage) sees it."""

    step_id: int
    round: int
    sample: int
    source: str = ""  # "" when extraction failed
    summary: str = ""
    verdict: Verdict | None = None
    error: str = ""  # the extraction failure, fed back to the model
    problem: str = ""  # the same in a few words, for the user
    number: int | None = None  # the candidate number, when a kernel was extracted
    candidate_id: int | None = None
    parent_step: int | None = None
    score: float | None = None  # rewards.score of the verdict, set when the verdict is in

    @property
    def status(self) -> str:
        if self.verdict is not None:
            return self.verdict.status
        return NO_KERNEL if self.error or not self.source else "pending"

    @property
    def correct(self) -> bool:
        return self.verdict is not None and self.verdict.status == CORRECT

    @property
    def detail(self) -> str:
        return compact_detail(self.verdict, self.error)

    def label(self) -> str:
        if self.number is not None:
            return f"candidate {self.number}"
        return "the file's ModelNew" if self.round == 0 else f"round {self.round} sample {self.sample}"


def _first_error_line(log: str) -> str:
    for line in log.splitlines():
        if re.search(r"\berror\b", line, re.IGNORECASE):
            return line.strip()
    return next((l.strip() for l in log.splitlines() if l.strip()), "")


def _cut(text: str, n: int) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= n else text[: n - 1] + "…"


def compact_detail(v: Verdict | None, error: str = "") -> str:
    """Status detail in one short line: the first error, the mismatch, or the timing."""
    if v is None:
        return _cut(error, DETAIL_CHARS)
    if v.status == CORRECT:
        t = v.timing
        if t and t.candidate:
            sp = f", {verdicts.timing_speed(t)}" if t.speedup_eager else ""
            return f"{t.candidate.median_ms:.3f} ms{sp}"
        return "correct (not timed)"
    if v.status == INCORRECT and v.correctness is not None:
        c = v.correctness
        figures = f"max abs err {c.max_abs_err:.3g}" if c.max_abs_err is not None else ""
        return _cut(c.message or f"{v.message} {figures}", DETAIL_CHARS)
    if v.status == COMPILE_ERROR and v.compiler_log:
        return _cut(_first_error_line(v.compiler_log), DETAIL_CHARS)
    return _cut(v.message or v.status, DETAIL_CHARS)


def trim_log(log: str, lines: int = LOG_LINES, chars: int = LOG_CHARS) -> str:
    """Keep the first errors: lines from the first 'error' on, at most `lines` lines and `chars` characters."""
    all_lines = log.splitlines()
    start = next((i for i, l in enumerate(all_lines) if re.search(r"\berror\b", l, re.IGNORECASE)), 0)
    kept = all_lines[max(0, start - 2): max(0, start - 2) + lines]
    text = "\n".join(kept)
    return text if len(text) <= chars else text[:chars] + "\n[... log trimmed]"


def _cap_source(src: str, chars: int) -> str:
    if len(src) <= chars:
        return src
    return src[:chars] + "\n# [... source trimmed: it was too long to show in full]\n"


@dataclass(frozen=True)
class Target:
    kind: str  # "cuda" | "cpu"
    device: str  # words: "NVIDIA H200 (sm_90)" or "the CPU"
    binding: str = "torch"  # how the kernels are called from Python (settings.binding): "torch" | "ctypes"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "device": self.device, "binding": self.binding}


class ContextBuilder:
    def __init__(self, library: PromptLibrary, task: Any, target: Target, *, history_window: int,
                 count_tokens: Callable[[Any], int], budget_tokens: int):
        self.library = library
        self.task = task
        self.target = target
        self.window = history_window
        self.count_tokens = count_tokens
        self.budget = budget_tokens

    def system(self) -> str:
        return self.library.render("system", target=self.target.as_dict())

    def _messages(self, user: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system()}, {"role": "user", "content": user}]

    @staticmethod
    def history_lines(attempts: list[Attempt], window: int, exclude: Attempt | None = None) -> list[dict[str, Any]]:
        chosen = [a for a in attempts if a is not exclude][-window:] if window > 0 else []
        return [{"number": a.number if a.number is not None else "-", "name": a.label(), "round": a.round,
                 "status": a.status,
                 "detail": a.detail, "summary": _cut(strip_thinking(a.summary), SUMMARY_CHARS)} for a in chosen]

    def render(self, template: str, *, attempts: list[Attempt] | None = None, focus: Attempt | None = None,
               **extra: Any) -> list[dict[str, str]]:
        """Render a prompt within the token budget."""
        attempts = attempts or []
        window = self.window
        focus_chars, log_lines = FOCUS_CHARS, LOG_LINES
        while True:
            ctx: dict[str, Any] = {
                "task": {"name": self.task.name, "reference_src": self.task.reference_src},
                "target": self.target.as_dict(),
                "history": self.history_lines(attempts, window, focus),
                "focus": self._focus(focus, focus_chars, log_lines) if focus is not None else None,
                "profile": None, "analysis": "", "examples": [], "example": None,
            }
            ctx.update(extra)
            if isinstance(ctx.get("analysis"), str):
                ctx["analysis"] = strip_thinking(ctx["analysis"])
            if "form" not in extra:
                ctx["form"] = kernel_form(ctx["profile"])
            messages = self._messages(self.library.render(template, **ctx))
            if self.count_tokens(messages) <= self.budget:
                return messages
            if window > 0:
                window -= 1
            elif focus is not None and focus_chars > 1500:
                focus_chars //= 2
                log_lines = max(8, log_lines // 2)
            else:
                return messages  # the task alone exceeds the budget; the backend reports it clearly

    @staticmethod
    def _focus(a: Attempt, chars: int, log_lines: int) -> dict[str, Any]:
        v = a.verdict
        failed = next((s for s in (v.stages if v else []) if not s.ok and not s.skipped), None)
        return {
            "number": a.number if a.number is not None else "-",
            "label": a.label(),
            "source": _cap_source(a.source, chars),
            "status": a.status,
            "stage": failed.name if failed else "",
            "message": (v.message if v else a.error) or a.status,
            "kernel": v.kernel.message if v and v.kernel else "",  # what its own code did (the kernel finding)
            "compiler_log": trim_log(v.compiler_log, log_lines) if v and v.compiler_log else "",
            "correctness": v.correctness if v else None,
            "timing": v.timing if v else None,
            "profile": v.profile if v else None,
        }
