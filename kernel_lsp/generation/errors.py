"""Errors of the generation engine. Messages are for users: one line, saying what to do."""

from __future__ import annotations


class GenerationError(RuntimeError):
    """The engine cannot go on: no model, an endpoint that is down, a prompt that does not fit."""


class BackendUnavailable(GenerationError):
    """The model backend cannot be opened or reached."""


class ExtractionError(ValueError):
    """A completion holds no usable `ModelNew`. `reason` is fed back to the model in the next prompt."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
