"""SQLite-backed history. Thread-safe (one connection guarded by a lock; WAL so readers in other processes,
e.g. a CLI while the server runs, see consistent data)."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evaluator.verdict import Profile, Verdict, profile_from_dict

from .ranking import rank_key
from .records import CandidateRecord, JobRecord, StepRecord

GENERATION_KIND = "optimize"  # the job kind of an engine run (generate, best-of-n, refine)

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    task_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    strategy TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL DEFAULT 'running',
    message TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    finished REAL
);
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY,
    task_key TEXT NOT NULL,
    number INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    job_id INTEGER,
    round INTEGER NOT NULL DEFAULT 0,
    sample INTEGER NOT NULL DEFAULT 0,
    strategy TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL,
    source_path TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'pending',
    verdict TEXT,
    speedup_eager REAL,
    speedup_compiled REAL,
    ms REAL,
    created REAL NOT NULL,
    UNIQUE (task_key, number)
);
CREATE INDEX IF NOT EXISTS candidates_task ON candidates (task_key, fingerprint);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY,
    job_id INTEGER NOT NULL,
    candidate_id INTEGER,
    round INTEGER NOT NULL DEFAULT 0,
    sample INTEGER NOT NULL DEFAULT 0,
    role TEXT NOT NULL DEFAULT 'generate',
    prompt TEXT NOT NULL DEFAULT '',
    completion TEXT NOT NULL DEFAULT '',
    summary TEXT NOT NULL DEFAULT '',
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    score REAL,
    reward REAL,
    extra TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_job ON steps (job_id);
CREATE TABLE IF NOT EXISTS profiles (
    task_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    device TEXT NOT NULL DEFAULT '',
    profile TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (task_key, fingerprint, device)
);
CREATE TABLE IF NOT EXISTS kv (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (namespace, key)
);
"""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:120] or "task"


class _Rows:
    """A statement's rows, read whole under the connection's lock: a cursor read after the lock is let go steps the
    shared connection while other threads run statements on it (two tasks of a sweep asking for their profiles at
    once; on the H200 one such read got a row of nulls)."""

    __slots__ = ("lastrowid", "rows")

    def __init__(self, cur: sqlite3.Cursor) -> None:
        self.rows = cur.fetchall()
        self.lastrowid = cur.lastrowid

    def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[Any]:
        return self.rows


