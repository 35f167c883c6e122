"""The history store: the one place results live (SQLite in the workspace's state folder).

Candidates, their verdicts, jobs, profiles and trajectory steps with rewards. Diagnostics, hovers, the CLI
tables and bench all read from here, so results survive restarts.
"""

from .ranking import best, is_win, offered, rank_key, shown_faster
from .store import CandidateRecord, History, JobRecord, StepRecord
from .verify import VerifyRecord

__all__ = ["CandidateRecord", "History", "JobRecord", "StepRecord", "VerifyRecord", "best", "is_win", "offered",
           "rank_key", "shown_faster"]
