"""Benchmark (not a test): what starting a sample's build as soon as its code block is complete saves.

A stand-in model streams an answer the way a local model does: a sentence, the code block (a C++ CPU kernel, new
code every run so every build is cold), then a summary of `--tail-tokens` tokens at `--tok-s` tokens a second.
The real engine and the real CPU evaluator take it from there (best-of-n, one sample, one round). Runs with and
without the early build alternate (`--pairs` of each), so the machine's load falls on both alike; each run's
time is from the start of the job to its end (the candidate's verdict), and the ratio comes from this run.

    python benchmarks/bench_early_build.py [--pairs 2] [--tail-tokens 80] [--tok-s 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_evaluator import CPU_CPP, REF, nonce  # noqa: E402

from evaluator import EvalSettings, Evaluator  # noqa: E402
from kernel_lsp.config import Settings  # noqa: E402
from kernel_lsp.generation import Engine  # noqa: E402
from kernel_lsp.generation.backends.base import Completion  # noqa: E402
from kernel_lsp.history import History  # noqa: E402
from kernel_lsp.tasks import task_from_source  # noqa: E402


class StandIn:
    """Streams its answer: the code block at once, then the summary at `tok_s` tokens a second."""

    name = "stand-in"

    def __init__(self, tail_tokens: int, tok_s: float) -> None:
        self.tail_tokens, self.tok_s = tail_tokens, tok_s
        self.ended_at = 0.0  # perf_counter when the last kernel answer ended

    def count_tokens(self, text_or_messages: object) -> int:
        return len(str(text_or_messages)) // 4

    def _answer(self, messages: list[dict]) -> tuple[str, list[str]]:
        user = messages[-1]["content"]
        if user.startswith("In one or two sentences"):
            return "A fused loop.", []
        head = "Here is the kernel.\n```python\n" + nonce(CPU_CPP) + "```\n"
        return head, ["Summary:"] + [" word"] * self.tail_tokens + ["\n"]

    def chat(self, messages, *, max_tokens, temperature, seed, stop=None, cancel=None, on_text=None):
        t0 = time.perf_counter()
        head, tail = self._answer(messages)
        if on_text is not None:
            on_text(head)
        for piece in tail:
            time.sleep(1.0 / self.tok_s)
            if on_text is not None:
                on_text(piece)
        text = head + "".join(tail)
        if tail:
            self.ended_at = time.perf_counter()
        return Completion(text, self.count_tokens(messages), 1 + len(tail), time.perf_counter() - t0, "stop")

    def close(self) -> None:
        pass


class NoEarly(StandIn):
    """The same answers, through a backend that does not hand out its text as it comes."""

    def chat(self, messages, *, max_tokens, temperature, seed, stop=None, cancel=None):
        return super().chat(messages, max_tokens=max_tokens, temperature=temperature, seed=seed, stop=stop,
                            cancel=cancel)


def one(ev: Evaluator, backend: StandIn, task, state: Path) -> tuple[float, str, str]:
    with History(state) as h:
        t0 = time.perf_counter()
        res = Engine(Settings(), ev, h, backend).run(task, strategy="best-of-n", samples=1, rounds=1,
                                                      cancel=threading.Event())
        secs = time.perf_counter() - t0
    c = res.candidates[0] if res.candidates else None
    v = c.verdict if c is not None else None
    comp = v.stage("compile") if v is not None else None
    split = (f"the answer ended at {backend.ended_at - t0:.2f} s; then "
             + ", ".join(f"{st.name} {st.seconds:.2f}" for st in v.stages if st.seconds >= 0.05)) if v else ""
    return secs, c.status if c else res.state, f"{split}; {comp.message if comp else ''}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--tail-tokens", type=int, default=80)
    ap.add_argument("--tok-s", type=float, default=20.0)
    a = ap.parse_args()
    task = task_from_source(REF.format(rows=512, cols=1024), path="bench_ref.py")
    tail_s = a.tail_tokens / a.tok_s
    early, plain = [], []
    with tempfile.TemporaryDirectory() as tmp, \
            Evaluator(EvalSettings(device="cpu", cache_dir=str(Path(tmp) / "cache"), trials=2, timing_calls=20,
                                   timing_budget_s=2.0, time_compiled=False)) as ev:
        one(ev, NoEarly(0, a.tok_s), task, Path(tmp) / "warm")  # the evaluator's start and the reference's check
        for i in range(a.pairs):
            for label, backend, out in (("early", StandIn(a.tail_tokens, a.tok_s), early),
                                        ("plain", NoEarly(a.tail_tokens, a.tok_s), plain)):
                secs, status, comp = one(ev, backend, task, Path(tmp) / f"{label}{i}")
                out.append(secs)
                print(f"  {label} #{i}: {secs:.2f} s to the verdict ({status}); {comp}", flush=True)
    me, mp = statistics.median(early), statistics.median(plain)
    print(f"\nthe model writes {a.tail_tokens} tokens after its code block ({tail_s:.1f} s at {a.tok_s:g} tok/s)")
    print(f"job to verdict, median of {a.pairs}: early build {me:.2f} s, build after the answer {mp:.2f} s "
          f"-> {me / mp:.2f}x the time ({mp - me:.2f} s sooner)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
