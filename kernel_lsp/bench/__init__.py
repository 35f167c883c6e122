"""`kernel-lsp bench`: KernelBench-style sweeps with fast_p tables, resumable through the History, local or on Ray.

Modules: selection (which tasks), ledger (finished work in the History), baselines (live and reference
timings), sweep (the work), distributed (Ray), metrics (fast_p, geomean), report / plot / progress (output),
run (one sweep, shared by the single sweep and the comparison), compare (regimes side by side), main (the command).
"""

from .main import run_bench

__all__ = ["run_bench"]
