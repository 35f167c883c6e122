"""Background jobs on modules: queue, progress, cancel (no LSP types here; the server translates)."""

from .manager import (
    FINAL_STATES,
    KINDS,
    JobCancelled,
    JobContext,
    JobManager,
    JobOutcome,
    JobSnapshot,
)

__all__ = ["FINAL_STATES", "KINDS", "JobCancelled", "JobContext", "JobManager", "JobOutcome", "JobSnapshot"]
