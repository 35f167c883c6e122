"""Errors of the generation engine. Messages are for users: one line, saying what to do."""

from __future__ import annotations


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


def reference_failure(module: str, detail: str) -> str:
    """The message of a ReferenceFailed: what failed and what to do."""
    first = detail.strip().splitlines()[0] if detail.strip() else "it failed"
    return (f"{module} does not run: {first[:300]} — fix the module so the file runs (its imports, "
            f"get_inputs(), get_init_inputs()), then try again")
