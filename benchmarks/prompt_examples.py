"""The prompts' worked examples (prompts/examples/<stem>_ref.py + _cuda.py / _cpu.py) against their references:
same outputs on fresh inputs (the same seed builds both modules' parameters; one trial scales the inputs by 8),
and the time of each. Plain torch, no evaluator: a quick check on a machine without this package's dependencies
(the GPU machines). The oracle's own check of the CPU pairs is tests/generation/test_forms.py.

    python benchmarks/prompt_examples.py [--device cuda|cpu] [--examples DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parents[1] / "prompts" / "examples"


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def median_ms(fn, xs, dev: torch.device, n: int = 30) -> float:
    for _ in range(3):
        fn(*xs)
    times = []
    for _ in range(n):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*xs)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t = time.perf_counter()
            fn(*xs)
            times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[len(times) // 2]


def check(stem: str, folder: Path, dev: torch.device) -> bool:
    ref = load(folder / f"{stem}_ref.py", f"{stem}_ref")
    cand = load(folder / f"{stem}_{'cuda' if dev.type == 'cuda' else 'cpu'}.py", f"{stem}_cand")
    init = ref.get_init_inputs()
    torch.manual_seed(0)
    model = ref.Model(*init).to(dev)
    torch.manual_seed(0)
    new = cand.ModelNew(*init).to(dev)
    ok, worst = True, 0.0
    with torch.no_grad():
        for trial in range(5):
            torch.manual_seed(100 + trial)
            xs = [x.to(dev) * (8.0 if trial == 4 else 1.0) for x in ref.get_inputs()]
            want, got = model(*[x.clone() for x in xs]), new(*[x.clone() for x in xs])
            same = got.shape == want.shape and got.dtype == want.dtype and torch.allclose(got, want, atol=1e-4,
                                                                                          rtol=1e-4)
            worst = max(worst, (got.float() - want.float()).abs().max().item())
            ok &= bool(same)
        xs = [x.to(dev) for x in ref.get_inputs()]
        t_ref, t_new = median_ms(model, xs, dev), median_ms(new, xs, dev)
    print(f"{stem:20s} {'ok' if ok else 'MISMATCH':8s} max abs err {worst:.3g}   reference {t_ref:.3f} ms   "
          f"example {t_new:.3f} ms   speedup {t_ref / t_new:.2f}x")
    return ok


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--examples", type=Path, default=HERE)
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", tempfile.mkdtemp(prefix="klsp_examples_"))
    print(f"device {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}, torch {torch.__version__}")
    stems = sorted(p.name[: -len("_ref.py")] for p in args.examples.glob("*_ref.py"))
    return 0 if all([check(s, args.examples, dev) for s in stems]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
