"""Parent side: the environment a worker starts with: an allow-list of the evaluator's variables, never one that
looks like a credential, and this package on its path. Nothing here imports torch."""

from __future__ import annotations

import os
from pathlib import Path

# Variables a worker may see; everything else (API keys, tokens, cloud credentials) is dropped.
ENV_ALLOW = {
    "PATH", "LANG", "LANGUAGE", "TERM", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH",
    "LIBRARY_PATH", "CPATH", "CC", "CXX", "CUDAHOSTCXX", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "SSL_CERT_FILE",
    "KLSP_DEBUG_TIMING",
}
ENV_ALLOW_PREFIXES = ("LC_", "CUDA_", "TORCH_", "TORCHINDUCTOR_", "TRITON_", "NVIDIA_", "NVCC_", "CUDNN_", "NCCL_")
# Folders of the host's caches (set by a user, or by torch itself once it has compiled something in this process):
# a trusted worker may share them; a sandboxed one keeps its caches under its own HOME/TMPDIR, since it may not
# write outside its folder (torch's profiler, importing inductor, fails on a cache folder it cannot write).
HOST_CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH",
                   "TORCH_HOME")
# Never passed even when a prefix matches (credentials that happen to share a prefix).
ENV_DENY_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {}
    for k, v in os.environ.items():
        if any(w in k.upper() for w in ENV_DENY_WORDS):
            continue
        if k in ENV_ALLOW or k.startswith(ENV_ALLOW_PREFIXES):
            env[k] = v
    root = str(Path(__file__).resolve().parents[2])  # the worker imports this package also from a checkout
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env
