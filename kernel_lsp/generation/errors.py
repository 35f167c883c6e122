"""Errors of the generation engine. Messages are for users: one line, saying what to do."""

from __future__ import annotations

from ..tasks import reference_failure

__all__ = ["BackendUnavailable", "ExtractionError", "GenerationError", "OracleFailed", "ReferenceFailed",
           "reference_failure"]


class GenerationError(RuntimeError):
    """The engine cannot go on: no model, an endpoint that is down, a prompt that does not fit."""


class BackendUnavailable(GenerationError):
    """The model backend cannot be opened or reached."""


class ExtractionError(ValueError):
    """A completion holds no usable `ModelNew`. `reason` is fed back to the model in the next prompt; `problem`
    says the same to the user, in a few words (never the instructions meant for the model)."""

    def __init__(self, reason: str, problem: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.problem = problem or reason


class OracleFailed(GenerationError):
    """The evaluator could not do its part (a worker lost, no device): nobody's input was wrong, run it again."""


class ReferenceFailed(GenerationError):
    """The reference module does not run (import error, get_inputs() raises, forward fails): nothing to generate."""
