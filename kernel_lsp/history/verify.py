"""The last check of a file's own ModelNew, per task: one typed record in the History (its `verify` namespace),
written by the verify job or taken over from an accepted candidate, read by the diagnostics, the hover and the
save → verify policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evaluator.verdict import Verdict

if TYPE_CHECKING:
    from .store import History

NAMESPACE = "verify"  # History kv namespace: task key -> the record


@dataclass(frozen=True)
class VerifyRecord:
    fingerprint: str  # the task's (reference and inputs) when it was checked
    document: str  # hash of the whole file's text it was checked at: another text makes the record stale
    candidate: str  # hash of the ModelNew source checked
    verdict: Verdict
    job: int | None = None  # the verify job that made it; None: taken over from an accepted candidate
    accepted: int | None = None  # that accepted candidate's number

    def current(self, document: str) -> bool:
        return self.document == document

    def accepted_note(self) -> str:
        """' (candidate 3 as accepted: its check)' for a record taken over from an accepted candidate."""
        return f" (candidate {self.accepted} as accepted: its check)" if self.accepted is not None else ""

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "document": self.document, "candidate": self.candidate,
                "verdict": self.verdict.to_dict(), "job": self.job, "accepted": self.accepted}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerifyRecord:
        """Raises KeyError, TypeError, ValueError or AttributeError for a record this version cannot read."""
        return cls(str(d["fingerprint"]), str(d["document"]), str(d["candidate"]), Verdict.from_dict(d["verdict"]),
                   d.get("job"), d.get("accepted"))


def save(history: History, key: str, record: VerifyRecord) -> None:
    history.put(NAMESPACE, key, record.to_dict())


def load(history: History | None, key: str) -> VerifyRecord | None:
    """The task's record; None when there is none or it cannot be read (an older or damaged record)."""
    if history is None:
        return None
    raw = history.get(NAMESPACE, key)
    if not raw:
        return None
    try:
        return VerifyRecord.from_dict(raw)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
