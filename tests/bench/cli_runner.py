"""`python -m tests.bench.cli_runner bench ...`: the real `kernel-lsp` CLI for subprocess tests, with the
evaluator told not to time torch.compile of the reference (inductor on 2 CPU cores takes about a minute per
task; what the sweep does with compile timings is covered by the fake-evaluator tests)."""

from __future__ import annotations

import sys
from dataclasses import replace

from kernel_lsp.bench import main as bench_main
from kernel_lsp.cli import main

_orig = bench_main.make_evaluator


def _fast(settings, ray_address):  # type: ignore[no-untyped-def]
    return _orig(replace(settings, time_compiled=False, warm_workers=0), ray_address)


bench_main.make_evaluator = _fast

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
