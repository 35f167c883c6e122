"""Generation throughput and context size.

1. Raw llama-cpp-python tokens/s vs tokens/s through LlamaCppBackend (streaming, cancel checks, token counting):
   goal >= 90 %.
2. Prompt tokens per round over 8 refine rounds of the real engine (embedded model, CPU evaluator): goal
   <= 8k at round 8 and flat after round 2.

    python benchmarks/bench_generation.py [--tokens 256] [--repeats 3] [--rounds 8] [--skip-engine]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = [{"role": "system", "content": "You write C++ code."},
          {"role": "user", "content": "Write a C++ function that sums an array of floats, with comments."}]


def throughput(tokens: int, repeats: int, threads: int) -> None:
    import llama_cpp

    from kernel_lsp.generation.backends import LlamaCppBackend
    from kernel_lsp.models import embedded_gguf

    path = str(embedded_gguf())
    raw = llama_cpp.Llama(path, n_ctx=4096, n_threads=threads or None, verbose=False)
    ours = LlamaCppBackend(path, n_ctx=4096, n_threads=threads)
    ours.load()
    r_raw, r_ours = [], []
    for i in range(repeats):  # interleaved, so load changes hit both alike
        t0 = time.perf_counter()
        out = raw.create_chat_completion(PROMPT, max_tokens=tokens, temperature=0.7, seed=100 + i)
        r_raw.append(out["usage"]["completion_tokens"] / (time.perf_counter() - t0))
        t0 = time.perf_counter()  # wall time around the whole call: token counting and streaming included
        c = ours.chat(PROMPT, max_tokens=tokens, temperature=0.7, seed=100 + i)
        r_ours.append(c.completion_tokens / (time.perf_counter() - t0))
    raw_tps, our_tps = statistics.median(r_raw), statistics.median(r_ours)
    print(f"raw llama-cpp:      {raw_tps:7.1f} tok/s  (runs: {', '.join(f'{x:.0f}' for x in r_raw)})")
    print(f"through backend:    {our_tps:7.1f} tok/s  (runs: {', '.join(f'{x:.0f}' for x in r_ours)})")
    print(f"ratio:              {100 * our_tps / raw_tps:7.1f} %  (goal >= 90 %)")
    ours.close()


def context_growth(rounds: int, tokens: int) -> None:
    from evaluator import EvalSettings, Evaluator
    from kernel_lsp.config import Settings
    from kernel_lsp.generation import Engine
    from kernel_lsp.history import History
    from kernel_lsp.tasks import task_from_file

    task = task_from_file(ROOT / "examples" / "relu_scale.py")
    settings = Settings(max_tokens=tokens, history_window=3, device="cpu")
    with tempfile.TemporaryDirectory() as d, History(d) as h, \
            Evaluator(EvalSettings(device="cpu", trials=1, timing_calls=10, time_compiled=False)) as ev:
        engine = Engine(settings, ev, h)
        t0 = time.perf_counter()
        result = engine.run(task, strategy="refine", samples=1, rounds=rounds)
        engine.close()
        steps = [s for s in h.steps(result.job_id) if s.role == "generate"]
        print(f"engine: {rounds} refine rounds in {time.perf_counter() - t0:.0f} s: {result.message}")
        print("round  prompt tokens  template        outcome")
        for s, n in zip(steps, result.prompt_tokens_per_round):
            cand = h.candidate_by_id(s.candidate_id) if s.candidate_id else None
            outcome = cand.status if cand else "no kernel"
            print(f"{s.round:5d}  {n:13d}  {s.extra.get('template', ''):14s}  {outcome}")
        tk = result.prompt_tokens_per_round
        if len(tk) >= 3:
            later = tk[1:]
            print(f"max {max(tk)} (goal <= 8000); rounds 2..{len(tk)}: spread {max(later) - min(later)} tokens "
                  f"({100 * (max(later) - min(later)) / max(later):.0f} %)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--skip-engine", action="store_true")
    args = ap.parse_args()
    throughput(args.tokens, args.repeats, args.threads)
    if not args.skip_engine:
        context_growth(args.rounds, args.tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
