"""The generation engine: prompts (templates as data), model backends, extraction, bounded context, strategies,
per-step rewards. It knows prompts, models and the evaluator's Verdict; it knows nothing of LSP.

    from kernel_lsp.generation import Engine
    engine = Engine(settings, evaluator, history)          # backend: open_backend(settings), lazily
    result = engine.run(task, strategy="profile-guided", cancel=event, on_event=print)
"""

from .backends import Backend, Completion, LlamaCppBackend, OpenAIBackend, open_backend
from .engine import STAGES, Engine, EngineEvent, RunResult
from .errors import BackendUnavailable, ExtractionError, GenerationError
from .extract import Extracted, extract
from .prompts import PromptLibrary
from .strategies import Plan, make_plan

__all__ = ["STAGES", "Backend", "BackendUnavailable", "Completion", "Engine", "EngineEvent", "Extracted",
           "ExtractionError", "GenerationError", "LlamaCppBackend", "OpenAIBackend", "Plan", "PromptLibrary",
           "RunResult", "extract", "make_plan", "open_backend"]