class History:
    def __init__(self, root: str | Path):
        """`root` is the state folder (e.g. <workspace>/.kernel-lsp); the database is root/history.sqlite."""
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / "history.sqlite"
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _exec(self, sql: str, args: tuple = ()) -> _Rows:
        with self._lock:  # run and read whole under the lock (see _Rows)
            return _Rows(self._db.execute(sql, args))

    # --- jobs ------------------------------------------------------------------------------------------------
    def start_job(self, task_key: str, fingerprint: str, kind: str, *, strategy: str = "", model: str = "",
                  settings: dict[str, Any] | None = None) -> int:
        cur = self._exec(
            "INSERT INTO jobs (task_key, fingerprint, kind, strategy, model, settings, created) VALUES (?,?,?,?,?,?,?)",
            (task_key, fingerprint, kind, strategy, model, json.dumps(settings or {}), time.time()),
        )
        return int(cur.lastrowid)

    def finish_job(self, job_id: int, state: str, message: str = "") -> None:
        self._exec("UPDATE jobs SET state=?, message=?, finished=? WHERE id=?", (state, message, time.time(), job_id))

    def set_job_model(self, job_id: int, model: str) -> None:
        """The model of a job opened before its model was known (the server opens the record first)."""
        self._exec("UPDATE jobs SET model=? WHERE id=?", (model, job_id))

    def job(self, job_id: int) -> JobRecord | None:
        row = self._exec("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return self._job(row) if row else None

    def jobs(self, task_key: str | None = None) -> list[JobRecord]:
        if task_key is None:
            rows = self._exec("SELECT * FROM jobs ORDER BY id").fetchall()
        else:
            rows = self._exec("SELECT * FROM jobs WHERE task_key=? ORDER BY id", (task_key,)).fetchall()
        return [self._job(r) for r in rows]

    @staticmethod
    def _job(r: sqlite3.Row) -> JobRecord:
        return JobRecord(r["id"], r["task_key"], r["fingerprint"], r["kind"], r["strategy"], r["model"],
                         json.loads(r["settings"]), r["state"], r["message"], r["created"], r["finished"])

    # --- candidates ------------------------------------------------------------------------------------------
    def add_candidate(self, task_key: str, fingerprint: str, source: str, *, job_id: int | None = None,
                      round: int = 0, sample: int = 0, strategy: str = "",
                      verdict: Verdict | None = None) -> CandidateRecord:
        with self._lock:
            row = self._db.execute("SELECT COALESCE(MAX(number), 0) + 1 FROM candidates WHERE task_key=?",
                                   (task_key,)).fetchone()
            number = int(row[0])
            folder = self.root / "candidates" / _slug(task_key)
            folder.mkdir(parents=True, exist_ok=True)
            source_path = folder / f"candidate_{number}.py"
            source_path.write_text(source, encoding="utf-8")
            cur = self._db.execute(
                "INSERT INTO candidates (task_key, number, fingerprint, job_id, round, sample, strategy, source,"
                " source_path, created) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (task_key, number, fingerprint, job_id, round, sample, strategy, source, str(source_path),
                 time.time()),
            )
            cid = int(cur.lastrowid)
            if verdict is not None:
                self.set_verdict(cid, verdict)
            rec = self.candidate_by_id(cid)
            assert rec is not None
            return rec

    def set_verdict(self, candidate_id: int, verdict: Verdict) -> None:
        t = verdict.timing
        self._exec(
            "UPDATE candidates SET status=?, verdict=?, speedup_eager=?, speedup_compiled=?, ms=? WHERE id=?",
            (verdict.status, verdict.to_json(), t.speedup_eager if t else None, t.speedup_compiled if t else None,
             t.candidate.median_ms if t and t.candidate else None, candidate_id),
        )

    def candidate_by_id(self, candidate_id: int) -> CandidateRecord | None:
        row = self._exec("SELECT * FROM candidates WHERE id=?", (candidate_id,)).fetchone()
        return self._cand(row) if row else None

    def candidate(self, task_key: str, number: int) -> CandidateRecord | None:
        row = self._exec("SELECT * FROM candidates WHERE task_key=? AND number=?", (task_key, number)).fetchone()
        return self._cand(row) if row else None

    def candidates(self, task_key: str, fingerprint: str | None = None) -> list[CandidateRecord]:
        if fingerprint is None:
            rows = self._exec("SELECT * FROM candidates WHERE task_key=? ORDER BY number", (task_key,)).fetchall()
        else:
            rows = self._exec("SELECT * FROM candidates WHERE task_key=? AND fingerprint=? ORDER BY number",
                              (task_key, fingerprint)).fetchall()
        return [self._cand(r) for r in rows]

    def best(self, task_key: str, fingerprint: str | None = None, *, job_id: int | None = None) -> CandidateRecord | None:
        """The first candidate with a verdict by `ranking.rank_key`: the best correct one, else the least bad."""
        cands = self.candidates(task_key, fingerprint)
        if job_id is not None:
            cands = [c for c in cands if c.job_id == job_id]
        cands = [c for c in cands if c.verdict is not None]
        return min(cands, key=rank_key) if cands else None

    def task_keys(self) -> list[str]:
        return [r[0] for r in self._exec("SELECT DISTINCT task_key FROM candidates ORDER BY task_key").fetchall()]

    @staticmethod
    def _cand(r: sqlite3.Row) -> CandidateRecord:
        v = Verdict.from_json(r["verdict"]) if r["verdict"] else None
        return CandidateRecord(r["id"], r["task_key"], r["number"], r["fingerprint"], r["job_id"], r["round"],
                               r["sample"], r["strategy"], r["source"], r["source_path"], r["status"], v, r["created"])

    # --- trajectory steps ------------------------------------------------------------------------------------
    def add_step(self, job_id: int, *, candidate_id: int | None = None, round: int = 0, sample: int = 0,
                 role: str = "generate", prompt: str = "", completion: str = "", summary: str = "",
                 prompt_tokens: int | None = None, completion_tokens: int | None = None,
                 score: float | None = None, extra: dict[str, Any] | None = None) -> int:
        cur = self._exec(
            "INSERT INTO steps (job_id, candidate_id, round, sample, role, prompt, completion, summary,"
            " prompt_tokens, completion_tokens, score, extra, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (job_id, candidate_id, round, sample, role, prompt, completion, summary, prompt_tokens,
             completion_tokens, score, json.dumps(extra or {}), time.time()),
        )
        return int(cur.lastrowid)

    def update_step(self, step_id: int, **fields: Any) -> None:
        allowed = {"candidate_id", "summary", "score", "reward", "completion", "completion_tokens", "extra"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"cannot update step fields {sorted(bad)}")
        if "extra" in fields:
            fields["extra"] = json.dumps(fields["extra"])
        cols = ", ".join(f"{k}=?" for k in fields)
        self._exec(f"UPDATE steps SET {cols} WHERE id=?", (*fields.values(), step_id))

    def set_rewards(self, rewards: dict[int, float]) -> None:
        with self._lock:
            self._db.executemany("UPDATE steps SET reward=? WHERE id=?", [(r, sid) for sid, r in rewards.items()])

    def steps(self, job_id: int) -> list[StepRecord]:
        rows = self._exec("SELECT * FROM steps WHERE job_id=? ORDER BY id", (job_id,)).fetchall()
        return [StepRecord(r["id"], r["job_id"], r["candidate_id"], r["round"], r["sample"], r["role"], r["prompt"],
                           r["completion"], r["summary"], r["prompt_tokens"], r["completion_tokens"], r["score"],
                           r["reward"], json.loads(r["extra"]), r["created"]) for r in rows]

    def answer_counts(self) -> dict[int, tuple[int, int]]:
        """job id -> (the model's kernel answers, how many of them held a usable ModelNew), for jobs with any."""
        rows = self._exec("SELECT job_id, COUNT(*), COUNT(candidate_id) FROM steps WHERE role='generate'"
                          " GROUP BY job_id").fetchall()
        return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}

    def trajectory(self, job_ids: list[int] | None = None
                   ) -> Iterator[tuple[JobRecord, StepRecord, CandidateRecord | None]]:
        """Each step of the jobs (all by default), in order, with its job and the candidate extracted from it."""
        for jid in job_ids if job_ids is not None else [j.id for j in self.jobs()]:
            job = self.job(jid)
            if job is None:
                continue
            for s in self.steps(jid):
                yield job, s, self.candidate_by_id(s.candidate_id) if s.candidate_id else None

    def export_jsonl(self, out: str | Path, job_ids: list[int] | None = None) -> int:
        """Write one JSON object per step (prompt, completion, summary, kernel, verdict, reward). Returns count.
        The training dataset (`kernel-lsp export`, kernel_lsp/dataset.py) is built from the same `trajectory`."""
        n = 0
        with Path(out).open("w", encoding="utf-8") as f:
            for job, s, cand in self.trajectory(job_ids):
                f.write(json.dumps({
                    "job": job.id, "task": job.task_key, "strategy": job.strategy,
                    "model": job.model, "step": s.id, "round": s.round, "sample": s.sample,
                    "role": s.role, "prompt": s.prompt, "completion": s.completion, "summary": s.summary,
                    "prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion_tokens,
                    "kernel": cand.source if cand else None,
                    "verdict": cand.verdict.to_dict() if cand and cand.verdict else None,
                    "score": s.score, "reward": s.reward, **({"extra": s.extra} if s.extra else {}),
                }) + "\n")
                n += 1
        return n

    # --- profiles and other cached facts ---------------------------------------------------------------------
    def save_profile(self, task_key: str, fingerprint: str, profile: Profile) -> None:
        from dataclasses import asdict

        self._exec("INSERT OR REPLACE INTO profiles VALUES (?,?,?,?,?)",
                   (task_key, fingerprint, profile.device, json.dumps(asdict(profile)), time.time()))

    def profile(self, task_key: str, fingerprint: str) -> Profile | None:
        row = self._exec("SELECT profile FROM profiles WHERE task_key=? AND fingerprint=? ORDER BY created DESC",
                         (task_key, fingerprint)).fetchone()
        return profile_from_dict(json.loads(row[0])) if row else None

    def put(self, namespace: str, key: str, value: Any) -> None:
        self._exec("INSERT OR REPLACE INTO kv VALUES (?,?,?,?)", (namespace, key, json.dumps(value), time.time()))

    def get(self, namespace: str, key: str, default: Any = None) -> Any:
        row = self._exec("SELECT value FROM kv WHERE namespace=? AND key=?", (namespace, key)).fetchone()
        return json.loads(row[0]) if row else default
