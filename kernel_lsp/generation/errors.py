"""Errors of the generation engine. Messages are for users: one line, saying what to do."""

from __future__ import annotations

from ..tasks import reference_failure

__all__ = ["BackendUnavailable", "ExtractionError", "GenerationError", "ReferenceFailed", "reference_failure"]


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


class ReferenceFailed(GenerationError):
    """The reference module does not run (import error, get_inputs() raises, forward fails): nothing to generate."""
