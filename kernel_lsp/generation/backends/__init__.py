"""Model backends: in-process llama-cpp-python, or any OpenAI-compatible endpoint.

Which one: `endpoint` set -> OpenAIBackend; else `model` ("default": the embedded SmolLM2-135M GGUF, good for
exercising every path of the loop, not for writing kernels; or a path to a .gguf file) -> LlamaCppBackend.

Recommended for real results, Qwen2.5-Coder-7B-Instruct:

* in process (needs a CUDA build of llama-cpp-python for speed)::

      [tool.kernel-lsp]
      model = "~/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf"
      n_ctx = 16384          # prompts stay under 8k; room for 4k-token answers
      n_gpu_layers = -1      # every layer on the GPU
      max_tokens = 4096
      temperature = 0.7      # best-of-n needs diversity; seeds differ per sample
      samples = 4
      rounds = 3

* or served (vLLM / llama.cpp server / Ollama)::

      [tool.kernel-lsp]
      endpoint = "http://127.0.0.1:8000/v1"
      endpoint_model = "Qwen/Qwen2.5-Coder-7B-Instruct"
      api_key_env = "OPENAI_API_KEY"   # only when the server wants one
"""

from __future__ import annotations

from kernel_lsp.config import Settings
from kernel_lsp.models import ModelNotFound, resolve

from ..errors import BackendUnavailable
from .base import Backend, Completion, Message, approx_tokens
from .llamacpp import LlamaCppBackend
from .openai import OpenAIBackend

__all__ = ["Backend", "BackendSpec", "Completion", "LlamaCppBackend", "Message", "OpenAIBackend", "approx_tokens",
           "backend_spec", "open_backend", "open_spec"]


BackendSpec = tuple[type, tuple[tuple[str, object], ...]]  # a backend's class and its constructor's arguments


def backend_spec(settings: Settings) -> BackendSpec:
    """What `open_backend` would build: two settings with the same spec open the same model (a model kept open
    for one can serve the other). Raises BackendUnavailable."""
    try:
        spec = resolve(settings.model, settings.endpoint, settings.endpoint_model)
    except ModelNotFound as e:
        raise BackendUnavailable(str(e)) from None
    if spec.kind == "endpoint":
        return OpenAIBackend, (("base_url", spec.location), ("model", spec.name),
                               ("api_key_env", settings.api_key_env))
    return LlamaCppBackend, (("model_path", spec.location), ("n_ctx", settings.n_ctx),
                             ("n_gpu_layers", settings.n_gpu_layers), ("n_threads", settings.n_threads),
                             ("chat_format", settings.chat_format), ("seed", settings.seed), ("name", spec.name))


def open_backend(settings: Settings) -> Backend:
    """The backend the settings ask for. Cheap: a GGUF loads on first use. Raises BackendUnavailable."""
    return open_spec(backend_spec(settings))


def open_spec(spec: BackendSpec) -> Backend:
    cls, args = spec
    return cls(**dict(args))  # type: ignore[no-any-return]
