"""The evaluator's own errors, raised to its caller (`api.py` exports them) and by the modules it delegates to."""

from __future__ import annotations


class EvaluatorError(Exception):
    """The evaluator itself cannot work (closed, no device, worker start failed)."""


class EvaluatorClosed(EvaluatorError):
    """The evaluator was closed while a call was under way: the call is cancelled, nobody's fault."""

    def __init__(self) -> None:
        super().__init__("the evaluator is closed")


class ReferenceFailed(EvaluatorError):
    """The reference itself does not load or run (its import, get_init_inputs(), Model(...), get_inputs(), its
    forward): the caller's input, never a candidate's fault. `message`: one line saying what failed; `detail`: the
    reference's own frames."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message, self.detail = message, detail
