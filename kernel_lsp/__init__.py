"""kernel-lsp: a language server that replaces PyTorch operators with custom CUDA kernels.

The flow, one package each: documents (ast analysis) → tasks → jobs → generation (rounds of samples) →
evaluator verdicts (the separate `evaluator` package) → server features (diagnostics, hovers, edits).
"""

__version__ = "0.1.0"
